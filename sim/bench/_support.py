"""Benchmarks that drive the core with the test suite's traffic generators import them through here."""

import importlib

__all__ = ["test_support"]


def test_support(name):
    """Module ``tests.support.<name>`` of the source checkout, which ``make bench`` runs from."""
    try:
        return importlib.import_module(f"tests.support.{name}")
    except ImportError:
        raise RuntimeError(
            f"this benchmark needs tests/support/{name}.py of a source checkout; "
            "run `make bench` from the repository"
        ) from None
