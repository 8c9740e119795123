"""The user-error type, defined in :mod:`wanreduce.spec.errors` and re-exported for the host model."""

from ..spec.errors import WanreduceError

__all__ = ["WanreduceError"]
