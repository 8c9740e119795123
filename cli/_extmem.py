"""The external-memory build's options of the cost model's commands (``schedule``, ``sweep``).

``--buffers`` and ``--mem-ports`` are ``wanreduce verilog``'s own definitions
(:func:`wanreduce.sim.synth.verilog.add_arguments`), replayed onto these parsers, so a quantity has one
name, one range and one default across the commands that build the core and those that cost it.
``--mem-latency-us`` is the model's alone (the gateware has no latency parameter).
"""

import os

from ..host import hbm
from ..host.costmodel import CostParams
from ..spec.errors import WanreduceError
from ._common import (
    Outputs,
    add_force_option,
    add_json_option,
    add_mode_arguments,
    add_model_arguments,
    add_output_option,
    number,
    params_from_args,
)

__all__ = [
    "add_cost_options",
    "add_result_options",
    "result_outputs",
    "add_build_arguments",
    "build_of",
    "params_of",
]

#: ``wanreduce verilog``'s options that say which build the model costs.
_SHARED = ("--buffers", "--mem-ports")


class _Recorder:
    """Takes ``add_argument`` calls as a parser would, to replay the chosen ones on another parser."""

    def __init__(self):
        self.calls = {}

    def add_argument(self, *names, **kw):
        self.calls[names[0]] = (names, kw)


def add_cost_options(p, *, memory_help=None):
    """Every option of the cost model's commands (``schedule``, ``sweep``), in their order: the topology
    and the model's parameters, the build the model costs, the aggregation modes."""
    add_model_arguments(p, memory_help=memory_help)
    add_build_arguments(p)
    add_mode_arguments(p)


def add_result_options(p, *, metavar, what, default):
    """``-o/--output`` (the command's file, ``default`` when not given, none with ``--json``), ``--force``
    and ``--json``; ``what`` says what the file is."""
    add_output_option(
        p,
        "-o",
        "--output",
        default=None,
        metavar=metavar,
        help=f"{what}; a {metavar} that exists needs --force (default: {default}, replaced each run; none "
        "with --json)",
    )
    add_force_option(p, metavar)
    add_json_option(p)


def result_outputs(args, default, **kw):
    """``(outs, path)``: the command's :class:`Outputs` (a topology file given is an input) and its ``-o``
    file, or ``default``; no file (None) with ``--json`` and no ``-o``, since the result is printed."""
    topology = [args.topology] if os.path.exists(args.topology) else []
    outs = Outputs(force=args.force, inputs=topology, json=args.json)
    if args.json and args.output is None:
        return outs, None
    return outs, outs.add(args.output, "-o", default=default, **kw)


def add_build_arguments(p):
    """Add ``--buffers``, ``--mem-ports`` (as ``wanreduce verilog`` defines them) and ``--mem-latency-us``."""
    from ..sim.synth import verilog  # the gateware's option definitions (imports Amaranth)

    rec = _Recorder()
    verilog.add_arguments(rec)
    for flag in _SHARED:
        names, kw = rec.calls[flag]
        p.add_argument(*names, **kw)
    d = CostParams()
    p.add_argument(
        "--mem-latency-us",
        default=d.mem_latency_us,
        metavar="US",
        help="external buffers: one memory access's latency in microseconds, paid twice per chunk (write "
        f"acknowledged, then read); the model caps --memory at the {hbm.CARD}'s HBM "
        f"(default: {d.mem_latency_us:g})",
    )


def build_of(args):
    """The :class:`CostParams` keywords of the build options."""
    latency = number(args.mem_latency_us, "--mem-latency-us", positive=False)
    if not 0 <= latency <= 1e3:
        raise WanreduceError(f"--mem-latency-us must be in 0..1000 (microseconds), got {args.mem_latency_us}")
    return dict(buffers=args.buffers, mem_ports=args.mem_ports, mem_latency_us=latency)


def params_of(args, *, memory=None):
    """:func:`params_from_args` for the build the options name (the memory cap checked for it)."""
    return params_from_args(args, memory=memory).replace(**build_of(args))
