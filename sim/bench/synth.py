"""Whole-core synthesis figures (:mod:`wanreduce.sim.synth`), and the Markdown report ``build/synth.md``.

* ``synth_ecp5_luts``, ``synth_ecp5_ffs``, ``synth_ecp5_ebr``, ``synth_ecp5_fmax_mhz``: the ECP5-sized core
  (:data:`~wanreduce.sim.synth.ECP5_CONFIG`: W = 64, 4 slots, G_max = 4, 256-byte chunks) placed and routed
  on an LFE5UM5G-85F (the ECPIX-5's part) with a 125 MHz clock request, one seed.
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
    e = synth.ecp5()
    for k in ("luts", "ffs", "ebr", "fmax_mhz"):
        out[f"synth_ecp5_{k}"] = e[k]
    x = synth.xcup()
    for k in ("luts", "ffs", "uram", "dsp"):
        out[f"synth_xcup_{k}"] = x[k]
    out["synth_xcup_bram"] = x["bram36"]
    synth.report()
    return out
