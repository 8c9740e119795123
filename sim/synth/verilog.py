"""Verilog for vendor flows: the configurable top (``wanreduce verilog``) and every block on its own.

:func:`export` writes, for one build configuration, ``DIR/<top>.v`` (one self-contained file: the top and
every submodule, memories inferred), ``DIR/<top>.json`` (the build parameters, what they imply, and the
file's SHA-256) and ``DIR/<top>.md`` (the port table with each port's clock domain). The top is
:class:`~wanreduce.hw.axi.AXIAggregator` around :class:`~wanreduce.hw.core.AggregatorCore` (``kind="axi"``,
AXI4-Stream data ports, AXI4-Lite control on clock ``axil_clk``) or the bare core (``kind="core"``: the
packed ``{last, bytes, data}`` beats and the ``ctl`` bus of ``docs/control.md``).

:func:`blocks` gives every pipeline stage on its own (``--blocks``: ``DIR/<name>.v`` each), for synthesising
one stage.
"""

import hashlib
import json
import warnings
from pathlib import Path

from ...hw import fadd
from ...hw.axi import AXIL_ADDR_BITS, WRAP_BASE, WRAP_REGS, AXIAggregator
from ...hw.control import Control
from ...hw.core import AggregatorCore
from ...hw.fanout import Fanout
from ...hw.frame_parser import FrameParser
from ...hw.header_parser import HeaderParser
from ...hw.layouts import WIDTHS
from ...hw.reduce import Reduce
from ...hw.result_builder import ResultBuilder
from ...hw.schedule_table import ScheduleTable
from ...hw.slot_table import SlotTable
from ...spec.core import DEFAULT, CoreConfig
from ...spec.protocol import HEADER_BYTES
from ..verilator import toolchain

__all__ = [
    "DEFAULTS",
    "MEMORY_DEFAULTS",
    "KINDS",
    "LINT_WAIVER",
    "build",
    "export",
    "lint",
    "blocks",
    "write_blocks",
    "port_table",
    "add_arguments",
    "options",
]

#: The export's options beyond the core's configuration: where the member buffers live, and the external
#: memory's AXI4 ports (docs/extmem.md).
MEMORY_DEFAULTS = {"buffers": "internal", "mem_ports": 1, "mem_addr_width": 34, "mem_id_width": None}
#: The default build: :data:`~wanreduce.spec.core.DEFAULT` (W = 512 for a 100G MAC, groups of up to 9,
#: 1 KiB chunks, 64 slots: 612 KiB of reorder buffer, an on-chip configuration; docs/aggregator.md sizes S
#: for a given WAN), its member buffers on chip.
DEFAULTS = {**DEFAULT.as_dict(), **MEMORY_DEFAULTS}
#: What the top is: the AXI wrapper around the core, or the bare core.
KINDS = ("axi", "core")
#: Default top module names per kind.
TOP_NAMES = {"axi": "wanreduce_axi", "core": "wanreduce_core"}


def _config(**overrides):
    unknown = set(overrides) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"Unknown build parameters: {', '.join(sorted(unknown))}.")
    c = {**DEFAULTS, **{k: v for k, v in overrides.items() if v is not None}}
    if c["entry"] == "payload" and overrides.get("bypass_bytes") is None:
        c["bypass_bytes"] = 0  # bare UDP payloads are all wanreduce: nothing to pass through
    return c


def _split(c):
    """The :class:`~wanreduce.spec.core.CoreConfig` of a build's keywords, and the memory options."""
    memory = {k: c[k] for k in MEMORY_DEFAULTS}
    return CoreConfig(**{k: v for k, v in c.items() if k not in MEMORY_DEFAULTS}), memory


def build(*, kind="axi", ctl_domain="axil", fifo_beats=None, **config):
    """The component of a configuration (keywords of :data:`DEFAULTS`, missing ones defaulted).

    Raises ``ValueError`` (a full sentence) for a configuration the gateware refuses.
    """
    if kind not in KINDS:
        raise ValueError(f"The top must be one of {', '.join(KINDS)}, not {kind!r}.")
    core_config, memory = _split(_config(**config))
    core = AggregatorCore(core_config, **memory)
    if kind == "core":
        return core
    return AXIAggregator(core=core, ctl_domain=ctl_domain, fifo_beats=fifo_beats)


