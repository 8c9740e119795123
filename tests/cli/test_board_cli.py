"""``wanreduce board`` without a board: every way the port can be wrong is one line and exit 2, and a
pseudo-terminal on which nothing answers times out with one line. (Against the Verilated board top:
tests/hw/test_eth_board.py.)"""

import os
import subprocess
import sys

import pytest

from wanreduce.cli import main


def _run(args, capsys):
    code = main(["board", *args])
    return code, capsys.readouterr().err.strip()


@pytest.mark.parametrize(
    "port,words",
    [
        ("/dev/wanreduce-no-such-port", "no such serial port"),
        (".", "is a directory"),
        (__file__, "not a serial port"),
    ],
)
def test_wrong_port_is_one_line(port, words, capsys):
    code, err = _run([port], capsys)
    assert code == 2 and words in err and "\n" not in err


def test_silent_port_times_out(capsys):
    master, slave = os.openpty()
    try:
        code, err = _run([os.ttyname(slave), "--timeout", "0.2"], capsys)
    finally:
        os.close(master)
        os.close(slave)
    assert code == 2 and "no answer from a board" in err and "\n" not in err


def test_options_are_checked(capsys):
    code, err = _run(["/dev/null", "--schedule", "s.json"], capsys)
    assert code == 2 and "--schedule and --rank go together" in err
    code, err = _run(["/dev/null", "--timeout", "0"], capsys)
    assert code == 2 and "--timeout" in err


def test_help_works():
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from wanreduce.cli import main; sys.exit(main())",
            "board",
            "--help",
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0 and "serial port" in proc.stdout
