"""cocotb testbench of the Ethernet board top (:class:`wanreduce.hw.eth.board.EthBoard`, DDR cell models)
on Verilator: the aggregator fed and read through its RGMII pins by cocotbext-eth's PHY model and
configured through its UART, against the golden aggregator.

``board_end_to_end``: the control port first answers register reads, a bad command and an ``'O'`` with
no beat; the core is then configured with the host driver's register writes sent as UART ``'W'``
commands (each acknowledged), a host-model workload of CONTRIB frames (with every malformed kind the
core drops) arrives at 1 Gbit/s back to back at the minimum gap, interleaved with frames the MAC must
drop (bad FCS, runt, jumbo, RX_ER, a bad preamble, the link dropping mid-frame); the RESULT frames sent
on the RGMII pins are compared byte for byte (padded to 60 bytes, FCS checked by the PHY model) with the
golden model's, and the core's counters and the board's MAC counters, read over the UART, exactly.
``board_cli_over_pty``: ``wanreduce board`` on a pseudo-terminal bridged to the UART.
``inline_end_to_end``: the two-port in-line board (:mod:`wanreduce.hw.eth.inline`), a PHY model per port.
"""

import random
import struct
import zlib

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge, RisingEdge, Timer, with_timeout

from ...host import control
from ...host.golden import Destination
from ...hw.eth.board import ETH_BOARD_MHZ, RGMII_MHZ
from ...hw.eth.inline import INLINE_BYPASS_BYTES
from ...spec import addressing, ethernet, protocol, regmap
from ...spec.core import CoreConfig
from ..verilator import runner
from . import traffic
from .cocotb_build import PORTS_ONLY
from .core_tb import counter_diff, expected_of

__all__ = ["TOP", "CORE", "UART_DIVISOR", "board_design", "board_build", "UartHost", "BoardTB"]

TOP = "eth_board"
#: A small core: the build is shared by the tests, its size does not matter to them.
CORE = CoreConfig(width=64, slots=4, members=4, chunk_bytes=64, dests=2, jobs=4, rounds=64, bypass_bytes=0)
#: The in-line board's core: the same with the in-line tops' bypass port.
INLINE_CORE = CORE.replace(bypass_bytes=INLINE_BYPASS_BYTES)
#: Core cycles per UART bit in the simulated build (the board's 115200 baud would be 1085).
UART_DIVISOR = 4
#: Clock periods as on the boards: the core's own PLL output, the RGMII clocks' 125 MHz.
CORE_NS, ETH_NS = 1000 // ETH_BOARD_MHZ, 1000 // RGMII_MHZ
#: How both boards are built for simulation: DDR cell models, the small core, a fast UART, short PHY times.
_SIM_BOARD = dict(
    primitive="model",
    core=CORE,
    uart_divisor=UART_DIVISOR,
    mdc_divisor=4,
    phy_reset_cycles=50,
    phy_settle_cycles=50,
    poll_cycles=5000,
)


def _site(rank):
    """The RESULTs' destination (the site's hosts' group address) and the aggregator's own addresses."""
    group = addressing.site_group_ip(rank)
    dests = [Destination(addressing.multicast_mac(group), group, protocol.UDP_PORT)]
    return dests, addressing.aggregator_mac(rank), addressing.aggregator_ip(rank)


def _scenario(rng, n_packets):
    """A random site's rank, RESULT destinations, MAC and IP addresses, and the jobs and frames of
    ``n_packets`` of its traffic for the simulated core."""
    rank = int(rng.integers(0, 8))
    dests, mac, ip = _site(rank)
    jobs, frames = traffic.scenario(rng, CORE, rank=rank, n_packets=n_packets, frames=True)
    return rank, dests, mac, ip, jobs, frames


def board_design():
    """The board top as the testbench runs it: DDR models, a small core, a fast UART, short PHY times."""
    from ...hw.eth.board import EthBoard

    return EthBoard(**_SIM_BOARD)


def board_build(factory="board_design", top=TOP):
    """The Verilator build of a board top of this module (``factory``, module ``top``), converted and built
    once (:func:`wanreduce.sim.verify.eth_tb.stable_verilog`, the runner's build cache)."""
    from .eth_tb import stable_verilog

    return runner.build(stable_verilog(f"{__name__}:{factory}", top=top), top=top, build_args=PORTS_ONLY)


