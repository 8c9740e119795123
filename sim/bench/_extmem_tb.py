"""cocotb side of the external-buffer throughput bench (``wanreduce.sim.bench.extmem``): streams the
frames in back to back, answers both memory ports with a fixed latency and no back-pressure, counts every
handshake per cycle and writes the counts as JSON to the path the bench passed."""

import json

import cocotb
import numpy as np
from cocotb.triggers import ReadOnly, RisingEdge, with_timeout

from ..verify.axi_mem import LatentAxiRam
from ..verify.core_tb import CoreTB
from ..verilator import runner


@cocotb.test()
async def extmem_throughput(dut):
    from cocotb.clock import Clock

    p = runner.params()
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    dut.i__valid.value = 0
    dut.o__ready.value = 1
    dut.ctl__we.value = 0
    dut.ctl__re.value = 0
    for _ in range(4):
        await RisingEdge(dut.clk)
    dut.rst.value = 0
    await RisingEdge(dut.clk)
    lat = p["latency"]
    for k in range(p["mem_ports"]):
        LatentAxiRam(dut, f"mem{k}_", dut.clk, size=p["mem_bytes"], seed=k, lat_lo=lat, lat_hi=lat, pause=0.0)
    for addr, data in p["writes"]:
        dut.ctl__addr.value, dut.ctl__wdata.value, dut.ctl__we.value = addr, data, 1
        await RisingEdge(dut.clk)
        dut.ctl__we.value = 0
    beats = np.load(p["beats"])
    names = {"in": ("i__valid", "i__ready"), "out": ("o__valid", "o__ready")}
    for k in range(p["mem_ports"]):
        names[f"w{k}"] = (f"mem{k}__wvalid", f"mem{k}__wready")
        names[f"r{k}"] = (f"mem{k}__rvalid", f"mem{k}__rready")
    sigs = {n: (getattr(dut, v), getattr(dut, r)) for n, (v, r) in names.items()}
    cycles = {n: [] for n in names}
    done = False

    async def count():
        t = 0
        while not done:
            await ReadOnly()
            for n, (v, r) in sigs.items():
                if v.value and r.value:
                    cycles[n].append(t)
            await RisingEdge(dut.clk)
            t += 1

    cocotb.start_soon(count())

    # Back to back: no idle cycles, so the input stalls only where the core holds i__ready low.
    await with_timeout(CoreTB(dut, width=p["width"]).send(beats), 100 * len(beats) + 1_000_000, "ns")
    idle = 0
    while idle < 2 * lat + 500:
        n = len(cycles["out"])
        await RisingEdge(dut.clk)
        idle = idle + 1 if len(cycles["out"]) == n else 0
    done = True
    with open(p["result"], "w") as f:
        json.dump(cycles, f)
