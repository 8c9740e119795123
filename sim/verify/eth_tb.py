"""cocotb testbench of the gigabit MAC (:class:`wanreduce.hw.eth.mac.EthMac`, DDR models) on Verilator,
driven on its pins by cocotbext-eth's RGMII PHY model.

The expectations come from this file only: the frames are built with cocotbext-eth's ``GmiiFrame`` (FCS
by ``zlib.crc32``), each one's fate (passed, or the counter it lands in) is decided here from how it was
built, and the transmitted frames are checked against the IEEE 802.3 rules (preamble, delimiter, zero
padding to 60 bytes, FCS by ``zlib.crc32``, 12-byte gap) by the PHY model's sink.

cocotb tests: ``mac_receives`` (good frames byte for byte, every error case counted, back-pressure),
``mac_transmits`` (padding, FCS, back-to-back frames at the minimum gap), ``mac_line_rate`` (steady-state
frame rate in both directions against 1 Gbit/s; writes ``line_rate.json`` in the test folder).
"""

import json
import random
import struct
import zlib

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge, Timer, with_timeout
from cocotb.utils import get_sim_time, get_time_from_sim_steps

from ...spec import ethernet
from ..verilator import runner
from ..verilator.agg_driver import beats_to_packets, packets_to_beats
from .core_tb import CoreTB

__all__ = ["MacTB", "TOP", "mac_design", "stable_verilog"]

#: Verilog module name of the MAC's build.
TOP = "eth_mac"
#: Clock periods (ns): the PHY's 125 MHz, the core's a little faster and unrelated in phase.
ETH_NS, CORE_NS = 8, 7


def mac_design(width=64):
    """The MAC as the testbench runs it: DDR cell models, the default frame limits."""
    from ...hw.eth.mac import EthMac

    return EthMac(width=width, primitive="model")


def stable_verilog(factory, *, top):
    """The Verilog of ``factory()`` (a ``"module:function"`` name) converted with a fixed string hash seed.

    A design with several clock domains that it does not define gets its modules' ports in an order that
    follows Python's per-process string hashing, so the text (and the build cache's key) would change from
    run to run; converting in a child process with ``PYTHONHASHSEED=0`` keeps it the same. The text is
    kept in the build cache under ``factory`` and the sources of the gateware and of ``factory``'s module
    (:func:`wanreduce.sim.verilator.toolchain.verilog_text`): a whole board takes Amaranth about ten
    seconds to convert, and the text only changes with those sources.
    """
    import os
    import subprocess
    import sys

    module, func = factory.split(":")
    code = (
        "import importlib, inspect, sys; from wanreduce.sim.verilator import toolchain; "
        f"m = importlib.import_module({module!r}); d = getattr(m, {func!r})(); "
        f"t = toolchain.verilog_text(d, top={top!r}, key={factory!r}, sources=[inspect.getsourcefile(m)]); "
        "sys.stdout.write(t)"
    )
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)
    if proc.returncode:
        raise RuntimeError(f"converting {factory} to Verilog failed:\n{proc.stderr[-3000:]}")
    return proc.stdout


