"""The command line's tests; :func:`run` runs one command as a user would, for them all."""

from wanreduce.cli import main


def run(capsys, *argv):
    """``wanreduce *argv`` (each made a string): its exit status, stdout and stderr."""
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exc:  # argparse's own exits (--help, usage errors)
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err
