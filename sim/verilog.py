"""Convert every top-level block of the gateware to Verilog: ``python -m wanreduce.sim.verilog --out DIR``.

``make verilog`` runs this. Each block is written as ``DIR/<name>.v`` with module name ``<name>``, built
with the default configuration below (override width with ``--width``).
"""

import argparse
import sys
import warnings
from pathlib import Path

from ..hw import fadd
from ..hw.control import Control
from ..hw.core import AggregatorCore
from ..hw.fanout import Fanout
from ..hw.frame_parser import FrameParser
from ..hw.header_parser import HeaderParser
from ..hw.layouts import WIDTHS, payload_words
from ..hw.reduce import Reduce
from ..hw.result_builder import ResultBuilder
from ..hw.schedule_table import ScheduleTable
from ..hw.slot_table import SlotTable
from ..spec.protocol import HEADER_BYTES
from . import toolchain

__all__ = ["blocks", "main"]

#: The configuration the Verilog is built with: groups of up to 9, 1 KiB chunks, 64 slots (at W = 512 that
#: is 612 KiB of block RAM, an on-chip configuration; docs/aggregator.md sizes S for a given WAN).
DEFAULTS = {"slots": 64, "members": 9, "slot_bytes": 1024, "dests": 4}


def blocks(width):
    """``{name: component}`` for every top-level block that can be built."""
    d = DEFAULTS
    out = {
        "frame_parser": FrameParser(width=width),
        "header_parser": HeaderParser(width=width, slot_bytes=d["slot_bytes"]),
        "schedule_table": ScheduleTable(width=width, members=d["members"]),
        "slot_table": SlotTable(width=width, slots=d["slots"], members=d["members"],
                                slot_bytes=d["slot_bytes"]),
        "result_builder": ResultBuilder(width=width, slots=d["slots"]),
        "fanout": Fanout(width=width, dests=d["dests"], max_payload=HEADER_BYTES + d["slot_bytes"]),
        "control": Control(jobs=4, rounds=64, dests=d["dests"], params={"width": width}),
    }
    for fmt in ("FP32", "FP16", "BF16"):
        f = getattr(fadd.FloatFormat, fmt)
        out[f"fadd_lanes_{fmt.lower()}"] = fadd.FAddLanes(fmt=f, width=width)
    out["reduce"] = Reduce(width=width, slots=d["slots"], members=d["members"],
                           words=payload_words(width, d["slot_bytes"]))
    for entry in ("frame", "payload"):
        out[f"agg_core_{entry}"] = AggregatorCore(width=width, entry=entry, **d)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m wanreduce.sim.verilog",
                                     description="Write every gateware block as Verilog.")
    parser.add_argument("--out", default="build/verilog", help="output directory (default: build/verilog)")
    parser.add_argument("--width", type=int, default=512, choices=WIDTHS,
                        help="datapath width in bits (default: 512)")
    args = parser.parse_args(argv)

    out = Path(args.out)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, component in blocks(args.width).items():
            path = toolchain.convert(component, top=name, out_dir=out)
            print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