_DESCRIPTIONS = {
    "clk": "core clock (domain `sync`): the MAC's user clock, e.g. 322.265625 MHz for a 100G CMAC",
    "rst": "reset of `sync`, active high, synchronous",
    "axil_clk": "AXI4-Lite clock (domain `axil`), any frequency; crossed to `clk` by asynchronous FIFOs",
    "axil_rst": "reset of `axil`, active high, synchronous; assert together with `rst`",
    "tdata": "data, byte b in bits 8b+7:8b (first byte on the wire lowest)",
    "tkeep": "byte enables: contiguous from bit 0, all ones except on the tlast beat",
    "tlast": "last beat of a frame",
    "s_axis__tuser": "AXI4-Stream in: the MAC's bad-frame flag (FCS error) on any beat of a frame: the frame "
    "is dropped whole and counted (RX_USER)",
    "tuser": "always 0",
    "tvalid": "beat valid",
    "tready": "beat accepted (with tvalid)",
    "awaddr": "write byte address: 4·reg for core register reg, 0x40000 + 4·n for wrapper register n",
    "araddr": "read byte address, as awaddr",
    "wstrb": "byte strobes; anything but 0xF is refused with SLVERR",
    "bresp": "OKAY, or SLVERR for a partial-strobe write",
    "rresp": "always OKAY",
    "wdata": "write data",
    "rdata": "read data",
    "payload": "beat: data (W bits, byte 0 lowest), bytes (valid bytes), last; packed {last, bytes, data}",
    "valid": "beat valid",
    "ready": "beat accepted (with valid)",
    "addr": "word address of a register (docs/control.md)",
    "we": "write strobe (takes effect next cycle)",
    "re": "read strobe",
    "ctl__rdata": "read data, valid two cycles after re",
}


_MEM_DESCRIPTIONS = {
    "id": "ID: 0 for writes; frame × 2^ceil(log2 G_max) + member for reads",
    "addr": "byte address: ((slot div K) × G_max + member) × stride",
    "len": "beats − 1 of the burst (one contribution, or one member buffer read back)",
    "size": "log2 of W/8: full-width beats",
    "burst": "INCR",
    "strb": "all ones",
    "resp": "SLVERR or DECERR: counted, the chunk dropped",
    "data": "data, byte b in bits 8b+7:8b",
    "last": "last beat of the burst",
    "valid": "valid",
    "ready": "ready",
}


def _describe(name):
    if name in _DESCRIPTIONS:
        return _DESCRIPTIONS[name]
    tail = name.rsplit("__", 1)[-1]
    if name.startswith("m_axi_mem") or (name.startswith("mem") and name[3:4].isdigit()):
        what = _MEM_DESCRIPTIONS.get(tail[2:] if tail[:2] in ("aw", "ar") else tail[1:], "")
        return (
            f"AXI4 master {name.split('__')[0]} to external memory (member buffers, docs/extmem.md): {what}"
        )
    if name in ("mem_errors", "mem_drops"):
        return {"mem_errors": "external memory: error responses", "mem_drops": "chunks dropped for them"}[
            name
        ]
    for prefix, what in (
        ("s_axis__", "AXI4-Stream in: "),
        (
            "m_axis_bypass__",
            "AXI4-Stream out, in-line bypass (the frames that are not this core's work, unchanged): ",
        ),
        ("m_axis", "AXI4-Stream out: "),
        ("bypass__", "stream out, in-line bypass (the frames that are not this core's work, unchanged): "),
        ("s_axil__", "AXI4-Lite: "),
        ("i__", "stream in: "),
        ("o__", "stream out: "),
        ("ctl__", "control port: "),
    ):
        if name.startswith(prefix):
            return what + _DESCRIPTIONS.get(tail, tail)
    return ""


def _domain(name, kind):
    if name in ("clk", "rst"):
        return "—"
    if name.startswith(("axil_", "s_axil__")):
        return "axil"
    return "sync"


def port_table(ports, *, kind="axi", title=None):
    """Markdown table of ``{name: (direction, width)}`` with each port's clock domain and meaning."""
    lines = [f"# {title}", ""] if title else []
    lines += ["| port | dir | bits | domain | meaning |", "| --- | --- | ---: | --- | --- |"]
    order = sorted(ports, key=lambda n: (not n.endswith(("clk", "rst")), n))
    for name in order:
        direction, width = ports[name]
        lines.append(
            f"| `{name}` | {'in' if direction == 'input' else 'out'} | {width} | "
            f"{_domain(name, kind)} | {_describe(name)} |"
        )
    return "\n".join(lines) + "\n"


