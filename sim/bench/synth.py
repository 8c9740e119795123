"""Whole-core synthesis figures (:mod:`wanreduce.sim.synth.flow`), and the Markdown report ``build/synth.md``.

* ``synth_ecp5_luts``, ``synth_ecp5_ffs``, ``synth_ecp5_ebr``, ``synth_ecp5_fmax_mhz``: the bare ECP5-sized
  core (W = 64, 4 slots, G_max = 4, 256-byte chunks, 2 destinations, 4 jobs × 16 rounds, one clock, every
  port on a pin) placed and routed on an LFE5UM5G-85F with a 125 MHz request, once per seed of
  ``synth.ECP5_SEEDS``; Fmax is the median, ``synth_ecp5_fmax_min_mhz`` and ``synth_ecp5_fmax_max_mhz``
  the spread, ``synth_ecp5_seeds_meeting`` how many seeds met 125 MHz.
* ``synth_board_luts``, ``synth_board_fmax_mhz``, ``synth_board_seed``: the same core in the ECPIX-5 board
  top (with its UART bridge, PLL and LEDs: a few hundred LUTs more), placed and routed with the board's
  LPF at the board's core clock (``hw.board.BOARD_MHZ``) to a bitstream, trying the seeds of
  ``synth.BOARD_SEEDS`` in order until one meets it; Fmax is the core clock's in the build kept.
* ``synth_xcup_luts``, ``synth_xcup_ffs``, ``synth_xcup_bram``, ``synth_xcup_uram``, ``synth_xcup_dsp``:
  the full W = 512 configuration (the export's defaults) through ``synth_xilinx -family xcup``; BRAM in
  36 Kb blocks. Estimates against the Alveo U55C's totals are in the report.

Each flow takes minutes (the ECP5 placement most of all); ``make synth`` runs the same without the rest of
the bench.
"""

from ..synth import flow as synth

__all__ = ["run"]


def run():
    out = {}
    e = synth.ecp5(seeds=synth.ECP5_SEEDS)
    for k in ("luts", "ffs", "ebr", "fmax_mhz", "fmax_min_mhz", "fmax_max_mhz", "seeds_meeting"):
        out[f"synth_ecp5_{k}"] = e[k]
    b = synth.bitstream("ecpix5_85")
    for k in ("luts", "fmax_mhz", "seed"):
        out[f"synth_board_{k}"] = b[k]
    x = synth.xcup()
    for k in ("luts", "ffs", "uram", "dsp"):
        out[f"synth_xcup_{k}"] = x[k]
    out["synth_xcup_bram"] = x["bram36"]
    synth.report()
    return out
