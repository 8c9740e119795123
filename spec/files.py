"""Reading the files a user names: one wording for the ways it can fail."""

from .errors import WanreduceError

__all__ = ["read_input"]


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
