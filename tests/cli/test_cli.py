import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest
from scapy.utils import rdpcap

import wanreduce.host.scapy_layer as scapy_layer
from tests.support.wire import decode_frame, decode_payload
from wanreduce.cli import main
from wanreduce.host.frames import build_frame
from wanreduce.host.pcap import read_pcap, write_pcap


def run(capsys, *argv):
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse's own usage errors
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def tensor(tmp_path):
    path = tmp_path / "t.npy"
    np.save(path, np.linspace(-3, 3, 1000, dtype=np.float32).reshape(10, 100))
    return path


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_pack_then_independent_decoders(capsys, tmp_path, tensor, dtype):
    out = tmp_path / "o.pcap"
    code, text, _ = run(
        capsys,
        "pack",
        str(tensor),
        "-o",
        str(out),
        "--dtype",
        dtype,
        "--rank",
        "4",
        "--round",
        "9",
        "--group",
        "2",
        "--chunk-elems",
        "300",
    )
    assert code == 0 and "4 CONTRIB frames" in text
    frames = read_pcap(out)
    assert len(frames) == 4
    for i, f in enumerate(frames):
        ethertype, proto, dport, payload = decode_frame(f)
        h, _ = decode_payload(payload)
        assert (ethertype, proto, dport) == (0x0800, 17, 47000)
        assert (h["src"], h["round"], h["group"], h["chunk"], h["bitmap"]) == (4, 9, 2, i, 1 << 4)
    # scapy's own pcap reader and dissector, with our layer bound to the port, see the same fields.
    pkts = rdpcap(str(out))
    assert [p[scapy_layer.Wanreduce].chunk for p in pkts] == [0, 1, 2, 3]
    assert pkts[3][scapy_layer.Wanreduce].flags == 1 and pkts[3][scapy_layer.Wanreduce].count == 100


def test_inspect_lists_frames_and_tallies_drops(capsys, tmp_path, tensor):
    out = tmp_path / "o.pcap"
    assert run(capsys, "pack", str(tensor), "-o", str(out), "--rank", "1", "--chunk-elems", "500")[0] == 0
    code, text, _ = run(capsys, "inspect", str(out))
    assert code == 0 and text.count("CONTRIB") == 2 and "2 frames: 2 ok, 0 dropped" in text
    frames = read_pcap(out)
    bad = bytearray(frames[0])
    bad[23] = 6  # TCP, and the IPv4 checksum no longer matches either: the checksum rule comes first
    mixed = tmp_path / "mixed.pcap"
    write_pcap(mixed, [frames[0], bytes(bad), frames[1][:60]])
    code, text, err = run(capsys, "inspect", str(mixed))
    assert code == 1 and "DROP bad_ip_checksum" in text and "DROP truncated" in text
    assert "2 of 3 frames would be dropped" in err


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: None, "no such file"),
        (lambda p: p.write_bytes(b"\xd4\xc3\xb2\xa1" + b"\0" * 10), "too short to be a pcap"),
        (lambda p: p.write_bytes(b"hello world, this is not a capture"), "not a pcap file"),
        (lambda p: p.write_bytes(b"\x0a\x0d\x0d\x0a" + b"\0" * 40), "pcapng"),
    ],
)
def test_inspect_bad_files(capsys, tmp_path, make, message):
    path = tmp_path / "x.pcap"
    make(path)
    code, _, err = run(capsys, "inspect", str(path))
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_inspect_truncated_pcap(capsys, tmp_path, tensor):
    out = tmp_path / "o.pcap"
    run(capsys, "pack", str(tensor), "-o", str(out), "--rank", "1")
    data = out.read_bytes()
    out.write_bytes(data[:-5])
    code, text, err = run(capsys, "inspect", str(out))
    # the complete records are read, as tcpdump reads a capture cut short, and the loss is one warning line
    (line,) = err.strip().splitlines()
    assert line.startswith("wanreduce inspect: warning:") and "truncated: record 3 is incomplete" in line
    assert code == 0 and "3 frames" in text


def test_inspect_wrong_port_and_non_udp(capsys, tmp_path):
    payload = bytes(32 + 4)
    f = build_frame(
        payload,
        src_mac="02:00:00:00:00:01",
        dst_mac="02:00:00:00:00:02",
        src_ip="1.2.3.4",
        dst_ip="5.6.7.8",
        sport=1,
        dport=53,
    )
    arp = bytes(12) + b"\x08\x06" + bytes(28)
    path = tmp_path / "x.pcap"
    write_pcap(path, [f, arp])
    code, text, _ = run(capsys, "inspect", str(path))
    assert code == 1 and "DROP wrong_port" in text and "DROP not_ipv4" in text
    code, text, _ = run(capsys, "inspect", str(path), "--port", "53")
    assert "DROP bad_magic" in text