class MacTB:
    """Clocks, reset, the PHY model and the MAC's two beat streams."""

    def __init__(self, dut, *, width, backpressure=0.0, seed=1):
        from cocotbext.eth import RgmiiPhy

        self.dut, self.width = dut, width
        self.rng = random.Random(seed)
        self.backpressure = backpressure
        self.received = []  # beat records from ``o``, with their arrival times
        self.out_times = []
        p = dut
        self.phy = RgmiiPhy(
            p.rgmii__txd,
            p.rgmii__tx_ctl,
            p.rgmii__tx_clk,
            p.rgmii__rxd,
            p.rgmii__rx_ctl,
            p.rgmii__rx_clk,
            speed=1000e6,
        )
        self.ready_hold = False
        self.last_bit = (width // 8).bit_length()  # ``last`` follows the byte count in a beat's last byte

    async def start(self):
        d = self.dut
        cocotb.start_soon(Clock(d.clk, CORE_NS, unit="ns").start())
        cocotb.start_soon(Clock(d.eth_tx_clk, ETH_NS, unit="ns").start())
        d.rst.value = d.eth_tx_rst.value = d.eth_tx90_rst.value = 1
        d.i__valid.value = 0
        d.o__ready.value = 0
        await Timer(ETH_NS // 4, unit="ns")  # eth_tx90: a quarter period after eth_tx
        cocotb.start_soon(Clock(d.eth_tx90_clk, ETH_NS, unit="ns").start())
        await ClockCycles(d.clk, 10)
        d.rst.value = d.eth_tx_rst.value = d.eth_tx90_rst.value = 0
        await ClockCycles(d.clk, 10)
        cocotb.start_soon(self._collect())

    async def _collect(self):
        d = self.dut
        nb = self.width // 8 + 1
        while True:
            ready = not self.ready_hold and not (self.backpressure and self.rng.random() < self.backpressure)
            d.o__ready.value = int(ready)
            await ReadOnly()
            if ready and d.o__valid.value:
                value = d.o__payload.value.to_unsigned()
                self.received.append(value.to_bytes(nb, "little"))
                self.out_times.append(get_sim_time("ns"))
            await RisingEdge(d.clk)

    def packets(self):
        import numpy as np

        recs = np.frombuffer(b"".join(self.received), np.uint8).reshape(-1, self.width // 8 + 1)
        return beats_to_packets(recs, self.width)

    async def send(self, frames):
        """Offer ``frames`` (bytes, no FCS) on ``i``, a beat per core cycle while the MAC takes them."""
        await CoreTB(self.dut, width=self.width).send(packets_to_beats(frames, self.width))

    def counters(self):
        from ...hw.eth.mac import RX_COUNTERS, TX_COUNTERS

        return {name: int(getattr(self.dut, name).value) for name in (*RX_COUNTERS, *TX_COUNTERS)}

    async def wait_received(self, n_frames, timeout_us):
        async def wait():
            while sum(1 for r in self.received if r[-1] >> self.last_bit & 1) < n_frames:
                await RisingEdge(self.dut.clk)

        await with_timeout(wait(), timeout_us, "us")


def _payload(rng, n):
    return bytes(rng.getrandbits(8) for _ in range(n))


def _gmii(payload, *, fcs=True, error=None):
    from cocotbext.eth import GmiiFrame

    body = bytes(payload) + (struct.pack("<L", zlib.crc32(payload)) if fcs else b"")
    frame = GmiiFrame.from_raw_payload(body)
    if error is not None:
        frame.error = error
    return frame


async def _deliver(tb, rng, size, count):
    """``count`` random frames of ``size`` bytes into the MAC, whole, as the PHY sends them; returns their
    payloads once the PHY has sent the last."""
    payloads = [_payload(rng, size) for _ in range(count)]
    for p in payloads:
        await tb.phy.rx.send(_gmii(p))
    await tb.phy.rx.wait()
    return payloads


def receive_cases(rng):
    """``[(GmiiFrame, expected counter, payload or None)]``: the receive test's frames in order."""
    from cocotbext.eth import GmiiFrame

    pre = 8  # preamble and delimiter bytes in front of each GmiiFrame's data
    cases = []
    for n in (60, 61, 64, 100, 127, 1000, 1514, 1518):
        p = _payload(rng, n)
        cases.append((_gmii(p), "rx_ok", p))
    p = _payload(rng, 200)
    bad = _gmii(p)
    bad.data[-1] ^= 0x10
    cases.append((bad, "rx_fcs", None))
    cases.append((_gmii(_payload(rng, 40)), "rx_runt", None))  # 44 bytes with a correct FCS
    cases.append((_gmii(_payload(rng, 2000)), "rx_oversize", None))  # a jumbo frame
    p = _payload(rng, 300)
    err = _gmii(p)
    err.error = [0] * len(err.data)
    err.error[pre + 150] = 1
    cases.append((err, "rx_er", None))
    cases.append((GmiiFrame(bytes([0x55, 0x55, 0x55, 0x12]) + _payload(rng, 80)), "rx_preamble", None))
    p = _payload(rng, 500)
    cut = _gmii(p)
    cut.data = cut.data[: pre + 250]  # the link drops mid-frame: the data valid falls early
    cases.append((cut, "rx_fcs", None))
    for _ in range(6):  # back to back after the errors: nothing of them leaks into the next frame
        p = _payload(rng, rng.randrange(60, 400))
        cases.append((_gmii(p), "rx_ok", p))
    return cases


async def _reset_and_start(dut, **kw):
    tb = MacTB(dut, width=runner.params().get("width", 64), **kw)
    await tb.start()
    return tb


@cocotb.test()
async def mac_receives(dut):
    rng = random.Random(runner.params().get("seed", 1))
    tb = await _reset_and_start(dut, backpressure=0.3, seed=2)
    cases = receive_cases(rng)
    for frame, _, _ in cases:
        await tb.phy.rx.send(frame)
    good = [p for _, kind, p in cases if kind == "rx_ok"]
    await tb.wait_received(len(good), timeout_us=200)
    await ClockCycles(dut.clk, 200)
    got = tb.packets()
    assert len(got) == len(good), f"{len(got)} frames reached the core, expected {len(good)}"
    for k, (a, b) in enumerate(zip(got, good, strict=True)):
        assert a == b, f"frame {k}: {len(a)} bytes out differ from the {len(b)} bytes sent"
    expected = {}
    for _, kind, _ in cases:
        expected[kind] = expected.get(kind, 0) + 1
    counts = tb.counters()
    for name, value in counts.items():
        if name.startswith("rx_"):
            assert value == expected.get(name, 0), f"{name} = {value}, expected {expected.get(name, 0)}"

    # Overflow: the core stops taking frames; the buffer holds what it can and drops the rest, counted,
    # and the frames after the stall arrive whole.
    tb.ready_hold = True
    stalled = await _deliver(tb, rng, 1400, 6)
    await ClockCycles(dut.clk, 100)
    tb.ready_hold = False
    after = await _deliver(tb, rng, 200, 3)
    await ClockCycles(dut.clk, 1000)
    counts2 = tb.counters()
    lost = counts2["rx_overflow"] - counts["rx_overflow"]
    passed = counts2["rx_ok"] - counts["rx_ok"]
    assert lost >= 1, "six 1400-byte frames fit a receive buffer of two frames"
    assert passed + lost == len(stalled) + len(after)
    got2 = tb.packets()[len(good) :]
    assert len(got2) == passed
    kept = [p for p in stalled if p in got2]
    assert got2 == kept + after, "the frames kept through the stall are whole, in order, then the later ones"


@cocotb.test()
async def mac_transmits(dut):
    rng = random.Random(runner.params().get("seed", 1) + 1)
    tb = await _reset_and_start(dut)
    sizes = [14, 59, 60, 61, 64, 200, 1000, 1514, 60, 100]
    frames = [_payload(rng, n) for n in sizes]
    await tb.send(frames)
    seen = []
    for _ in frames:
        seen.append(await with_timeout(tb.phy.tx.recv(), 100, "us"))
    for k, (f, p) in enumerate(zip(seen, frames, strict=True)):
        assert f.get_preamble() == bytes([ethernet.PREAMBLE_BYTE] * 7 + [ethernet.SFD_BYTE]), f"frame {k}"
        want = p + bytes(max(0, ethernet.MIN_PAYLOAD_FRAME_BYTES - len(p)))
        assert f.get_payload() == want, f"frame {k}: payload or padding differs"
        assert f.check_fcs(), f"frame {k}: bad FCS"
        assert f.error is None or not any(f.error), f"frame {k}: TX_ER raised"
    # The frames were queued faster than the line: each starts exactly one wire time after the previous.
    for k in range(1, len(seen)):
        gap = get_time_from_sim_steps(seen[k].sim_time_start - seen[k - 1].sim_time_start, "ns")
        want = ethernet.wire_bytes(len(frames[k - 1])) * ETH_NS
        assert gap == want, f"frame {k} started {gap} ns after frame {k - 1}, expected {want} ns"
    counts = tb.counters()
    assert counts["tx_queued"] == len(frames) and counts["tx_dropped"] == 0


def chunk_frame_bytes():
    """A CONTRIB frame of a 1 KiB chunk, without FCS."""
    from ...spec import protocol

    return 1024 + protocol.PACKET_OVERHEAD


@cocotb.test()
async def mac_line_rate(dut):
    """Back-to-back CONTRIB-sized frames (1 KiB chunks) at the minimum gap, in and out at once."""
    params = runner.params()
    n = params.get("frames", 24)
    rng = random.Random(params.get("seed", 1) + 2)
    tb = await _reset_and_start(dut)
    size = chunk_frame_bytes()
    rx_frames = [_payload(rng, size) for _ in range(n)]
    tx_frames = [_payload(rng, size) for _ in range(n)]
    for p in rx_frames:
        await tb.phy.rx.send(_gmii(p))
    cocotb.start_soon(tb.send(tx_frames))
    seen = []
    for _ in tx_frames:
        seen.append(await with_timeout(tb.phy.tx.recv(), 1000, "us"))
    await tb.wait_received(n, timeout_us=1000)
    assert tb.packets() == rx_frames
    assert all(f.get_payload() == p and f.check_fcs() for f, p in zip(seen, tx_frames, strict=True))
    ideal_ns = ethernet.wire_bytes(size) * 8 * 1e9 / ethernet.LINE_RATE_BPS
    # Steady state: frames per ns between the first and the last frame, against one per wire time.
    tx_span = get_time_from_sim_steps(seen[-1].sim_time_start - seen[0].sim_time_start, "ns")
    lasts = [t for t, r in zip(tb.out_times, tb.received, strict=True) if r[-1] >> tb.last_bit & 1]
    rx_span = lasts[-1] - lasts[0]
    result = {
        "eth_tx_line_rate_fraction": (n - 1) * ideal_ns / tx_span,
        "eth_rx_line_rate_fraction": (n - 1) * ideal_ns / rx_span,
        "eth_line_rate_frame_bytes": size,
    }
    out = params.get("out")
    if out:
        with open(out, "w") as f:
            json.dump(result, f)
