"""Helpers every subcommand shares, so that they all behave the same way.

Output files (:class:`Outputs`): declare every output before any work starts; each is checked then (not
an input, not named twice, not an existing file unless ``--force``, parent folder created, writable), and
each is written to a temporary file beside its final name and renamed only when the whole command has
succeeded, so a failure, even in the second output, never leaves half a file or a stale mix::

    outs = Outputs(force=args.force, inputs=[args.input], json=args.json)
    pcap = outs.add(args.out, stdout="binary")    # checks now, before any work
    ...the work...
    with outs.commit():                           # renames all or, on an exception, removes all
        write_pcap(outs.temp(pcap), frames)
        outs.write_text(counters, text)

Shared option groups, each with the function that reads it: the WAN (:func:`add_wan_option`,
:func:`wan_of`), the pace of a replay (:func:`add_speed_options`), the topology and cost model
(:func:`add_model_arguments`, :func:`topology_from_args`, :func:`params_from_args`), the aggregation modes
(:func:`add_mode_arguments`, :func:`modes_from_args`).

Tables: :func:`add_json_option` adds ``--json`` and :func:`print_json` prints a value as JSON on stdout
(infinities and NaN as ``null``). Long steps: :func:`progress` prints one line to stderr (so stdout
stays a table, or JSON, for a pipe). Inputs: :func:`int_in`, :func:`positive_float`, :func:`probability`,
:func:`non_negative` (argparse types), :func:`number` (a checked conversion after parsing), :func:`load_npy`.
"""

import argparse
import contextlib
import dataclasses
import json
import math
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from ..host.costmodel import CostModel, CostParams
from ..host.emit import topology_for
from ..host.lean import DEFAULT_JITTER_S
from ..host.packet import MAX_COUNT
from ..host.topology import EMBEDDED, load_topology
from ..host.units import format_size, parse_size
from ..spec.core import WIDTHS
from ..spec.errors import WanreduceError
from ..spec.files import read_input
from ..spec.protocol import HEADER_LAYOUT, MAX_RANKS, UDP_PORT, DType

