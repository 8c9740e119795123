"""The one exception type that means "the user gave us something wrong", and its warning."""

__all__ = ["WanreduceError", "WanreduceWarning", "read_input"]


class WanreduceError(Exception):
    """Bad input: a malformed packet, a broken file, a wrong option, a topology that makes no sense.

    The CLI prints its message as a single line and exits non-zero; anything else escaping is a bug.
    """


class WanreduceWarning(UserWarning):
    """Input that can still be used, with a caveat the user must hear (a capture cut short, say).

    The CLI prints its message as one line, ``wanreduce COMMAND: warning: ...``, and carries on.
    """


def read_input(path, kind, size=-1):
    """The bytes of the input file ``path`` (the first ``size`` of them; all by default), with the one-line
    :class:`WanreduceError` of a missing file, a directory (``kind`` says what was wanted: "a pcap file")
    or a file that cannot be read."""
    try:
        with open(path, "rb") as f:
            return f.read(size)
    except FileNotFoundError:
        raise WanreduceError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise WanreduceError(f"{path}: is a directory, not {kind}") from None
    except OSError as exc:
        raise WanreduceError(f"{path}: cannot read it ({exc.strerror})") from None
