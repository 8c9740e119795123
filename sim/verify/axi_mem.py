"""An AXI4 memory for cocotb with latency, back-pressure and reordering, and a checker of the master's
handshake rules.

:class:`LatentAxiRam` is cocotbext-axi's ``AxiRam`` (its channels, memory and burst checks) with the two
processes that answer the master replaced:

* reads: every AR waits a random latency (``lat_lo .. lat_hi`` cycles); among the bursts whose time has
  come, a random one is answered next, the oldest of its ID first, so responses come back reordered
  across IDs and in order within one, as AXI4 allows;
* writes: each burst's data is taken as it comes, but written into the memory only when its response
  goes out, a random latency later (in order: the master uses one write ID), so a read that overtook a
  write it depends on would see the old bytes;
* ``error(port_addr)``: answer reads and writes touching that byte address with SLVERR (error injection);
* every channel's handshake is throttled by a seeded random pause generator (``pause`` probability).

:func:`check_handshakes` watches a master's five channels every cycle: a valid that was not taken stays
high with the same payload, no INCR burst crosses a 4 KiB boundary, and WLAST comes on the burst's last
beat (as counted from AWLEN).
"""

import random

import cocotb
from cocotb.triggers import ReadOnly, RisingEdge
from cocotbext.axi import AxiBus, AxiRam
from cocotbext.axi.constants import AxiResp

__all__ = ["LatentAxiRam", "check_handshakes"]


def _pauses(rng, p):
    while True:
        yield rng.random() < p


class LatentAxiRam(AxiRam):
    def __init__(self, dut, prefix, clock, *, size, seed, lat_lo=1, lat_hi=400, pause=0.3):
        bus = AxiBus.from_prefix(dut, prefix)
        self.rng = random.Random(seed)
        self.lat = (lat_lo, lat_hi)
        self.bad = set()
        self.cycle = 0
        self.clock = clock
        super().__init__(bus, clock, None, size=size)
        self.write_if._process_write_cr.cancel()
        self.read_if._process_read_cr.cancel()
        for ch in (
            self.write_if.aw_channel,
            self.write_if.w_channel,
            self.write_if.b_channel,
            self.read_if.ar_channel,
            self.read_if.r_channel,
        ):
            ch.set_pause_generator(_pauses(random.Random(self.rng.random()), pause) if pause else None)
        self.reads, self.writes = [], []
        for coro in (
            self._tick(),
            self._take_reads(),
            self._answer_reads(),
            self._take_writes(),
            self._ack(),
        ):
            cocotb.start_soon(coro)

    def error(self, addr):
        self.bad.add(addr)

    async def _tick(self):
        while True:
            await RisingEdge(self.clock)
            self.cycle += 1

    def _latency(self):
        return self.cycle + self.rng.randint(*self.lat)

    async def _take_reads(self):
        ri = self.read_if
        while True:
            ar = await ri.ar_channel.recv()
            addr, n = int(ar.araddr), int(ar.arlen) + 1
            assert int(ar.arburst) == 1 and 1 << int(ar.arsize) == ri.byte_lanes, "only full-width INCR"
            assert (addr % 4096) + n * ri.byte_lanes <= 4096, f"read burst at {addr:#x} crosses 4 KiB"
            self.reads.append((self._latency(), int(ar.arid), addr, n))

    async def _answer_reads(self):
        ri = self.read_if
        while True:
            due = [r for r in self.reads if r[0] <= self.cycle]
            heads = [r for r in due if next(q for q in self.reads if q[1] == r[1]) is r]
            if not heads:
                await RisingEdge(self.clock)
                continue
            r = self.rng.choice(heads)
            self.reads.remove(r)
            _, rid, addr, n = r
            for k in range(n):
                a = addr + k * ri.byte_lanes
                beat = ri.r_channel._transaction_obj()
                beat.rid, beat.rlast = rid, k == n - 1
                beat.rresp = AxiResp.SLVERR if a in self.bad else AxiResp.OKAY
                beat.rdata = int.from_bytes(self.read(a, ri.byte_lanes), "little")
                await ri.r_channel.send(beat)

    async def _take_writes(self):
        wi = self.write_if
        while True:
            aw = await wi.aw_channel.recv()
            addr, n = int(aw.awaddr), int(aw.awlen) + 1
            assert int(aw.awburst) == 1 and 1 << int(aw.awsize) == wi.byte_lanes, "only full-width INCR"
            assert (addr % 4096) + n * wi.byte_lanes <= 4096, f"write burst at {addr:#x} crosses 4 KiB"
            beats = []
            for k in range(n):
                w = await wi.w_channel.recv()
                assert int(w.wlast) == (k == n - 1), f"WLAST on beat {k} of {n}"
                beats.append(int(w.wdata).to_bytes(wi.byte_lanes, "little"))
            self.writes.append((self._latency(), int(aw.awid), addr, beats))

    async def _ack(self):
        wi = self.write_if
        while True:
            if not self.writes or self.writes[0][0] > self.cycle:
                await RisingEdge(self.clock)
                continue
            _, wid, addr, beats = self.writes.pop(0)
            bad = any(addr + k * wi.byte_lanes in self.bad for k in range(len(beats)))
            if not bad:
                self.write(addr, b"".join(beats))
            b = wi.b_channel._transaction_obj()
            b.bid, b.bresp = wid, AxiResp.SLVERR if bad else AxiResp.OKAY
            await wi.b_channel.send(b)


_CHANNELS = {
    "aw": ("awvalid", "awready", ("awid", "awaddr", "awlen", "awsize", "awburst")),
    "w": ("wvalid", "wready", ("wdata", "wstrb", "wlast")),
    "ar": ("arvalid", "arready", ("arid", "araddr", "arlen", "arsize", "arburst")),
}


async def check_handshakes(dut, prefix, clock, lanes):
    """Assert the master's rules on port ``prefix`` every cycle (module docstring); runs forever."""

    def sig(name):
        return getattr(dut, f"{prefix}{name}")

    held = {}
    w_left = []  # beats still expected of each AW's burst, in order
    w_count = 0
    w_bursts = []  # beats of each burst up to its WLAST, in order
    while True:
        await ReadOnly()
        for ch, (valid, ready, payload) in _CHANNELS.items():
            v, r = int(sig(valid).value), int(sig(ready).value)
            now = tuple(int(sig(n).value) for n in payload)
            if ch in held:
                assert v, f"{prefix}{valid} dropped before {ready}"
                assert now == held[ch], f"{prefix} {ch} payload changed while waiting for {ready}"
            held.pop(ch, None)
            if v and not r:
                held[ch] = now
            if v and r and ch in ("aw", "ar"):
                _, addr, length, _, _ = now
                assert (addr % 4096) + (length + 1) * lanes <= 4096, f"{prefix}{ch} burst crosses 4 KiB"
                if ch == "aw":
                    w_left.append(length + 1)
            if v and r and ch == "w":
                w_count += 1
                if now[2]:
                    w_bursts.append(w_count)
                    w_count = 0
        # W may lead its AW: each burst's beats up to WLAST are matched with its AWLEN once both are known.
        while w_left and (w_bursts or w_count > w_left[0]):
            n = w_bursts.pop(0) if w_bursts else w_count
            assert n == w_left[0], f"{prefix}wlast after {n} beats of a {w_left[0]}-beat burst"
            w_left.pop(0)
        await RisingEdge(clock)