__all__ = [
    "int_in",
    "int_option",
    "add_command",
    "header_field",
    "positive_float",
    "number",
    "add_fault_options",
    "add_grads_option",
    "add_port_option",
    "add_wan_option",
    "add_report_options",
    "config_of",
    "wan_of",
    "add_speed_options",
    "add_model_arguments",
    "add_mode_arguments",
    "modes_from_args",
    "topology_from_args",
    "params_from_args",
    "model_from_args",
    "MODES",
    "SLOW_SEARCH_S",
    "probability",
    "non_negative",
    "load_npy",
    "Outputs",
    "STDOUT",
    "Named",
    "add_output_option",
    "add_force_option",
    "add_json_option",
    "print_json",
    "jsonable",
    "progress",
    "heartbeat",
    "HEARTBEAT_S",
    "plural",
    "flattened",
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


def add_command(sub, name, *, help, doc, paragraph=1, more=""):
    """Add subcommand ``name`` to ``sub`` with its one-line ``help``; its ``--help`` description is paragraph
    ``paragraph`` of its module docstring ``doc`` as one line (then ``more``), so the two say one thing."""
    description = " ".join(filter(None, (doc.split("\n\n")[paragraph].replace("\n", " "), more)))
    return sub.add_parser(name, help=help, description=description)


def int_option(parser, flag, lo, hi, *, what=None, **kwargs):
    """Add ``flag`` to ``parser`` (or an argument group): an integer in lo..hi whose messages name ``what``
    (the flag itself unless given); ``kwargs`` go to ``add_argument``."""
    return parser.add_argument(flag, type=int_in(lo, hi, what or flag), **kwargs)


def header_field(name, option=None):
    """An argparse type for a header field's option (``--NAME`` unless ``option`` says otherwise): an
    integer that fits the field, whose width is the one of PROTOCOL.md's header layout."""
    size = HEADER_LAYOUT[name][1]
    return int_in(0, (1 << (8 * size)) - 1, option or f"--{name}")


def _float_type(what, noun, ok, rule):
    """An argparse type: a float for which ``ok(value)`` holds; the messages name the option (``what``),
    what the text should have been (``noun``) and the rule it broke."""

    def convert(text):
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be {noun}, not {text!r}") from None
        if not ok(value):
            raise argparse.ArgumentTypeError(f"{what} must be {rule}, not {text}")
        return value

    return convert


def probability(what):
    """An argparse type: a probability in [0, 1), with a message naming the option."""
    return _float_type(what, "a probability", lambda v: 0.0 <= v < 1.0, "in [0, 1)")


def non_negative(what):
    """An argparse type: a finite number from 0 up (below a million), with a message naming the option."""
    return _float_type(what, "a number", lambda v: 0.0 <= v < 1e6, "at least 0")


def positive_float(what):
    """An argparse type: a finite number above 0, with a message naming the option."""
    return _float_type(what, "a number", lambda v: v > 0 and math.isfinite(v), "a positive number")


_NPY_MAGIC = b"\x93NUMPY"


def load_npy(path, *, void16_as_bf16=False):
    """Read one array from a .npy file, never unpickling anything (a .npy is data, not code).

    Every defect is a one-line :class:`WanreduceError`: a missing file, a file that is not .npy (said
    so from its first bytes), an .npz archive, an array of Python objects. ``void16_as_bf16`` reads a
    2-byte void array as bfloat16: that is how ``np.save`` stores an ``ml_dtypes.bfloat16`` array, since
    the .npy header has no name for the type.
    """
    head = read_input(path, "a .npy file", len(_NPY_MAGIC))
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


#: The output name that means stdout (``-o -``), for the outputs that can go there.
STDOUT = "-"


class Named(str):
    """An option's value (a path) that remembers the option string it was given with (``-o`` or
    ``--output``), so that a message names the option as the user typed it."""

    def __new__(cls, value, option):
        named = super().__new__(cls, value)
        named.option = option
        return named


class _StoreNamed(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, Named(values, option_string))


def add_output_option(p, *flags, metavar, help, former=(), **kw):
    """An output file's option (``-o/--output`` and the like): its value is a :class:`Named` path, so that
    :meth:`Outputs.add` names the option as typed. ``help`` says what the file is and its default;
    ``former`` names are still accepted, and the help says so."""
    if former:
        help += f"; {', '.join(former)} is its former name, still accepted"
    p.add_argument(*flags, *former, action=_StoreNamed, metavar=metavar, help=help, **kw)


class Outputs:
    """The output files of one command: checked before the work, written whole or not at all.

    ``inputs`` are paths the command reads; no output may name one (even with ``force``). ``json``: the
    command prints its result as JSON on stdout (``--json``), so no output may go there too.
    """

    def __init__(self, *, force=False, inputs=(), json=False):
        self.force = force
        self.json = json
        # stdout as it is now: a command may send its account elsewhere while an output goes here.
        self._stdout = sys.stdout
        self.inputs = [os.fspath(p) for p in inputs if p is not None]
        self._paths = {}  # final Path -> option name
        self._temps = {}  # final Path -> temporary Path

    @property
    def to_stdout(self):
        """Whether an output goes to stdout (then a command's account of its work goes to stderr)."""
        return Path(STDOUT) in self._paths

    @property
    def log(self):
        """Where a command prints its summary: stdout, unless an output goes there."""
        return sys.stderr if self.to_stdout else self._stdout

    @staticmethod
    def shown(path):
        """``path`` as a summary names it: ``stdout`` for ``-``."""
        return "stdout" if os.fspath(path) == STDOUT else os.fspath(path)

    def add(self, path, what=None, *, default=None, stdout=None):
        """Check ``path`` (the value of option ``what``) and return it as a :class:`Path`.

        ``what`` is the option as the user typed it when ``path`` is a :class:`Named` value; None for a
        positional argument (the messages then name the path alone). ``path`` None means the option was
        not given: ``default`` is used, a file under ``build/`` that is the command's own scratch and is
        replaced without ``--force`` (so a second run is not refused); a path the user names is never
        replaced without it. ``-`` is stdout when ``stdout`` says what goes there (``"text"`` or
        ``"binary"``, which a terminal does not take), else refused. Creates missing parent folders.
        Raises :class:`WanreduceError` when the path is an input, is named by another output, is a
        directory, exists without ``force``, or cannot be written.
        """
        what = getattr(path, "option", None) or what
        scratch = path is None
        path = default if scratch else path
        named = f"{what} {path}" if what else f"{path}"
        if os.fspath(path) == STDOUT:
            return self._add_stdout(what, named, stdout)
        path = Path(path)
        for src in self.inputs:
            if same_file(path, src):
                raise WanreduceError(f"{named} is also an input file; choose another output")
        for other, other_what in self._paths.items():
            if same_file(path, other):
                both = f"{what} and {other_what}" if what and other_what else "two outputs"
                raise WanreduceError(f"{both} both name {path}; choose two files")
        if path.is_dir():
            raise WanreduceError(f"{named} is a directory; name a file")
        if path.exists() and not (self.force or scratch):
            raise WanreduceError(f"{named} already exists; pass --force to replace it")
        parent = path.parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            blocker = next((p for p in (parent, *parent.parents) if p.exists() and not p.is_dir()), parent)
            raise WanreduceError(f"{named}: {blocker} is a file, not a folder") from None
        except OSError as exc:
            raise WanreduceError(f"{named}: cannot create the folder {parent} ({exc.strerror})") from None
        # os.access is not enough (read-only mounts, ACLs): creating a file is the real test.
        try:
            fd, probe = tempfile.mkstemp(dir=parent, prefix=f".{path.name}.", suffix=".probe")
        except OSError as exc:
            raise WanreduceError(f"{named}: cannot write in {parent} ({exc.strerror})") from None
        os.close(fd)
        os.unlink(probe)
        self._paths[path] = what
        return path

    def _add_stdout(self, what, named, kind):
        if kind is None:
            raise WanreduceError(f"{named}: this output cannot go to stdout; name a file")
        if self.json:
            raise WanreduceError(f"{named} and --json both write to stdout; choose one")
        if self.to_stdout:
            raise WanreduceError(f"{named}: another output already goes to stdout; name a file")
        if kind == "binary" and self._stdout.isatty():
            raise WanreduceError(f"{named}: binary data for a terminal; redirect stdout or name a file")
        self._paths[Path(STDOUT)] = what
        return Path(STDOUT)

    def __iter__(self):
        return iter(self._paths)

    def temp(self, path):
        """The temporary file to write instead of ``path`` (an :meth:`add`-ed output) in :meth:`commit`."""
        path = Path(path)
        if path not in self._paths:
            raise KeyError(f"{path} was not declared with Outputs.add")
        if path not in self._temps:
            where = (
                dict(dir=None, prefix=".wanreduce-stdout.")
                if path == Path(STDOUT)
                else dict(dir=path.parent, prefix=f".{path.name}.")
            )
            fd, tmp = tempfile.mkstemp(suffix=path.suffix, **where)
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
        piped = self._temps.pop(Path(STDOUT), None)
        try:
            for path, tmp in self._temps.items():
                os.replace(tmp, path)
        except OSError as exc:
            self.discard()
            if piped is not None:
                piped.unlink()
            raise WanreduceError(f"cannot write {path} ({exc.strerror})") from None
        self._temps.clear()
        if piped is not None:
            try:
                self._stdout.flush()
                with open(piped, "rb") as f:
                    shutil.copyfileobj(f, self._stdout.buffer)
                self._stdout.buffer.flush()
            finally:
                piped.unlink()


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


def plural(n, word, many=None):
    """``n word`` with the word in the plural unless n is 1: ``plural(1, "chunk")`` is ``"1 chunk"``."""
    return f"{n} {word if n == 1 else (many or word + 's')}"


def flattened(shape):
    """`` (flattened from (10, 30))`` for an array of more than one dimension, else ``""``: the wire
    carries a flat tensor, and a summary says so when the user's array had a shape."""
    shape = tuple(shape)
    return f" (flattened from {shape})" if len(shape) > 1 else ""


def progress(command, text):
    """One progress line on stderr, ``wanreduce COMMAND: text``, flushed at once."""
    print(f"wanreduce {command}: {text}", file=sys.stderr, flush=True)


#: Seconds between the lines of :func:`heartbeat`: a run shorter than this prints none.
HEARTBEAT_S = 5.0


@contextlib.contextmanager
def heartbeat(command):
    """A :func:`progress` line every :data:`HEARTBEAT_S` seconds while the block runs, naming the step the
    block last reported (through the function it is given) and the time so far; a block that ends sooner
    prints nothing. For a long step inside a library that has no progress of its own."""
    step = ["working"]
    stop = threading.Event()
    t0 = time.perf_counter()

    def beat():
        while not stop.wait(HEARTBEAT_S):
            progress(command, f"{step[0]} ({time.perf_counter() - t0:.0f} s so far)")

    thread = threading.Thread(target=beat, name=f"wanreduce {command} progress", daemon=True)
    thread.start()
    try:
        yield lambda text: step.__setitem__(0, text)
    finally:
        stop.set()
        thread.join()


# -- option groups that several commands share, and their parse-time checks --------------------------


#: The WAN's seeded faults, in the order of ``--help``: (option, what it does; None for a flag).
_FAULTS = (
    ("--loss", "probability that the WAN loses a CONTRIB copy or a RESULT"),
    ("--dup", "probability that the WAN delivers a CONTRIB copy or a RESULT twice"),
    ("--reorder", None),
    ("--corrupt", "probability that one bit of a CONTRIB copy flips"),
)


def add_fault_options(p):
    """The WAN's seeded faults (``--loss``, ``--dup``, ``--reorder``, ``--corrupt``) and ``--kill``."""
    for name, text in _FAULTS:
        if text is None:
            p.add_argument(
                name,
                action="store_true",
                help="delay every CONTRIB copy by up to one round trip of its pair, so copies overtake",
            )
        else:
            kw = dict(type=probability(name), default=0.0, metavar="P")
            p.add_argument(name, help=f"{text} (default: 0)", **kw)
    p.add_argument(
        "--kill",
        metavar="SITE@ROUND",
        help="that site (name or rank) sends nothing from that round on; the run must stop with "
        "an error naming it",
    )


def add_capture_argument(p, what, *, dest="input", metavar="IN.pcap"):
    """The capture a command reads, a positional argument; ``what`` says what the command takes from it.
    Every reader takes the same format, which the help names once here."""
    p.add_argument(dest, metavar=metavar, help=f"{what} (classic pcap, Ethernet)")


def add_results_capture(p):
    """The capture of RESULTs that ``unpack`` and ``verify`` read."""
    add_capture_argument(p, "capture holding RESULT frames", metavar="RESULTS.pcap")


def add_grads_option(p):
    """``--grads GRADS.npz``: every site's tensor (:func:`wanreduce.host.emit.load_grads` reads it)."""
    p.add_argument(
        "--grads",
        metavar="GRADS.npz",
        required=True,
        help="every site's gradients, keyed by site name or rank<R> (required)",
    )


def add_port_option(p, what):
    """``--port``: a UDP port, 1..65535, wanreduce's own by default; ``what`` says which port it is."""
    int_option(p, "--port", 1, 0xFFFF, default=UDP_PORT, help=f"{what} (default: {UDP_PORT})")


def add_rank_option(p, help, **kw):
    """``--rank``, a site's rank; ``help`` says which site, ``kw`` (``required``, ``default``) the rest."""
    p.add_argument("--rank", type=rank_arg, help=help, **kw)


#: An argparse type: a site's rank (``--rank``), 0..MAX_RANKS - 1.
rank_arg = int_in(0, MAX_RANKS - 1, "--rank")


def add_dtype_option(p, what="element type on the wire", default="fp32"):
    """``--dtype``, one of the wire's element types (``default`` fp32); ``what`` is its help."""
    p.add_argument(
        "--dtype", choices=[d.label for d in DType], default=default, help=f"{what} (default: {default})"
    )


#: The datapath width the commands that simulate the core (``demo``, ``demo-net``, ``sim-replay``,
#: ``rtl-add``) build by default: every width gives the same frames and sums, and 64 bits builds and
#: simulates quickest. ``verilog`` and the cost model (``schedule``, ``sweep``) default to the deployed
#: 512-bit build instead (a 100G MAC's bus), and say so in their help.
SIM_WIDTH = 64


def add_width_option(p, *, choices=WIDTHS, type=int):
    """``--width``, the datapath width in bits of a simulated core, :data:`SIM_WIDTH` by default."""
    p.add_argument(
        "--width",
        type=type,
        choices=choices,
        default=SIM_WIDTH,
        metavar="BITS",
        help=f"datapath width in bits, one of {', '.join(map(str, choices))} (default: {SIM_WIDTH}: every "
        "width gives the same results and this one builds quickest; verilog's default is the deployed 512)",
    )


def add_topology_option(p, *, default="nine-city", default_help=None, note="", former=()):
    """``--topology``: an embedded topology or a topology CSV; ``note`` adds what the command does with it,
    ``default_help`` what the default means, and ``former`` the option's former names (``--wan``),
    still accepted (the help says so)."""
    renamed = f"; {', '.join(former)} is its former name, still accepted" if former else ""
    p.add_argument(
        "--topology",
        *former,
        dest="topology",
        metavar="NAME|FILE.csv",
        default=default,
        help=f"{' or '.join(EMBEDDED)}, or a CSV of public links (City1,City2,Latency[,Bandwidth]) or "
        f"private links (Device1,Device2,Latency,Bandwidth), latencies RTT in ms{note} "
        f"({default_help or f'default: {default}'}{renamed})",
    )


def add_chunk_option(p, *, default_help):
    """``--chunk-bytes``, the payload bytes of one chunk (the name and unit of the schedule file, the cost
    model and the gateware), with ``--chunk-elems``, the former count of elements, still accepted;
    :func:`chunk_elems_of` reads either. ``default_help`` says what is used without them."""
    g = p.add_mutually_exclusive_group()
    int_option(
        g,
        "--chunk-bytes",
        1,
        MAX_COUNT * 4,
        default=None,
        metavar="BYTES",
        help=f"payload bytes per packet, a whole number of elements of --dtype ({default_help})",
    )
    int_option(
        g,
        "--chunk-elems",
        1,
        MAX_COUNT,
        default=None,
        metavar="N",
        help="elements per packet, instead of --chunk-bytes (its former form, still accepted)",
    )


def chunk_elems_of(args, dtype, *, default=None):
    """Elements per chunk from ``--chunk-bytes`` or ``--chunk-elems`` (``default`` bytes when neither: None
    leaves the choice to the caller)."""
    if args.chunk_elems is not None:
        return args.chunk_elems
    nbytes = args.chunk_bytes if args.chunk_bytes is not None else default
    if nbytes is None:
        return None
    if nbytes % dtype.size:
        raise WanreduceError(
            f"--chunk-bytes {nbytes} is not a whole number of {dtype.label} elements ({dtype.size} bytes)"
        )
    elems = nbytes // dtype.size
    if elems > MAX_COUNT:
        raise WanreduceError(
            f"--chunk-bytes {nbytes} holds {elems} {dtype.label} elements; a packet holds at most {MAX_COUNT}"
        )
    return elems


#: Chunk bytes of the commands that make packets, when no option gives them: the cost model's.
DEFAULT_CHUNK_BYTES = CostParams().chunk_bytes


def add_experiment_options(p):
    """The options of an experiment over every site of a topology (``demo``, ``demo-net``): the topology,
    the memory the schedule and the cores are built for, the seeded tensors, the cores' width and the
    schedule search, with one name, range and default each."""
    add_topology_option(p)
    p.add_argument(
        "--memory",
        default="1MiB",
        help="aggregator memory per site the schedule and the cores are built for (default: 1MiB)",
    )
    int_option(
        p,
        "--elements",
        1,
        1 << 22,
        default=65536,
        help="elements of each site's tensor (default: 65536)",
    )
    add_chunk_option(p, default_help=f"default: {DEFAULT_CHUNK_BYTES}")
    add_dtype_option(p)
    int_option(p, "--seed", 0, 2**32 - 1, default=1, help="random seed (default: 1)")
    add_width_option(p)
    int_option(
        p,
        "--time-limit",
        1,
        600,
        default=5,
        help="seconds for the schedule search (default: 5)",
    )


def config_of(cls, args, **given):
    """The dataclass ``cls`` from the options named as its fields, and the fields in ``given`` (those the
    command parses or derives from other options). A field without its option is an error, not a silent
    default: the command and the configuration name every setting once."""
    named = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if f.name not in given}
    return cls(**named, **given)