def export(out_dir, *, kind="axi", top=None, ctl_domain="axil", fifo_beats=None, **config):
    """Write the Verilog, JSON and Markdown of one build into ``out_dir``; return their paths.

    ``config``: keywords of :data:`DEFAULTS`. Raises ``ValueError`` for a configuration the gateware refuses.
    """
    c = _config(**config)
    top = top or TOP_NAMES.get(kind, "wanreduce_top")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        component = build(kind=kind, ctl_domain=ctl_domain, fifo_beats=fifo_beats, **c)
        key = ("export", kind, ctl_domain, fifo_beats, sorted(c.items()))
        text = toolchain.verilog_text(component, top=top, key=key, sources=(__file__,))
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    vpath, jpath, mpath = (out_dir / f"{top}{ext}" for ext in (".v", ".json", ".md"))
    vpath.write_text(text)
    ports = toolchain.parse_ports(text, top=top)
    core = component if kind == "core" else component.core
    import amaranth

    meta = {
        "top": top,
        "kind": kind,
        "verilog": vpath.name,
        "sha256": hashlib.sha256(text.encode()).hexdigest(),
        "amaranth": amaranth.__version__,
        "config": c,
        "slot_memory_bytes": core.slot_memory_bytes,
        "payload_words": core.words,
        "clocks": ["clk"] + (["axil_clk"] if kind == "axi" and ctl_domain != "sync" else []),
        "ports": {n: {"dir": d, "bits": w} for n, (d, w) in sorted(ports.items())},
    }
    if kind == "axi":
        meta.update(
            fifo_beats=component.fifo_beats,
            axil_addr_bits=AXIL_ADDR_BITS,
            wrapper_base=WRAP_BASE,
            wrapper_registers=WRAP_REGS,
            outputs=[component.axis_name(o) for o in component.outputs],
        )
    jpath.write_text(json.dumps(meta, indent=1) + "\n")
    title = (
        f"`{top}` ports: {kind} top, W={c['width']}, S={c['slots']}, G={c['members']}, "
        f"C={c['chunk_bytes']} B, D={c['dests']}, {c['jobs']} jobs × {c['rounds']} rounds, "
        f"entry={c['entry']}"
        + (f", external buffers on {c['mem_ports']} AXI4 ports" if c["buffers"] == "external" else "")
    )
    mpath.write_text(port_table(ports, kind=kind, title=title))
    return {"verilog": vpath, "json": jpath, "ports": mpath}


#: Waivers for ``verilator --lint-only -Wall`` of generated Verilog, each with its reason.
LINT_WAIVER = Path(__file__).with_name("lint_waiver.vlt")


def lint(path, *, top):
    """``verilator --lint-only -Wall`` with :data:`LINT_WAIVER` on a Verilog file: ``(passed, output)``."""
    import subprocess

    root = toolchain.setup()
    proc = subprocess.run(
        [
            str(root / "bin" / "verilator"),
            "--lint-only",
            "-Wall",
            "--top-module",
            top,
            str(LINT_WAIVER),
            str(path),
        ],
        capture_output=True,
        text=True,
    )
    return proc.returncode == 0, proc.stdout + proc.stderr


def blocks(width, **config):
    """``{name: component}`` for every top-level block, built with the defaults (or ``config``): the
    stages, then the bare core with each entry point (the payload core without a bypass port)."""
    d = _config(width=width, **config)
    c, _ = _split(d)
    shape = {"width": width, "slots": c.slots, "members": c.members}
    out = {
        "frame_parser": FrameParser(width=width),
        "header_parser": HeaderParser(width=width, slot_bytes=c.chunk_bytes),
        "schedule_table": ScheduleTable(**shape, jobs=c.jobs, rounds=c.rounds, mod_stages=c.mod_stages),
        "slot_table": SlotTable(**shape, slot_bytes=c.chunk_bytes),
        "result_builder": ResultBuilder(width=width, slots=c.slots),
        "fanout": Fanout(width=width, dests=c.dests, max_payload=HEADER_BYTES + c.chunk_bytes),
        "control": Control(
            **{k: getattr(c, k) for k in ("jobs", "rounds", "dests", "slots", "members")},
            params={"width": width},
        ),
    }
    for fmt in ("FP32", "FP16", "BF16"):
        f = getattr(fadd.FloatFormat, fmt)
        out[f"fadd_lanes_{fmt.lower()}"] = fadd.FAddLanes(fmt=f, width=width)
    out["reduce"] = Reduce(**shape, words=c.words)
    out["agg_core_frame"] = build(kind="core", **{**d, "entry": "frame"})
    out["agg_core_payload"] = build(kind="core", **{**d, "entry": "payload", "bypass_bytes": 0})
    assert tuple(out) == _BLOCK_NAMES
    return out


_BLOCK_NAMES = (
    "frame_parser",
    "header_parser",
    "schedule_table",
    "slot_table",
    "result_builder",
    "fanout",
    "control",
    "fadd_lanes_fp32",
    "fadd_lanes_fp16",
    "fadd_lanes_bf16",
    "reduce",
    "agg_core_frame",
    "agg_core_payload",
)


def block_names():
    """The names :func:`blocks` and :func:`write_blocks` use, without building anything."""
    return list(_BLOCK_NAMES)


