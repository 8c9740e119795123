"""Argument helpers shared by the subcommands."""

import argparse

import numpy as np

from ..spec.errors import WanreduceError

__all__ = ["int_in", "load_npy"]


def int_in(lo, hi, what):
    """An argparse type: an integer in lo..hi, with a message naming the option's meaning."""
    def convert(text):
        try:
            value = int(text, 0)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be an integer, not {text!r}") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"{what} must be in {lo}..{hi}, not {value}")
        return value
    return convert


def load_npy(path):
    """``np.load`` of a .npy file with one-line errors (no pickles: a .npy is data, not code)."""
    try:
        return np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise WanreduceError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise WanreduceError(f"{path}: is a directory, not a .npy file") from None
    except (ValueError, OSError, EOFError) as exc:
        raise WanreduceError(f"{path}: not a readable .npy array ({str(exc).splitlines()[0]})") from None