def add_report_options(p, *, default_help):
    """``-o/--output``, the report of an experiment over every site (``demo``, ``demo-net``), and its
    ``--force``; ``default_help`` says where the report goes without ``-o``."""
    add_output_option(
        p,
        "-o",
        "--output",
        metavar="FILE",
        help="write the report (JSON) to FILE, - for stdout (the account then goes to stderr); it must "
        f"not exist unless --force (default: {default_help})",
    )
    add_force_option(p, "the report file")


def add_wan_option(p, *, default_help):
    """``--topology`` of the commands that replay or emit over a WAN (``--wan`` still accepted)."""
    add_topology_option(
        p,
        default=None,
        note="; the WAN whose one-way delays apply, its sites the schedule's in the same order",
        default_help=default_help,
        former=("--wan",),
    )


def wan_of(args, schedule):
    """The topology of ``--wan``; by default the one the schedule was made for (its params.topology: an
    embedded name, or a CSV that still exists at that path), else nine-city."""
    name = args.topology
    recorded = schedule.params.get("topology")
    if name is None:
        usable = isinstance(recorded, str) and (recorded in EMBEDDED or os.path.isfile(recorded))
        name = recorded if usable else "nine-city"
    try:
        return topology_for(name, schedule.sites)
    except WanreduceError as exc:
        if args.topology is None and isinstance(recorded, str) and recorded != name:
            raise WanreduceError(
                f"{exc}; the schedule was made for {recorded}: give it with --topology"
            ) from None
        raise


