"""``wanreduce aggd`` as a real process (signals, counters, one-line errors) and ``wanreduce demo-net``."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from wanreduce.cli import main
from wanreduce.host.packet import pack_tensor
from wanreduce.spec import addressing
from wanreduce.spec.protocol import DType
from wanreduce.spec.schedfile import Schedule, write_schedule

SCHEDULE = Schedule(
    sites=("LON", "AMS"),
    rounds=([[0, 1]],),
    params={"memory_bytes": 1 << 16, "chunk_bytes": 256, "bus_bits": 64},
)


def _port():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(capsys, *argv):
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def _readline(stream, deadline_s=60):
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        line = stream.readline()
        if line:
            return line
    raise AssertionError("no line from aggd in time")


def test_aggd_aggregates_reports_counters_on_request_and_stops_on_sigterm(tmp_path):
    path = tmp_path / "s.json"
    write_schedule(SCHEDULE, path)
    port, job = _port(), 21
    cmd = [str(Path(sys.executable).with_name("wanreduce")), "aggd", "--schedule", str(path), "--rank", "AMS"]
    cmd += ["--port", str(port), "--job", str(job)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert "AMS (rank 1) on 127.0.0.1" in _readline(proc.stderr)
        group = addressing.contrib_group_ip(job=job, round=0, group=0, period=1)
        rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        rx.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        rx.bind((addressing.site_group_ip(1), port))
        mreq = socket.inet_aton(addressing.site_group_ip(1)) + socket.inet_aton("127.0.0.1")
        rx.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, mreq)
        rx.settimeout(10)
        tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        tx.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton("127.0.0.1"))
        a, b = np.float32([1.5, -2.0, 3.25]), np.float32([0.25, 2.0, 1e-3])
        for rank, t in ((0, a), (1, b)):
            (payload,) = pack_tensor(t, dtype=DType.FP32, rank=rank, job=job, chunk_elems=64)
            tx.sendto(payload, (group, port))
        tx.sendto(b"\x00" * 8, (group, port))  # too short for a header: short_header
        result = rx.recv(4096)
        assert np.array_equal(np.frombuffer(result[32:], np.float32), a + b)
        time.sleep(0.2)
        proc.send_signal(signal.SIGUSR1)
        counters = json.loads(_readline(proc.stdout))["counters"]
        assert counters["results"] == 1 and counters["short_header"] == 1 and counters["frames_in"] == 3
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0 and json.loads(out.splitlines()[-1])["site"] == "AMS"
        assert "Traceback" not in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_aggd_bad_inputs_are_one_line(capsys, tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    code, _, err = _run(capsys, "aggd", "--schedule", str(broken), "--rank", "0")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "broken.json" in err
    path = tmp_path / "s.json"
    write_schedule(SCHEDULE, path)
    code, _, err = _run(capsys, "aggd", "--schedule", str(path), "--rank", "PAR")
    assert code == 2 and "no such site" in err and len(err.strip().splitlines()) == 1
    code, _, err = _run(capsys, "aggd", "--schedule", str(path), "--rank", "0", "--interface", "192.0.2.9")
    assert code == 2 and "no interface" in err and len(err.strip().splitlines()) == 1


def test_demo_net_nine_sites_pass_and_write_the_report(capsys, tmp_path):
    path = tmp_path / "demo_net.json"
    argv = ["demo-net", "--elements", "1024", "--time-limit", "1", "--delay-scale", "0.1"]
    argv += [
        "--port",
        str(_port()),
        "--job",
        "22",
        "-o",
        str(path),
        "--demo-json",
        str(tmp_path / "none"),
    ]
    code, out, err = _run(capsys, *argv)
    assert code == 0 and "demo-net: PASS" in out, out + err
    report = json.loads(path.read_text())
    assert report["sites"] == 9 and report["transport"] == "udp" and report["max_abs_err_vs_numpy"] == 0
    assert report["distinct_results"] == 1 and report["equal_to_rtl_demo"] is True
    # Fault-free: nothing dropped, nothing retransmitted.
    assert report["drops"] == {} and report["retransmits"] == report["resends_on_result"] == 0


def test_demo_net_never_replaces_a_report_without_force(capsys, tmp_path):
    path = tmp_path / "mine.json"
    path.write_text("keep me\n")
    code, out, err = _run(capsys, "demo-net", "--elements", "1024", "-o", str(path))
    assert code == 2 and "already exists; pass --force" in err and len(err.strip().splitlines()) == 1
    assert path.read_text() == "keep me\n"


def test_emit_live_synchronises_one_site_through_running_aggregators(capsys, tmp_path):
    import threading

    from wanreduce.host import netdemo
    from wanreduce.host.aggd import GoldenEngine, site_layout
    from wanreduce.host.transport import SiteTransport

    path, grads, out = tmp_path / "s.json", tmp_path / "g.npz", tmp_path / "r.npy"
    write_schedule(SCHEDULE, path)
    rng = np.random.default_rng(9)
    a, b = (rng.standard_normal(700).astype(np.float32) for _ in range(2))
    np.savez(grads, LON=a, AMS=b)
    port, job = _port(), 23
    layout = site_layout(SCHEDULE)

    def engine(s, r, lay):
        return GoldenEngine(s, r, lay, job=job)

    with netdemo.aggregators(SCHEDULE, layout=layout, make_engine=engine, port=port, job=job):
        other = SiteTransport(
            SCHEDULE, 1, layout=layout, one_way_s=np.zeros((2, 2)), site_Bps=1e9, port=port, job=job
        ).open()
        got = {}
        thread = threading.Thread(target=lambda: got.setdefault("b", other.run(b, deadline_s=60)))
        thread.start()
        argv = ["emit", "--schedule", str(path), "--grads", str(grads), "--rank", "0", "--job", str(job)]
        code, stdout, err = _run(
            capsys, *argv, "--to", f"udp://127.0.0.1:{port}", "--live", "--result", str(out)
        )
        thread.join(60)
        other.close()
    assert code == 0, err
    want = ((a + b) / np.float32(2)).astype(np.float32)
    assert np.array_equal(np.load(out).view(np.uint32), want.view(np.uint32))
    assert np.array_equal(got["b"].values, want) and "LON round 0" in stdout


def test_demo_net_in_network_namespaces_or_one_line_saying_why_not(capsys, tmp_path):
    from wanreduce.host.netns import namespaces

    path = tmp_path / "demo_net.json"
    argv = ["demo-net", "--netns", "--elements", "1024", "--time-limit", "1", "--delay-scale", "0.1"]
    argv += ["--port", str(_port()), "--job", "24", "-o", str(path)]
    argv += ["--demo-json", str(tmp_path / "none")]
    code, out, err = _run(capsys, *argv)
    assert code == 0 and "demo-net: PASS" in out, out + err
    report = json.loads(path.read_text())
    if "netns_unavailable" in report:  # not root, or no iproute2: one line, then the loopback run
        assert "network namespaces unavailable" in err and report["network"].startswith("one interface")
    else:
        assert report["network"].startswith("network namespaces")
        assert report["drops"] == {} and report["retransmits"] == 0
    assert not [n for n in namespaces() if n.startswith(f"wr{os.getpid()}")]
