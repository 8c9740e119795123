"""The one warnings filter of the simulation layer and the tests."""

import contextlib
import warnings

from amaranth.hdl import UnusedElaboratable

__all__ = ["unused_ok"]


@contextlib.contextmanager
def unused_ok():
    """Inside the block, Amaranth does not warn that a component was created but never elaborated: a core
    whose Verilog comes from the conversion cache, or one built only for its attributes or its refusal,
    is never elaborated, and that is the point. Every other warning still shows."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=UnusedElaboratable)
        yield