def test_pack_errors(capsys, tmp_path, tensor):
    out = tmp_path / "o.pcap"
    ints = tmp_path / "i.npy"
    np.save(ints, np.arange(5))
    big = tmp_path / "big.npy"
    np.save(big, np.array([1e10], np.float32))
    cases = [
        (["pack", str(tmp_path / "missing.npy"), "-o", str(out), "--rank", "0"], "no such file"),
        (["pack", str(ints), "-o", str(out), "--rank", "0"], "only floating-point"),
        (["pack", str(big), "-o", str(out), "--rank", "0", "--dtype", "fp16"], "too large for fp16"),
        (["pack", str(tensor), "-o", str(tensor), "--rank", "0", "--force"], "is also an input"),
        (["pack", str(tensor), "-o", str(out), "--rank", "0", "--src-mac", "zz"], "not a MAC address"),
        (["pack", str(tensor), "-o", str(out), "--rank", "0", "--dst-ip", "1.2.3"], "not an IPv4 address"),
    ]
    for argv, message in cases:
        code, _, err = run(capsys, *argv)
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1, (argv, err)
    garbage = tmp_path / "g.npy"
    garbage.write_bytes(b"\x93NUMPY garbage")
    code, _, err = run(capsys, "pack", str(garbage), "-o", str(out), "--rank", "0")
    assert code == 2 and "a damaged .npy file" in err
    before = tensor.read_bytes()
    assert tensor.read_bytes() == before and not out.exists()


def test_pack_refuses_to_overwrite_without_force(capsys, tmp_path, tensor):
    out = tmp_path / "o.pcap"
    out.write_bytes(b"precious")
    code, _, err = run(capsys, "pack", str(tensor), "-o", str(out), "--rank", "0")
    assert code == 2 and "exists" in err and out.read_bytes() == b"precious"
    assert run(capsys, "pack", str(tensor), "-o", str(out), "--rank", "0", "--force")[0] == 0
    assert len(read_pcap(out)) == 4


@pytest.mark.parametrize(
    "argv",
    [
        ["pack", "x.npy", "-o", "y.pcap", "--rank", "64"],
        ["pack", "x.npy", "-o", "y.pcap", "--rank", "0", "--chunk-elems", "0"],
        ["pack", "x.npy", "-o", "y.pcap", "--rank", "0", "--dtype", "fp64"],
    ],
)
def test_option_range_errors(capsys, argv):
    code, _, err = run(capsys, *argv)
    assert code == 2 and "error" in err and "Traceback" not in err
    # one line, like every other error, pointing at --help instead of printing the whole usage
    assert err.count("\n") == 1 and err.startswith("wanreduce pack: error: ") and "pack --help" in err


def test_console_script_prints_no_traceback(tmp_path):
    exe = os.path.join(os.path.dirname(sys.executable), "wanreduce")
    r = subprocess.run([exe, "inspect", str(tmp_path / "none.pcap")], capture_output=True, text=True)
    assert (
        r.returncode == 2
        and r.stderr.strip() == f"wanreduce inspect: error: {tmp_path / 'none.pcap'}: no such file"
    )


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: p.write_text("1,2,3\n"), "not a .npy file"),
        (
            lambda p: np.savez(p.with_suffix(".npz"), a=np.ones(3)) or p.with_suffix(".npz").rename(p),
            "is an .npz archive",
        ),
        (lambda p: np.save(p, np.array([{}], dtype=object), allow_pickle=True), "holds Python objects"),
        (lambda p: p.write_bytes(np.lib.format.MAGIC_PREFIX + b"\x01\x00garbage"), "a damaged .npy file"),
    ],
)
def test_pack_on_a_file_that_is_not_npy_says_so(capsys, tmp_path, make, message):
    src = tmp_path / "x.npy"
    make(src)
    code, _, err = run(capsys, "pack", str(src), "-o", str(tmp_path / "o.pcap"), "--rank", "0")
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    # numpy's own messages suggest allow_pickle=True or pickle.load: never pass that on
    assert "pickle" not in err.lower() and "Errno" not in err


