"""Whole-core synthesis figures (:mod:`wanreduce.sim.synth`), and the Markdown report ``build/synth.md``.

* ``synth_ecp5_luts``, ``synth_ecp5_ffs``, ``synth_ecp5_ebr``, ``synth_ecp5_fmax_mhz``: the ECP5-sized core
  (W = 64, 4 slots, G_max = 4, 256-byte chunks, 2 destinations, 4 jobs × 16 rounds) in the ECPIX-5 board
  top (with its UART bridge, PLL and LEDs: a few hundred LUTs more than the core), placed and routed on the
  board's LFE5UM5G-85F with its LPF and a 125 MHz core clock, one seed; Fmax is the core clock's.
* ``synth_xcup_luts``, ``synth_xcup_ffs``, ``synth_xcup_bram``, ``synth_xcup_uram``, ``synth_xcup_dsp``:
  the full W = 512 configuration (the export's defaults) through ``synth_xilinx -family xcup``; BRAM in
  36 Kb blocks. Estimates against the Alveo U55C's totals are in the report.

Each flow takes minutes (the ECP5 placement most of all); ``make synth`` runs the same without the rest of
the bench.
"""

from .. import synth

__all__ = ["run"]


def run():
    out = {}
    e = synth.bitstream("ecpix5_85")
    for k in ("luts", "ffs", "ebr", "fmax_mhz"):
        out[f"synth_ecp5_{k}"] = e[k]
    x = synth.xcup()
    for k in ("luts", "ffs", "uram", "dsp"):
        out[f"synth_xcup_{k}"] = x[k]
    out["synth_xcup_bram"] = x["bram36"]
    synth.report()
    return out