class UartHost:
    """The host's end of the UART (8N1, ``divisor`` core cycles per bit) and the bridge's commands."""

    def __init__(self, dut, clk, divisor):
        self.dut, self.clk, self.divisor = dut, clk, divisor
        dut.uart_rx.value = 1

    async def send(self, data):
        bit_ns = self.divisor * CORE_NS
        for byte in data:
            for bit in [0] + [byte >> k & 1 for k in range(8)] + [1]:
                self.dut.uart_rx.value = bit
                await Timer(bit_ns, unit="ns")

    async def recv(self, n, timeout_us=200):
        """``n`` bytes from the board; a byte that does not start within ``timeout_us`` fails the test."""
        bit_ns = self.divisor * CORE_NS
        out = []
        for _ in range(n):
            if int(self.dut.uart_tx.value):
                await with_timeout(FallingEdge(self.dut.uart_tx), timeout_us, "us")
            await Timer(bit_ns * 3 // 2, unit="ns")  # the middle of data bit 0
            byte = 0
            for k in range(8):
                byte |= int(self.dut.uart_tx.value) << k
                await Timer(bit_ns, unit="ns")
            assert int(self.dut.uart_tx.value) == 1, "no stop bit"
            await Timer(bit_ns // 2, unit="ns")
            out.append(byte)
        return bytes(out)

    async def write(self, addr, data):
        await self.send(b"W" + addr.to_bytes(2, "big") + data.to_bytes(4, "big"))
        answer = await self.recv(1)
        assert answer == b"\x06", f"write of {addr:#06x} answered {answer.hex()}"

    async def read(self, addr):
        await self.send(b"R" + addr.to_bytes(2, "big"))
        return int.from_bytes(await self.recv(4), "big")


class BoardTB:
    """Clocks, reset and the UART of a board top; :meth:`attach_phy` adds the PHY model on ``rgmii``.

    Every clock edge costs a pass of the whole model, and the PHY model runs Python on every edge of both
    RGMII clocks, so the network port is clocked only while a test uses it: :meth:`start` runs every
    clock through the reset, :meth:`stop_network` stops the RGMII clocks (the core's runs on) while only
    the UART is in use, and :meth:`attach_phy` starts them again with the PHY model on the pins."""

    def __init__(self, dut):
        self.dut, self.phy, self.network = dut, None, False
        self.rx_clock = None
        dut.rgmii__rx_clk.value = 0
        dut.rgmii__rx_ctl.value = 0
        dut.rgmii__rxd.value = 0
        self.uart = UartHost(dut, dut.clk, UART_DIVISOR)

    async def start(self):
        d = self.dut
        Clock(d.clk, CORE_NS, unit="ns").start()
        self.tx_clocks = [Clock(d.eth_tx_clk, ETH_NS, unit="ns"), Clock(d.eth_tx90_clk, ETH_NS, unit="ns")]
        d.rst.value = d.eth_tx_rst.value = d.eth_tx90_rst.value = 1
        d.mdio_i.value = 1
        await self._start_tx_clocks()
        await ClockCycles(d.clk, 10)
        d.rst.value = d.eth_tx_rst.value = d.eth_tx90_rst.value = 0
        await ClockCycles(d.clk, 10)

    async def _start_tx_clocks(self):
        """``eth_tx`` on an edge of the core's clock, ``eth_tx90`` a quarter period after it."""
        await RisingEdge(self.dut.clk)
        self.tx_clocks[0].start()
        await Timer(ETH_NS // 4, unit="ns")
        self.tx_clocks[1].start()
        self.network = True

    def stop_network(self):
        """Stop the board's transmit clocks and the PHY model's receive clock."""
        for clock in self.tx_clocks + ([self.rx_clock] if self.rx_clock else []):
            clock.stop()
        self.rx_clock, self.network = None, False

    async def attach_phy(self):
        """Start the RGMII clocks and connect cocotbext-eth's RGMII PHY model at 1 Gbit/s (``tb.phy.rx``
        sends to the board, ``tb.phy.tx`` receives from it); return once the MAC's receive side, held in
        reset while its clock was stopped, is out of it.

        The model is ``RgmiiPhy``'s source and sink, with the PHY's receive clock from cocotb's ``Clock``
        (which runs in the simulator, not in Python as ``RgmiiPhy``'s own does, and can be stopped)."""
        from types import SimpleNamespace

        from cocotbext.eth import RgmiiSink, RgmiiSource

        d = self.dut
        if not self.network:
            await self._start_tx_clocks()
        self.rx_clock = Clock(d.rgmii__rx_clk, ETH_NS, unit="ns")
        self.rx_clock.start(start_high=False)
        self.phy = SimpleNamespace(
            rx=RgmiiSource(d.rgmii__rxd, d.rgmii__rx_ctl, d.rgmii__rx_clk),
            tx=RgmiiSink(d.rgmii__txd, d.rgmii__tx_ctl, d.rgmii__tx_clk),
        )
        await ClockCycles(d.rgmii__rx_clk, 8)

    async def board_counters(self):
        return {n: await self.uart.read(regmap.BOARD_BASE + k) for k, n in enumerate(regmap.BOARD_NAMES)}


def _fcs(body):
    return bytes(body) + struct.pack("<L", zlib.crc32(bytes(body)))


def _padded(frame):
    return bytes(frame) + bytes(max(0, ethernet.MIN_PAYLOAD_FRAME_BYTES - len(frame)))


def mac_faults(rng, template):
    """Frames the MAC drops, made from a real frame ``template``: ``[(GmiiFrame, board counter)]``."""
    from cocotbext.eth import GmiiFrame

    pre = bytes([ethernet.PREAMBLE_BYTE] * 7 + [ethernet.SFD_BYTE])
    body = _padded(template)
    bad = bytearray(_fcs(body))
    bad[len(bad) // 2] ^= 0x01
    er = GmiiFrame(pre + _fcs(body))
    er.error = [0] * len(er.data)
    er.error[len(er.data) // 3] = 1
    jumbo = body + bytes(rng.getrandbits(8) for _ in range(1600))
    cut = len(body) // 2 + 8
    return [
        (GmiiFrame(pre + bytes(bad)), "rx_fcs"),
        (GmiiFrame(pre + _fcs(body[:40])), "rx_runt"),
        (GmiiFrame(pre + _fcs(jumbo)), "rx_oversize"),
        (er, "rx_er"),
        (GmiiFrame(bytes([0x55, 0x55, 0x5D]) + _fcs(body)), "rx_preamble"),
        # The link drops mid-frame: what arrived is a runt or a frame with a wrong FCS, by its length.
        (GmiiFrame(pre + _fcs(body)[:cut]), "rx_runt" if cut < ethernet.MIN_FRAME_BYTES else "rx_fcs"),
    ]


@cocotb.test()
async def board_end_to_end(dut):
    from cocotbext.eth import GmiiFrame

    p = runner.params()
    seed = p.get("seed", 1)
    rng = np.random.default_rng(seed)
    prng = random.Random(seed)
    rank, dests, mac, ip, jobs, frames = _scenario(rng, p.get("n_packets", 120))
    frames = [_padded(f) for f in frames]  # what the wire delivers: the sender pads short frames
    site = dict(rank=rank, jobs=jobs, mac=mac, ip=ip, destinations=dests)
    golden = traffic.golden_of(CORE, **site)
    expected = expected_of(golden, frames)

    tb = BoardTB(dut)
    await tb.start()
    tb.stop_network()  # until the workload: the UART's
    await uart_answers(tb)
    writes = control.config_writes(core=CORE, **site)
    for addr, data in writes:
        await tb.uart.write(addr, data)
    assert await tb.uart.read(regmap.REG_ID) == regmap.ID_VALUE, "the control port does not answer"

    # The workload at line rate, with the MAC's faults mixed in every 25 frames.
    await tb.attach_phy()
    faults = {}
    for k, f in enumerate(frames):
        await tb.phy.rx.send(GmiiFrame.from_payload(f))
        if k % 25 == 10:
            for frame, name in mac_faults(prng, f):
                await tb.phy.rx.send(frame)
                faults[name] = faults.get(name, 0) + 1
    seen = []

    async def drain():
        while len(seen) < len(expected):
            seen.append(await tb.phy.tx.recv())

    await with_timeout(drain(), 2000, "us")
    await tb.phy.rx.wait()
    await ClockCycles(dut.clk, 500)
    assert tb.phy.tx.empty(), "the board sent more RESULT frames than the golden model"
    tb.stop_network()  # what remains is the UART's
    for n, (f, want) in enumerate(zip(seen, expected, strict=True)):
        assert f.check_fcs(), f"RESULT frame {n}: bad FCS"
        assert bytes(f.get_payload()) == _padded(want), f"RESULT frame {n} differs from the golden model"

    counters = control.decode_counters([await tb.uart.read(a) for a in control.counter_reads()])
    assert counters == golden.counters, (
        f"core counters differ from the golden model: {counter_diff(counters, golden)}"
    )
    board = await tb.board_counters()
    want = {n: 0 for n in regmap.BOARD_NAMES}
    want.update(faults)
    want["rx_ok"] = len(frames)
    want["tx_queued"] = len(expected)
    diff = {n: (board[n], v) for n, v in want.items() if n not in ("link", "link_polls") and board[n] != v}
    assert not diff, f"board counters (got, expected) differ: {diff}"
    assert board["link_polls"] > 0, "the PHY manager never read the link state"
    assert golden.counters["results"] > 0 and sum(faults.values()) > 0, "the workload tests too little"
    dut._log.info(f"{len(frames)} frames in, {len(seen)} RESULTs out; board {board}")


async def uart_answers(tb):
    """Register reads over the UART, a bad command (NAK), an ``'O'`` with no beat, a board register."""
    assert await tb.uart.read(regmap.REG_WIDTH) == CORE.width
    assert await tb.uart.read(regmap.REG_SLOTS) == CORE.slots
    await tb.uart.send(b"?")
    assert await tb.uart.recv(1) == b"\x15", "a bad command is not answered NAK"
    await tb.uart.send(b"O")
    assert await tb.uart.recv(1) == b"\xff", "an 'O' with no beat is not answered 0xff"
    assert await tb.uart.read(regmap.BOARD_BASE + regmap.BOARD_NAMES.index("rx_ok")) == 0


@cocotb.test()
async def board_cli_over_pty(dut):
    """``wanreduce board`` in a subprocess on a pseudo-terminal, bridged to the board top's UART: it
    identifies the board, loads a schedule and reads the counters; the testbench then reads back over
    the UART what the schedule must have set."""
    import json
    import os
    import subprocess
    import sys
    import time

    from ...spec.schedfile import group_of, load_schedule

    p = runner.params()
    d = dut
    tb = BoardTB(dut)  # no PHY model: the test is the UART's
    await tb.start()
    tb.stop_network()
    master, slave = os.openpty()
    os.set_blocking(master, False)
    cli = "import sys; from wanreduce.cli import main; sys.exit(main())"
    cmd = [sys.executable, "-c", cli, "board", os.ttyname(slave), "--schedule", p["schedule"]]
    cmd += ["--rank", str(p["rank"]), "--job", "7", "--json", "--timeout", "60"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    bit_ns = UART_DIVISOR * CORE_NS

    async def board_to_host():
        while True:
            await FallingEdge(d.uart_tx)
            await Timer(bit_ns * 3 // 2, unit="ns")
            byte = 0
            for k in range(8):
                byte |= int(d.uart_tx.value) << k
                await Timer(bit_ns, unit="ns")
            os.write(master, bytes([byte]))

    reader = cocotb.start_soon(board_to_host())
    deadline = time.monotonic() + p.get("wall_s", 300)
    while proc.poll() is None:
        assert time.monotonic() < deadline, "wanreduce board did not finish"
        try:
            data = os.read(master, 64)
        except BlockingIOError:
            data = b""
        if data:
            await tb.uart.send(data)
        else:
            await Timer(20 * bit_ns, unit="ns")
            time.sleep(0.0005)  # the subprocess needs the CPU more than the idle simulation does
    out, err = proc.communicate()
    reader.cancel()
    os.close(master)
    os.close(slave)
    assert proc.returncode == 0, f"wanreduce board failed: {err.strip()}"
    result = json.loads(out)
    # The board reads REG_SLOT_BYTES back as slot_bytes: the chunk bytes of a member buffer.
    built = {**CORE.as_dict(), "slot_bytes": CORE.chunk_bytes}
    assert result["geometry"] == {k: built[k] for k in result["geometry"]}, result["geometry"]
    assert result["board"]["rx_ok"] == 0 and result["counters"]["frames_in"] == 0
    schedule = load_schedule(p["schedule"])
    rank = p["rank"]
    assert await tb.uart.read(regmap.REG_RANK) == rank
    assert await tb.uart.read(regmap.JOB_BASE) == 7  # job entry 0: the id given with --job
    assert await tb.uart.read(regmap.JOB_BASE + 1) == schedule.period
    assert await tb.uart.read(regmap.REG_NDEST) == 1
    ip = int.from_bytes(bytes(int(x) for x in addressing.aggregator_ip(rank).split(".")), "big")
    assert await tb.uart.read(regmap.REG_IP) == ip
    assert group_of(schedule, rank, 0)[1], "the test's schedule gives the rank a group in round 0"


INLINE_TOP = "eth_inline"


def inline_design():
    """The in-line board as the testbench runs it: DDR models, a small core with a bypass port."""
    from ...hw.eth.inline import EthInlineBoard

    return EthInlineBoard(**{**_SIM_BOARD, "core": INLINE_CORE})


def _other_frames(rng, n):
    """Frames that are not wanreduce work (other EtherTypes, other UDP ports): the bypass's traffic."""
    from ...host import frames as fr

    out = []
    for k in range(n):
        body = bytes(rng.integers(0, 256, int(rng.integers(20, 600)), dtype=np.uint8))
        if k % 2:
            out.append(bytes.fromhex("02aabbccddee02aabbccddef86dd") + body)
        else:
            out.append(
                fr.build_frame(
                    body[:200],
                    src_mac="02:aa:bb:cc:dd:ee",
                    dst_mac=addressing.host_mac(3),
                    src_ip="192.0.2.1",
                    dst_ip=addressing.host_ip(3),
                    sport=53,
                    dport=5353,
                    udp_checksum=True,
                )
            )
    return out


def _interleaves(got, *streams):
    """Whether ``got`` is an interleaving of ``streams``, each in its own order."""
    pos = [0] * len(streams)
    for frame in got:
        for k, s in enumerate(streams):
            if pos[k] < len(s) and s[pos[k]] == frame:
                pos[k] += 1
                break
        else:
            return False
    return all(p == len(s) for p, s in zip(pos, streams, strict=True))


@cocotb.test()
async def inline_end_to_end(dut):
    """WAN traffic (CONTRIBs and other frames) into the WAN port; RESULTs and the bypassed frames out of
    the LAN port, each stream in order and byte for byte against the golden model; LAN traffic out of the
    WAN port unchanged."""
    from cocotbext.eth import GmiiFrame, RgmiiPhy

    p = runner.params()
    seed = p.get("seed", 1)
    rng = np.random.default_rng(seed)
    rank, dests, mac, ip, jobs, frames = _scenario(rng, p.get("n_packets", 60))
    others = _other_frames(rng, 12)
    wan_in = [_padded(f) for f in frames]
    for o in others:
        wan_in.insert(int(rng.integers(0, len(wan_in) + 1)), _padded(o))
    lan_in = [_padded(f) for f in _other_frames(rng, 8)]
    site = dict(rank=rank, jobs=jobs, mac=mac, ip=ip, destinations=dests)
    golden = traffic.golden_of(INLINE_CORE, bypass_bytes=INLINE_CORE.bypass_bytes, **site)
    results = [_padded(r) for r in expected_of(golden, wan_in)]
    forwarded = [_padded(f) for f in golden.forwarded]

    d = dut
    wan = RgmiiPhy(
        d.wan__txd, d.wan__tx_ctl, d.wan__tx_clk, d.wan__rxd, d.wan__rx_ctl, d.wan__rx_clk, speed=1000e6
    )
    lan = RgmiiPhy(
        d.lan__txd, d.lan__tx_ctl, d.lan__tx_clk, d.lan__rxd, d.lan__rx_ctl, d.lan__rx_clk, speed=1000e6
    )
    d.wan_mdio_i.value = d.lan_mdio_i.value = 1
    tb = BoardTB.__new__(BoardTB)
    tb.dut, tb.uart = d, UartHost(d, d.clk, UART_DIVISOR)
    await tb.start()
    writes = control.config_writes(core=INLINE_CORE, bypass=True, **site)
    for addr, data in writes:
        await tb.uart.write(addr, data)
    for f in wan_in:
        await wan.rx.send(GmiiFrame.from_payload(f))
    for f in lan_in:
        await lan.rx.send(GmiiFrame.from_payload(f))
    to_lan, to_wan = [], []

    async def drain(sink, out, n):
        while len(out) < n:
            frame = await sink.recv()
            assert frame.check_fcs(), "a frame left with a bad FCS"
            out.append(bytes(frame.get_payload()))

    await with_timeout(drain(lan.tx, to_lan, len(results) + len(forwarded)), 2000, "us")
    await with_timeout(drain(wan.tx, to_wan, len(lan_in)), 2000, "us")
    await ClockCycles(d.clk, 500)
    assert lan.tx.empty() and wan.tx.empty(), "more frames left than the golden model sends"
    assert to_wan == lan_in, "LAN traffic did not leave the WAN port unchanged and in order"
    assert _interleaves(to_lan, results, forwarded), "the LAN port's frames are not the golden model's"
    counters = control.decode_counters([await tb.uart.read(a) for a in control.counter_reads()])
    assert counters == golden.counters, "core counters differ from the golden model"
    lan_base = regmap.BOARD_BASE + regmap.BOARD_PORT_STRIDE
    assert await tb.uart.read(regmap.BOARD_BASE) == len(wan_in)  # WAN rx_ok
    assert await tb.uart.read(lan_base) == len(lan_in)  # LAN rx_ok
    assert golden.counters["results"] > 0 and forwarded, "the workload tests too little"
