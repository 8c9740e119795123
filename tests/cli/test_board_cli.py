"""``wanreduce board`` without a board: every way the port can be wrong is one line and exit 2, and a
pseudo-terminal on which nothing answers times out with one line. (Against the Verilated board top:
tests/hw/test_eth_board.py.)"""

import os

import pytest

from wanreduce.cli import main


def _run(args, capsys):
    code = main(["board", *args])
    return code, capsys.readouterr().err.strip()


def test_wrong_port_is_one_line(tmp_path, capsys):
    plain = tmp_path / "plain.txt"
    plain.write_text("not a port\n")
    for port, words in (
        (str(tmp_path / "no-such-port"), "no such serial port"),
        (str(tmp_path), "is a directory"),
        (str(plain), "not a serial port"),
    ):
        code, err = _run([port], capsys)
        assert code == 2 and words in err and "\n" not in err, err
    assert plain.read_text() == "not a port\n"


def test_silent_port_times_out(capsys):
    master, slave = os.openpty()
    try:
        code, err = _run([os.ttyname(slave), "--timeout", "0.2"], capsys)
    finally:
        os.close(master)
        os.close(slave)
    assert code == 2 and "no answer from a board" in err and "\n" not in err, err


def test_options_are_checked(capsys):
    code, err = _run(["/dev/null", "--schedule", "s.json"], capsys)
    assert code == 2 and "--schedule and --rank go together" in err, err
    code, err = _run(["/dev/null", "--timeout", "0"], capsys)
    assert code == 2 and "--timeout" in err, err


def test_help_works(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["board", "--help"])
    assert exc.value.code == 0 and "serial port" in capsys.readouterr().out