def test_pack_reads_a_bf16_npy_saved_with_ml_dtypes(capsys, tmp_path):
    import ml_dtypes

    values = np.array([1.0, -2.5, 3.140625, 0.0078125, -0.0, 65280.0], np.float32)
    src = tmp_path / "bf.npy"
    np.save(src, values.astype(ml_dtypes.bfloat16))  # stored as '|V2': the header has no bf16 name
    assert np.load(src).dtype == np.dtype("V2")
    out = tmp_path / "o.pcap"
    code, text, err = run(capsys, "pack", str(src), "-o", str(out), "--rank", "3", "--dtype", "bf16")
    assert code == 0, err
    _, _, _, payload = decode_frame(read_pcap(out)[0])
    h, elems = decode_payload(payload)
    # every value is exact in bf16, which is the top half of fp32: the wire carries exactly those bits
    assert h["dtype"] == 2 and elems == [int(v) >> 16 for v in values.view(np.uint32)]


def test_pack_group_ids_above_255_need_explicit_addresses(capsys, tmp_path, tensor):
    out = tmp_path / "o.pcap"
    code, _, err = run(capsys, "pack", str(tensor), "-o", str(out), "--rank", "0", "--group", "300")
    assert code == 2 and "--group 300 does not fit the default multicast address" in err and not out.exists()
    # two groups never share the default address: 256 no longer wraps onto group 0
    code, _, err = run(
        capsys,
        "pack",
        str(tensor),
        "-o",
        str(out),
        "--rank",
        "0",
        "--group",
        "300",
        "--dst-ip",
        "239.1.1.44",
        "--dst-mac",
        "01:00:5e:01:01:2c",
    )
    assert code == 0, err
    _, _, _, payload = decode_frame(read_pcap(out)[0])
    assert decode_payload(payload)[0]["group"] == 300
    assert read_pcap(out)[0][30:34] == bytes([239, 1, 1, 44])


def test_rtl_add_stages_0_is_an_option_error(capsys, tmp_path):
    code, _, err = run(capsys, "rtl-add", "--dtype", "fp32", "--stages", "0", "a.npy", "b.npy")
    assert code == 2 and "--stages must be in 1..32, not 0" in err


def test_version(capsys):
    import importlib.metadata

    code, out, _ = run(capsys, "--version")
    assert code == 0 and out.strip() == f"wanreduce {importlib.metadata.version('wanreduce')}"


def test_inspect_json(capsys, tmp_path, tensor):
    import json

    out = tmp_path / "o.pcap"
    run(capsys, "pack", str(tensor), "-o", str(out), "--rank", "1", "--chunk-elems", "500", "--round", "7")
    frames = read_pcap(out)
    mixed = tmp_path / "m.pcap"
    write_pcap(mixed, [frames[0], frames[1][:60]])
    code, text, _ = run(capsys, "inspect", str(mixed), "--json")
    doc = json.loads(text)
    assert code == 1 and (doc["total"], doc["ok"], doc["dropped"]) == (2, 1, 1)
    assert doc["drops"] == {"truncated": 1}
    first = doc["frames"][0]
    assert first["ok"] and (first["kind"], first["round"], first["src"]) == ("CONTRIB", 7, 1)
    assert first["count"] == 500 and first["bitmap"] == 2 and not first["last"]
    assert doc["frames"][1] == {"index": 1, "ok": False, "drop": "truncated", "rule": 2}


def test_a_bug_is_one_line_and_exit_3(capsys, monkeypatch):
    from wanreduce.cli import cache

    def broken(args):
        raise ValueError("something the code did not expect")

    monkeypatch.setattr(cache, "run", broken)  # registered when main builds the parser
    monkeypatch.delenv("WANREDUCE_DEBUG", raising=False)
    code = main(["cache", "--path"])
    err = capsys.readouterr().err
    assert code == 3 and err.count("\n") == 1
    assert "internal error: ValueError: something the code did not expect" in err and "WANREDUCE_DEBUG" in err


