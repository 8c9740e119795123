"""The one exception type that means "the user gave us something wrong", and its warning."""

__all__ = ["WanreduceError", "WanreduceWarning"]


class WanreduceError(Exception):
    """Bad input: a malformed packet, a broken file, a wrong option, a topology that makes no sense.

    The CLI prints its message as a single line and exits non-zero; anything else escaping is a bug.
    """


class WanreduceWarning(UserWarning):
    """Input that can still be used, with a caveat the user must hear (a capture cut short, say).

    The CLI prints its message as one line, ``wanreduce COMMAND: warning: ...``, and carries on.
    """