def add_speed_options(p):
    g = p.add_mutually_exclusive_group()
    g.add_argument(
        "--speed",
        type=positive_float("--speed"),
        default=1.0,
        help="play the timestamps this many times faster (default: 1, real time)",
    )
    g.add_argument(
        "--topspeed",
        action="store_true",
        help="ignore the timestamps and send back to back, as fast as the socket takes them",
    )


#: ``--mode`` choices: which aggregation modes may win.
MODES = {"auto": ("gather", "root"), "gather": ("gather",), "root": ("root",)}


#: Jitter beyond a minute is no WAN's: a typo, which would give a period of centuries.
MAX_JITTER_MS = 60_000


#: The cost model's plain positive numbers: (option, CostParams field, metavar, what it is), each option
#: added and read through this one list.
_MODEL_NUMBERS = (
    (
        "--site-gbps",
        "site_gbps",
        "GBPS",
        "each site's access link, Gbit/s per direction, unless the topology gives it",
    ),
    ("--fpga-ingress-gbps", "fpga_ingress_gbps", "GBPS", "sum of the aggregator's input ports, Gbit/s"),
    ("--clock-mhz", "clock_mhz", "MHZ", "aggregator datapath clock, one bus beat per cycle"),
    ("--epsilon", "epsilon", "EPS", "consensus target for schedules that are not exact"),
)


