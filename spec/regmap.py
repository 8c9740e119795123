"""The aggregator core's control-port register map (``docs/control.md``): the one definition.

The gateware (:mod:`wanreduce.hw.control`) decodes these addresses and the host driver
(:mod:`wanreduce.host.control`) writes them, so the two cannot disagree. The port is word addressed:
``addr`` 16 bits, ``wdata``/``rdata`` 32 bits, ``we``, ``re``; read data is valid two cycles after ``re``.
"""

from .protocol import Drop

__all__ = [
    "ID_VALUE",
    "REG_ID",
    "REG_WIDTH",
    "REG_SLOTS",
    "REG_MEMBERS",
    "REG_SLOT_BYTES",
    "REG_DESTS",
    "REG_JOBS",
    "REG_ROUNDS",
    "REG_ENTRY",
    "REG_BYPASS_BYTES",
    "REG_RANK",
    "REG_PORT",
    "REG_MAC_HI",
    "REG_MAC_LO",
    "REG_IP",
    "REG_NDEST",
    "REG_CLEAR",
    "REG_BYPASS",
    "REG_ROOT_LO",
    "REG_ROOT_HI",
    "REG_MDEST",
    "JOB_BASE",
    "JOB_STRIDE",
    "DEST_BASE",
    "DEST_STRIDE",
    "COUNTER_BASE",
    "COUNTER_NAMES",
    "PERF_BASE",
    "PERF_NAMES",
    "SCHED_BASE",
    "BOARD_BASE",
    "BOARD_NAMES",
    "BOARD_PORT_STRIDE",
    "JOB_BANK_OFFSET",
    "ORDER_BASE",
    "ORDER_WORDS",
    "ORDER_PER_WORD",
    "ORDER_NONE",
]

ID_VALUE = 0x57520003  # "WR", register map version 3 (root stripes, RESULT group address, bypass)

# Read-only build parameters.
REG_ID = 0x0000
REG_WIDTH = 0x0001
REG_SLOTS = 0x0002
REG_MEMBERS = 0x0003
REG_SLOT_BYTES = 0x0004
REG_DESTS = 0x0005
REG_JOBS = 0x0006
REG_ROUNDS = 0x0007
REG_ENTRY = 0x0008  # 0 frames, 1 bare UDP payloads
REG_BYPASS_BYTES = 0x0009  # the bypass buffer's frame capacity in bytes; 0: no bypass port

# Site configuration.
REG_RANK = 0x0010  # this site's rank, 0..63 (the RESULT's src)
REG_PORT = 0x0011  # UDP port listened on and sent from
REG_MAC_HI = 0x0012  # MAC bytes 0-1 (first on the wire in the high byte)
REG_MAC_LO = 0x0013  # MAC bytes 2-5
REG_IP = 0x0014  # IPv4 address, first octet in the high byte
REG_NDEST = 0x0015  # how many of the destination entries are used
REG_CLEAR = 0x0016  # write 1: zero every counter
#: Bit 0: forward what is not this core's work to the bypass port (reset 1 when the core has one): frames
#: that are not wanreduce (not IPv4, a non-UDP protocol, IPv4 with options or fragmented, another UDP
#: port), RESULTs, and CONTRIBs outside this site's root stripe. Read-only 0 without a bypass port.
REG_BYPASS = 0x0017
#: Root-stripe and RESULT-group shadows, stored with the next SCHED_HI write (like the order shadow): the
#: entry's chunks ``ROOT_LO ..= ROOT_HI`` are this site's to aggregate (reset 0 ..= 2**32 - 1: all, the
#: gather mode), others are foreign; ``MDEST`` is an IPv4 multicast group every RESULT of the entry is
#: also sent to (reset 0: none), after the ``NDEST`` destination entries.
REG_ROOT_LO = 0x0018
REG_ROOT_HI = 0x0019
REG_MDEST = 0x001A

# Per job entry j: +0 job id, +1 period P (1..rounds; 0 disables the entry), +2 bank bits b: round r's
# chunk c uses slot ((r mod P) << b | c mod 2**b) mod S (reset: log2 S, i.e. chunk mod S).
JOB_BASE = 0x0100
JOB_STRIDE = 4
JOB_BANK_OFFSET = 2

#: Summation-order shadow: word w holds the ranks of members 4w..4w+3, one per byte (bits 5:0 the rank,
#: ORDER_NONE for no member). The next SCHED_HI write stores the order with the bitmap; member k of the
#: order is the k-th term of every sum of that (job, round).
ORDER_BASE = 0x0020
ORDER_WORDS = 16
ORDER_PER_WORD = 4
ORDER_NONE = 0xFF
# Per destination d: +0 MAC bytes 0-1, +1 MAC bytes 2-5, +2 IPv4 address, +3 UDP port.
DEST_BASE = 0x0200
DEST_STRIDE = 4

#: Counters, 32 bits, read-only, wrapping: index 0 frames_in, index d the drop counter of code d,
#: then results (chunks completed), results_reemitted (shadow RESULTs sent again because a CONTRIB for the
#: slot's last completed chunk came in; that CONTRIB is also counted under duplicate) and evictions (a live
#: chunk's buffers discarded because an older chunk, not completed here, took its slot back), bypassed
#: (frames forwarded to the bypass port: counted there and under frames_in, under no drop counter) and
#: bypass_overflow (frames to forward that were longer than the bypass buffer: lost, and counted here).
COUNTER_BASE = 0x0400
COUNTER_NAMES = (
    ["frames_in"]
    + [d.counter for d in sorted(Drop)]
    + ["results", "results_reemitted", "evictions", "bypassed", "bypass_overflow"]
)
assert [COUNTER_NAMES.index(d.counter) for d in Drop] == [int(d) for d in Drop]

#: Performance counters, 32 bits: clock cycles since reset or clear, input beats accepted, output beats
#: sent, member-buffer beats read by the reduce engine, cycles the reduce engine had work.
PERF_BASE = 0x0440
PERF_NAMES = ["cycles", "in_beats", "out_beats", "reduce_reads", "reduce_active"]

#: Ethernet board registers, 32 bits, read-only, answered by the Ethernet board top rather than the core:
#: the MAC's receive counters (frames passed to the core, then frames dropped by reason: RX_ER, lost for
#: room, bad preamble, runt, oversize, bad FCS), its transmit counters (frames queued for the line, frames
#: too long for its buffer), the PHY's link bit and the number of link polls over MDIO. A board with two
#: ports has the second port's (the LAN side of an in-line board) at ``BOARD_BASE + BOARD_PORT_STRIDE``.
BOARD_BASE = 0x0480
BOARD_PORT_STRIDE = 0x10
BOARD_NAMES = (
    "rx_ok",
    "rx_er",
    "rx_overflow",
    "rx_preamble",
    "rx_runt",
    "rx_oversize",
    "rx_fcs",
    "tx_queued",
    "tx_dropped",
    "link",
    "link_polls",
)

#: Schedule table, write-only: entry (j, r) is the 64-bit expected bitmap of job entry j for round r mod P,
#: written as its low word at SCHED_BASE + 2 * (j * rounds + r) and then its high word at the next address
#: (the high-word write stores the entry).
SCHED_BASE = 0x8000
