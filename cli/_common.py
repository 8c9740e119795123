"""Helpers every subcommand shares, so that they all behave the same way.

Output files (:class:`Outputs`): declare every output before any work starts; each is checked then (not
an input, not named twice, not an existing file unless ``--force``, parent folder created, writable), and
each is written to a temporary file beside its final name and renamed only when the whole command has
succeeded, so a failure, even in the second output, never leaves half a file or a stale mix::

    outs = Outputs(force=args.force, inputs=[args.input])
    pcap = outs.add(args.out, "--out")            # checks now, before any work
    ...the work...
    with outs.commit():                           # renames all or, on an exception, removes all
        write_pcap(outs.temp(pcap), frames)
        outs.write_text(counters, text)

Tables: :func:`add_json_option` adds ``--json`` and :func:`print_json` prints a value as JSON on stdout
(infinities and NaN as ``null``). Long steps: :func:`progress` prints one line to stderr (so stdout
stays a table, or JSON, for a pipe). Inputs: :func:`int_in` (an argparse type), :func:`load_npy`.
"""

import argparse
import contextlib
import json
import math
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

from ..spec.errors import WanreduceError

__all__ = [
    "int_in",
    "probability",
    "non_negative",
    "load_npy",
    "Outputs",
    "add_force_option",
    "add_json_option",
    "print_json",
    "jsonable",
    "progress",
    "same_file",
]


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


def probability(what):
    """An argparse type: a probability in [0, 1), with a message naming the option."""

    def convert(text):
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be a probability, not {text!r}") from None
        if not 0.0 <= value < 1.0:
            raise argparse.ArgumentTypeError(f"{what} must be in [0, 1), not {text}")
        return value

    return convert


def non_negative(what):
    """An argparse type: a finite number from 0 up (below a million), with a message naming the option."""

    def convert(text):
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be a number, not {text!r}") from None
        if not 0.0 <= value < 1e6:
            raise argparse.ArgumentTypeError(f"{what} must be at least 0, not {text}")
        return value

    return convert


_NPY_MAGIC = b"\x93NUMPY"


def load_npy(path, *, void16_as_bf16=False):
    """Read one array from a .npy file, never unpickling anything (a .npy is data, not code).

    Every defect is a one-line :class:`WanreduceError`: a missing file, a file that is not .npy (said
    so from its first bytes), an .npz archive, an array of Python objects. ``void16_as_bf16`` reads a
    2-byte void array as bfloat16: that is how ``np.save`` stores an ``ml_dtypes.bfloat16`` array, since
    the .npy header has no name for the type.
    """
    try:
        with open(path, "rb") as f:
            head = f.read(len(_NPY_MAGIC))
    except FileNotFoundError:
        raise WanreduceError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise WanreduceError(f"{path}: is a directory, not a .npy file") from None
    except OSError as exc:
        raise WanreduceError(f"{path}: cannot read it ({exc.strerror})") from None
    if head.startswith(b"PK"):
        raise WanreduceError(f"{path}: is an .npz archive, not a .npy file; save one array with np.save")
    if head != _NPY_MAGIC:
        raise WanreduceError(f"{path}: not a .npy file (it does not start with numpy's \\x93NUMPY magic)")
    try:
        arr = np.load(path, allow_pickle=False)
    except ValueError as exc:
        if "pickle" in str(exc) or "Object arrays" in str(exc):
            raise WanreduceError(f"{path}: holds Python objects, not numbers; save a numeric array") from None
        raise WanreduceError(
            f"{path}: a damaged .npy file (its data does not match its header, or the file is cut short)"
        ) from None
    except (OSError, EOFError):
        raise WanreduceError(f"{path}: a damaged .npy file (cut short or unreadable)") from None
    if void16_as_bf16 and arr.dtype.kind == "V" and arr.dtype.itemsize == 2 and arr.dtype.names is None:
        import ml_dtypes

        arr = arr.view(ml_dtypes.bfloat16)
    return arr


def same_file(a, b):
    a, b = os.fspath(a), os.fspath(b)
    if os.path.abspath(a) == os.path.abspath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _umask():
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def add_force_option(p, what="an output file"):
    p.add_argument("--force", action="store_true", help=f"replace {what} that exists (default: refuse)")


