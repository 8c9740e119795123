"""The one exception type that means "the user gave us something wrong"."""

__all__ = ["WanreduceError"]


class WanreduceError(Exception):
    """Bad input: a malformed packet, a broken file, a wrong option, a topology that makes no sense.

    The CLI prints its message as a single line and exits non-zero; anything else escaping is a bug.
    """
