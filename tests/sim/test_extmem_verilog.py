"""``wanreduce verilog --buffers external``: the AXI4 master ports reach the port table and the exported
Verilog lints clean (``verilator --lint-only -Wall`` with the project's waivers); bad options are one line
and exit code 2. The W = 512, K = 2 export of the issue is marked slow (about a minute of conversion)."""

import json

import pytest

from wanreduce.cli import main
from wanreduce.hw.extmem import axi4_fields
from wanreduce.sim.synth import verilog

pytestmark = pytest.mark.rtl


def _cli(capsys, *argv):
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def _check(out_dir, top, ports, prefix="m_axi_mem"):
    meta = json.loads((out_dir / f"{top}.json").read_text())
    assert meta["config"]["buffers"] == "external" and meta["config"]["mem_ports"] == ports
    table = (out_dir / f"{top}.md").read_text()
    fields = axi4_fields(data_width=8, addr_width=1, id_width=1)
    for k in range(ports):
        for name in fields:
            port = f"{prefix}{k}__{name}"
            assert port in meta["ports"], f"{port} is not a port of the exported top"
            assert f"| `{port}` |" in table and "external memory" in table, f"{port} is not in the port table"
    assert f"{prefix}{ports}__awvalid" not in meta["ports"], "more memory ports than asked for"
    ok, log = verilog.lint(out_dir / f"{top}.v", top=top)
    assert ok, f"lint of the external build failed:\n{log[-4000:]}"


def test_small_external_export_lints_clean(capsys, tmp_path):
    code, _, err = _cli(
        capsys,
        "verilog",
        "-o",
        str(tmp_path),
        "--width",
        "64",
        "--slots",
        "4",
        "--members",
        "4",
        "--chunk-bytes",
        "64",
        "--mod-stages",
        "4",
        "--entry",
        "payload",
        "--top",
        "core",
        "--buffers",
        "external",
        "--mem-ports",
        "2",
        "--mem-addr-width",
        "20",
    )
    assert code == 0, err
    _check(tmp_path, "wanreduce_core", 2, prefix="mem")


@pytest.mark.slow
def test_w512_two_port_export_lints_clean(capsys, tmp_path):
    code, _, err = _cli(
        capsys, "verilog", "-o", str(tmp_path), "--width", "512", "--buffers", "external", "--mem-ports", "2"
    )
    assert code == 0, err
    _check(tmp_path, "wanreduce_axi", 2)


@pytest.mark.parametrize(
    "extra,message",
    [
        (["--mem-ports", "3"], "--mem-ports"),
        (["--chunk-bytes", "8192"], "256 beats"),
        (["--width", "512", "--chunk-bytes", "8192"], "4 KiB"),
        (["--mem-addr-width", "12"], "address bits"),
        (["--mem-id-width", "1", "--members", "8"], "AXI ID"),
    ],
)
def test_bad_external_options_are_one_line(capsys, tmp_path, extra, message):
    code, out, err = _cli(
        capsys, "verilog", "-o", str(tmp_path), "--width", "64", "--buffers", "external", *extra
    )
    assert code == 2, (code, out, err)
    assert message in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) <= 3, err  # argparse's usage line, then the one line