def add_model_arguments(p, *, memory_help=None):
    """Options shared by ``schedule`` and ``sweep``: the topology and every cost-model parameter."""
    d = CostParams()
    add_topology_option(p)
    p.add_argument(
        "--sites",
        default=None,
        metavar="A,B,...",
        help="use only these cities, in this rank order (default: every city, sorted)",
    )
    if memory_help is not None:
        p.add_argument("--memory", default=format_size(d.memory_bytes), metavar="SIZE", help=memory_help)
    p.add_argument(
        "--chunk-bytes",
        default=str(d.chunk_bytes),
        metavar="SIZE",
        help=f"payload bytes per packet (default: {d.chunk_bytes})",
    )
    p.add_argument(
        "--tensor-bytes",
        default=format_size(d.tensor_bytes),
        metavar="SIZE",
        help=f"bytes each site contributes per sync (default: {format_size(d.tensor_bytes)})",
    )
    for flag, field, metavar, text in _MODEL_NUMBERS[:3]:
        p.add_argument(
            flag, default=getattr(d, field), metavar=metavar, help=f"{text} (default: {getattr(d, field):g})"
        )
    p.add_argument(
        "--width",
        "--bus-bits",
        dest="width",
        default=d.bus_bits,
        metavar="BITS",
        help=f"aggregator datapath width in bits (default: {d.bus_bits}, the deployed build's, as in "
        "verilog; --bus-bits is its former name, still accepted)",
    )
    p.add_argument(
        "--link-gbps",
        default=None,
        metavar="GBPS",
        help="capacity of public links without a Bandwidth column, Gbit/s per direction (default: unlimited)",
    )
    flag, field, metavar, text = _MODEL_NUMBERS[3]
    p.add_argument(
        flag, default=getattr(d, field), metavar=metavar, help=f"{text} (default: {getattr(d, field):g})"
    )
    p.add_argument(
        "--time-limit",
        type=positive_float("--time-limit"),
        default=20.0,
        metavar="SECONDS",
        help="search budget for the optimizer; small networks finish well before (default: 20)",
    )
    int_option(
        p,
        "--seed",
        0,
        2**32 - 1,
        default=0,
        help="seed of the randomised search (default: 0)",
    )