def test_version_and_one_command_need_no_other_command(capsys):
    import subprocess
    import sys

    probe = (
        "import sys, wanreduce.cli as c\n"
        "c.main(['cache', '--path'])\n"
        "print(sorted(m for m in sys.modules if m.startswith(('amaranth', 'torch', 'scapy', 'cocotb'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"
    assert main(["--version"]) == 0 and capsys.readouterr().out.startswith("wanreduce ")


def test_rtl_add_operands_are_checked_before_the_rtl(capsys, tmp_path):
    from wanreduce.cli.rtl_add import _operands
    from wanreduce.hw.fadd import FloatFormat

    pairs = np.array([[1.5, 2.25], [-0.0, 3.0]], np.float32)
    np.save(tmp_path / "f32.npy", pairs)
    got = _operands(tmp_path / "f32.npy", FloatFormat.FP32)
    assert got.dtype == np.uint32 and np.array_equal(got, pairs.view(np.uint32))  # the bits, not a rounding
    np.save(tmp_path / "bf.npy", pairs.astype(ml_dtypes.bfloat16))
    assert np.array_equal(
        _operands(tmp_path / "bf.npy", FloatFormat.BF16), pairs.astype(ml_dtypes.bfloat16).view(np.uint16)
    )
    np.save(tmp_path / "empty.npy", np.zeros((0, 2), np.uint32))
    np.save(tmp_path / "f64.npy", pairs.astype(np.float64))
    for name, message in (("empty", "holds no operand pairs"), ("f64", ".view(uint32)")):
        code, _, err = run(capsys, "rtl-add", str(tmp_path / f"{name}.npy"), str(tmp_path / "out.npy"))
        assert code == 2 and message in err and err.count("\n") == 1


def test_train_checks_its_figure_before_training(capsys, tmp_path):
    code = main(
        ["train", "--task", "digits", "--plot", str(tmp_path / "x.txt"), "-o", str(tmp_path / "t.json")]
    )
    err = capsys.readouterr().err
    assert code == 2 and "must be a .png, .svg or .pdf file" in err and err.count("\n") == 1
    assert not (tmp_path / "t.json").exists()


def test_pack_says_when_it_flattens(capsys, tmp_path):
    """The wire carries a flat tensor: a (10, 30) array is packed as 300 elements, and the summary says
    so; a flat one needs no word."""
    square, flat = tmp_path / "sq.npy", tmp_path / "flat.npy"
    np.save(square, np.ones((10, 30), np.float32))
    np.save(flat, np.ones(300, np.float32))
    code, text, err = run(capsys, "pack", str(square), "-o", str(tmp_path / "a.pcap"), "--rank", "1")
    assert code == 0, err
    assert "300 fp32 elements (flattened from (10, 30))," in text
    code, text, err = run(capsys, "pack", str(flat), "-o", str(tmp_path / "b.pcap"), "--rank", "1")
    assert code == 0 and "300 fp32 elements, rank 1" in text and "flattened" not in text, err


def test_train_replaces_its_own_scratch_but_not_a_named_file(capsys, tmp_path, monkeypatch):
    """build/train.json and build/train.png are the command's scratch: a second run is not refused; the
    same files named with -o and --plot are the user's and need --force. Training is stopped right after
    the outputs are checked (the provenance is the next step), so no run takes minutes."""
    import wanreduce.cli.train as train
    from wanreduce.spec.errors import WanreduceError

    def stop(*args, **kwargs):
        raise WanreduceError("outputs checked, stopped before training")

    monkeypatch.setattr(train.figures, "provenance", stop)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "build").mkdir()
    for name in ("train.json", "train.png"):
        (tmp_path / "build" / name).write_text("an earlier run\n")
    code, _, err = run(capsys, "train", "--task", "digits")
    assert code == 2 and err.splitlines()[-1].endswith("stopped before training"), err
    code, _, err = run(capsys, "train", "--task", "digits", "-o", "build/train.json")
    # the option as typed: -o, not its long name
    assert code == 2 and "-o build/train.json already exists; pass --force" in err, err
    code, _, err = run(capsys, "train", "--task", "digits", "--output", "build/train.json")
    assert code == 2 and "--output build/train.json already exists; pass --force" in err, err
    code, _, err = run(capsys, "train", "--task", "digits", "--plot", "build/train.png")
    assert code == 2 and "--plot build/train.png already exists; pass --force" in err, err
    assert (tmp_path / "build" / "train.json").read_text() == "an earlier run\n"


def test_rtl_add_times_the_simulation_not_the_build(capsys, tmp_path, monkeypatch):
    """The time in rtl-add's summary (and so the rate a reader takes from it) is the simulation's: the
    first call, which builds the harness, is outside it. The build is stood in for by a sleep here."""
    import time
    from types import SimpleNamespace

    import wanreduce.cli.rtl_add as rtl_add

    calls = []

    def fake_lanes_add(fmt, a, b, *, width, stages, return_stats=False):
        calls.append(len(a))
        if len(calls) == 1:
            time.sleep(0.6)  # the build of a first run
        sums = np.zeros(len(a), np.uint32)
        return (sums, SimpleNamespace(cycles=len(a))) if return_stats else sums

    monkeypatch.setattr(rtl_add.fadd_check, "lanes_add", fake_lanes_add)
    src = tmp_path / "in.npy"
    np.save(src, np.ones((1000, 2), np.uint32))
    code, text, err = run(capsys, "rtl-add", str(src), str(tmp_path / "out.npy"))
    assert code == 0, err
    assert calls == [1, 1000]
    seconds = float(text.split(" in ")[1].split(" s ")[0])
    assert seconds < 0.5, text
    code, out, _ = run(capsys, "rtl-add", "--help")
    assert code == 0 and "simulation's alone" in " ".join(out.split())