class Outputs:
    """The output files of one command: checked before the work, written whole or not at all.

    ``inputs`` are paths the command reads; no output may name one (even with ``force``).
    """

    def __init__(self, *, force=False, inputs=()):
        self.force = force
        self.inputs = [os.fspath(p) for p in inputs if p is not None]
        self._paths = {}  # final Path -> option name
        self._temps = {}  # final Path -> temporary Path

    def add(self, path, what, *, default=None):
        """Check ``path`` (the value of option ``what``) and return it as a :class:`Path`.

        ``path`` None means the option was not given: ``default`` is used, a file under ``build/`` that is
        the command's own scratch and is replaced without ``--force`` (so a second run is not refused); a
        path the user names is never replaced without it. Creates missing parent folders. Raises
        :class:`WanreduceError` when the path is an input, is named by another output, is a directory,
        exists without ``force``, or cannot be written.
        """
        scratch = path is None
        path = default if scratch else path
        if str(path) == "-":
            raise WanreduceError(
                f"{what} -: this output cannot go to stdout; name a file (--json prints the result)"
            )
        path = Path(path)
        for src in self.inputs:
            if same_file(path, src):
                raise WanreduceError(f"{what} {path} is also an input file; choose another output")
        for other, other_what in self._paths.items():
            if same_file(path, other):
                raise WanreduceError(f"{what} and {other_what} both name {path}; choose two files")
        if path.is_dir():
            raise WanreduceError(f"{what} {path} is a directory; name a file")
        if path.exists() and not (self.force or scratch):
            raise WanreduceError(f"{what} {path} already exists; pass --force to replace it")
        parent = path.parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            blocker = next((p for p in (parent, *parent.parents) if p.exists() and not p.is_dir()), parent)
            raise WanreduceError(f"{what} {path}: {blocker} is a file, not a folder") from None
        except OSError as exc:
            raise WanreduceError(
                f"{what} {path}: cannot create the folder {parent} ({exc.strerror})"
            ) from None
        # os.access is not enough (read-only mounts, ACLs): creating a file is the real test.
        try:
            fd, probe = tempfile.mkstemp(dir=parent, prefix=f".{path.name}.", suffix=".probe")
        except OSError as exc:
            raise WanreduceError(f"{what} {path}: cannot write in {parent} ({exc.strerror})") from None
        os.close(fd)
        os.unlink(probe)
        self._paths[path] = what
        return path

    def __iter__(self):
        return iter(self._paths)

    def temp(self, path):
        """The temporary file to write instead of ``path`` (an :meth:`add`-ed output) in :meth:`commit`."""
        path = Path(path)
        if path not in self._paths:
            raise KeyError(f"{path} was not declared with Outputs.add")
        if path not in self._temps:
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=path.suffix)
            os.close(fd)
            # mkstemp makes the file private (0600); the output gets what open() would give it.
            os.chmod(tmp, 0o666 & ~_umask())
            self._temps[path] = Path(tmp)
        return self._temps[path]

    def write_bytes(self, path, data):
        with open(self.temp(path), "wb") as f:
            f.write(data)

    def write_text(self, path, text):
        with open(self.temp(path), "w", encoding="utf-8", newline="\n") as f:
            f.write(text)

    def discard(self):
        for tmp in self._temps.values():
            with contextlib.suppress(OSError):
                tmp.unlink()
        self._temps.clear()

    @contextlib.contextmanager
    def commit(self):
        """Write the outputs inside the block; afterwards rename them all, or remove them all on an error.

        An ``OSError`` (disk full, say) becomes a one-line :class:`WanreduceError`.
        """
        try:
            yield self
        except OSError as exc:
            self.discard()
            finals = {os.fspath(t): p for p, t in self._temps.items()}
            name = finals.get(os.fspath(exc.filename or ""), exc.filename or "an output file")
            raise WanreduceError(f"cannot write {name} ({exc.strerror or exc})") from None
        except BaseException:
            self.discard()
            raise
        try:
            for path, tmp in self._temps.items():
                os.replace(tmp, path)
        except OSError as exc:
            self.discard()
            raise WanreduceError(f"cannot write {path} ({exc.strerror})") from None
        self._temps.clear()


def add_json_option(p):
    p.add_argument(
        "--json",
        action="store_true",
        help="print the result as one JSON document on stdout instead of the table (default: off)",
    )


def jsonable(value):
    """``value`` with numpy scalars made plain and non-finite floats made ``None`` (JSON has no inf)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return jsonable(value.item())
    return value


def print_json(value):
    print(json.dumps(jsonable(value), indent=1, allow_nan=False))


def progress(command, text):
    """One progress line on stderr, ``wanreduce COMMAND: text``, flushed at once."""
    print(f"wanreduce {command}: {text}", file=sys.stderr, flush=True)
