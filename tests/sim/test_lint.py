"""``verilator --lint-only -Wall`` of the exported Verilog, with the waivers of ``sim/synth/lint_waiver.vlt``.

The default build (``make verilog``: the AXI top at W = 512, in ``make test-all``), the AXI top at W = 64
and a small bare core with payload entry and one clock must lint clean; hand-written faults (a latch, an
implicit net, a combinational loop) must still fail, so the waivers cannot have switched the lint off
altogether.
"""

import json

import pytest

from wanreduce.sim.synth import verilog

pytestmark = pytest.mark.rtl


@pytest.mark.parametrize(
    "options",
    [
        # The default build is W = 512 (a minute of conversion): `make test-all`; the AXI wrapper is linted
        # at W = 64 in `make test`.
        pytest.param({}, marks=pytest.mark.slow),
        {"kind": "axi", "width": 64, "slots": 4, "members": 2, "chunk_bytes": 64, "mod_stages": 4},
        {
            "kind": "core",
            "width": 64,
            "slots": 4,
            "members": 4,
            "chunk_bytes": 64,
            "entry": "payload",
            "mod_stages": 4,
        },
    ],
    ids=["default", "axi-w64", "core-w64-payload"],
)
def test_export_lints_clean(tmp_path, options):
    paths = verilog.export(tmp_path, **options)
    meta = json.loads(paths["json"].read_text())
    ok, out = verilog.lint(paths["verilog"], top=meta["top"])
    assert ok, f"lint of {meta['top']} failed:\n{out[-4000:]}"
    table = paths["ports"].read_text()
    for port in meta["ports"]:
        assert f"| `{port}` |" in table, f"port {port} is missing from the port table"
    assert meta["config"]["width"] == options.get("width", 512)
    assert meta["config"]["mod_stages"] == options.get("mod_stages", 16)


def test_lint_still_catches_faults(tmp_path):
    bad = tmp_path / "bad.v"
    bad.write_text("""module bad(input wire a, input wire en, output reg q, output wire y, output wire w);
  always @* if (en) q = a;
  assign z = a;
  assign y = z;
  wire [1:0] loop;
  assign loop = {loop[0], loop[1] ^ a};
  assign w = loop[1];
endmodule
""")
    ok, out = verilog.lint(bad, top="bad")
    assert not ok, "the waivers let a latch, an implicit net and a combinational loop through"
    for rule in ("LATCH", "IMPLICIT", "UNOPTFLAT"):
        assert f"%Warning-{rule}" in out, f"{rule} is no longer reported:\n{out}"
