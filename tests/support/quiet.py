"""The one warnings filter the tests use: the simulation layer's (:func:`wanreduce.sim.quiet.unused_ok`)."""

from wanreduce.sim.quiet import unused_ok

__all__ = ["unused_ok"]