def write_blocks(out_dir, width, *, say=None, **config):
    """Write every block as ``out_dir/<name>.v``, each kept in the build cache under its configuration (a
    first conversion of all of them takes minutes at W = 512); return the paths. ``say`` is told each."""
    key = sorted(_config(width=width, **config).items())
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Amaranth's UnusedElaboratable for the blocks of a cache hit
        stages = blocks(width, **config)
        for i, (name, component) in enumerate(stages.items()):
            if say:
                say(f"block {i + 1} of {len(stages)}: {name}")
            text = toolchain.verilog_text(component, top=name, key=("block", name, key), sources=(__file__,))
            paths.append(out_dir / f"{name}.v")
            paths[-1].write_text(text)
    return paths


#: The build options: each configuration field (``--chunk-bytes`` for ``chunk_bytes``) with its help, and
#: the ``choices`` of those that have a short list; ``{d}`` is the field's default.
_OPTIONS = {
    "width": ("datapath width W in bits (default: {d})", WIDTHS),
    "slots": ("reorder-buffer slots S, a power of two (default: {d})", None),
    "members": ("member buffers per slot G_max, 1..64 (default: {d})", None),
    "chunk_bytes": ("bytes per member buffer C, a multiple of 4 (default: {d})", None),
    "dests": ("destination entries D (default: {d})", None),
    "jobs": ("schedule-table jobs, a power of two (default: {d})", None),
    "rounds": ("rounds per job (longest period), a power of two (default: {d})", None),
    "entry": (
        "frame: Ethernet frames in and out; payload: bare UDP payloads behind a vendor UDP stack "
        "(default: {d})",
        ("frame", "payload"),
    ),
    "bypass_bytes": (
        "longest frame the in-line bypass port forwards, a multiple of W/8 bytes; 0: no bypass port, every "
        "frame the core does not take is dropped (default: {d} for --entry frame, 0 for --entry payload)",
        None,
    ),
    "mod_stages": (
        "pipeline stages of the schedule table's round-modulo division: more stages, shorter paths, more "
        "flip-flops and latency (16 closes W=64 on ECP5; default: {d})",
        (1, 2, 4, 8, 16, 32),
    ),
    "buffers": (
        "where the member buffers live: internal (on-chip memory) or external (HBM/DDR behind AXI4 master "
        "ports m_axi_mem<k>, slot states on chip; docs/extmem.md) (default: {d})",
        ("internal", "external"),
    ),
    "mem_ports": (
        "external buffers: AXI4 master ports K, slots interleaved across them (default: {d})",
        (1, 2, 4, 8),
    ),
    "mem_addr_width": ("external buffers: AXI address bits per port (default: {d}, 16 GiB)", None),
    "mem_id_width": (
        "external buffers: AXI ID bits; fewer bits, fewer chunks read at once (default: enough for 16 chunks "
        "of G_max member reads)",
        None,
    ),
}
#: Options whose default depends on another (``None`` until :func:`build` resolves it).
_RESOLVED_LATER = ("bypass_bytes", "mem_id_width")


def add_arguments(parser):
    """The build options, of ``wanreduce verilog``: one per :data:`DEFAULTS` entry, then the top's own."""
    assert set(_OPTIONS) == set(DEFAULTS)
    for name, (text, choices) in _OPTIONS.items():
        default = DEFAULTS[name]
        kind = str if isinstance(default, str) else int
        parser.add_argument(
            "--" + name.replace("_", "-"),
            type=kind,
            default=None if name in _RESOLVED_LATER else default,
            help=text.format(d=default),
            **({"choices": choices} if choices else {}),
        )
    parser.add_argument(
        "--top",
        choices=KINDS,
        default="axi",
        help="axi: AXI4-Stream/AXI4-Lite wrapper around the core; core: the bare core (default: axi)",
    )
    parser.add_argument(
        "--name", default=None, help="top module name (default: wanreduce_axi or wanreduce_core)"
    )
    parser.add_argument(
        "--fifo-beats",
        type=int,
        default=None,
        help="AXI top: receive FIFO depth in beats, a power of two (default: two of the longest frames)",
    )
    parser.add_argument(
        "--single-clock",
        action="store_true",
        help="AXI top: AXI4-Lite on clk, no clock-domain crossing (default: its own axil_clk)",
    )
    parser.add_argument(
        "--blocks",
        action="store_true",
        help="also write every pipeline block on its own as <name>.v (default: off)",
    )


def options(args):
    """The :func:`export` keywords of parsed :func:`add_arguments` options."""
    return dict(
        kind=args.top,
        top=args.name,
        fifo_beats=args.fifo_beats,
        ctl_domain="sync" if args.single_clock else "axil",
        **{name: getattr(args, name) for name in DEFAULTS},
    )