def add_mode_arguments(p):
    """Options shared by ``schedule`` and ``sweep``: the aggregation modes and the WAN jitter."""
    p.add_argument(
        "--mode",
        choices=sorted(MODES),
        default="auto",
        help="aggregation mode: gather (every member aggregates), root (one root per stripe "
        "sums and multicasts the RESULT, docs/lean.md) or auto, the faster (default: auto)",
    )
    p.add_argument(
        "--jitter-ms",
        default=DEFAULT_JITTER_S * 1e3,
        metavar="MS",
        help="one-way WAN jitter that root mode's send offsets absorb; a root's slot lives 2x "
        f"this (default: {DEFAULT_JITTER_S * 1e3:g})",
    )


def modes_from_args(args):
    """``(jitter_s, modes)`` from ``--jitter-ms`` and ``--mode``."""
    jitter_ms = number(args.jitter_ms, "--jitter-ms", positive=False)
    if not 0 <= jitter_ms <= MAX_JITTER_MS:
        raise WanreduceError(
            f"--jitter-ms must be in 0..{MAX_JITTER_MS} (a WAN's one-way jitter), got {args.jitter_ms}"
        )
    return jitter_ms / 1e3, MODES[args.mode]


def number(text, what, *, kind=float, positive=True, allow_none=False):
    """Convert an option's text, with a one-line error naming the option (argparse's would be two)."""
    if text is None and allow_none:
        return None
    try:
        value = kind(text)
    except (TypeError, ValueError):
        noun = "an integer" if kind is int else "a number"
        raise WanreduceError(f"{what} must be {noun}, got {text!r}") from None
    if kind is float and not math.isfinite(value):
        raise WanreduceError(f"{what} must be a finite number, got {text!r}")
    if positive and value <= 0:
        raise WanreduceError(f"{what} must be positive, got {text}")
    return value


def topology_from_args(args):
    sites = None
    if args.sites is not None:
        sites = [s.strip() for s in args.sites.split(",")]
        if any(not s for s in sites):
            raise WanreduceError(f"--sites {args.sites!r} has an empty name")
    link = number(args.link_gbps, "--link-gbps", allow_none=True)
    return load_topology(args.topology, link_gbps=link, sites=sites)


def params_from_args(args, *, memory=None):
    if memory is None:
        memory = parse_size(args.memory, what="--memory")
    return CostParams(
        memory_bytes=memory,
        chunk_bytes=parse_size(args.chunk_bytes, what="--chunk-bytes"),
        tensor_bytes=parse_size(args.tensor_bytes, what="--tensor-bytes"),
        bus_bits=number(args.width, "--width", kind=int),
        **{field: number(getattr(args, field), flag) for flag, field, _, _ in _MODEL_NUMBERS},
    )


def model_from_args(args):
    return CostModel(topology_from_args(args), params_from_args(args))


#: Searches allowed longer than this print a progress line first.
SLOW_SEARCH_S = 5.0
