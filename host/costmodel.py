"""The WAN cost model: how long one round of a sync schedule takes on a given topology.

Where things sit: each site's FPGA aggregator is at the edge of the wide-area network. Every member
of a group multicasts its contribution once; the backbone carries one copy of that stream on each
link of its multicast tree (the union of shortest paths to the other members) and delivers it to
every other member's FPGA. The FPGA merges its G inputs (G - 1 from the backbone, its own site's
contribution) and sends one RESULT stream down the site's access link.

A group ``g`` whose members stream their tensor of ``n`` chunks at payload rate ``r`` takes, on its own::

    T_g = L_g + max(tensor_bytes / r, (ceil(n / S_b) - 1) * lambda_g)

with ``L_g = max_{j,m in g} d(j, m) + 2f`` (the first chunk's way: up the sender's access link, across the
WAN, and its RESULT down the member's access link, ``f`` one frame time), ``r`` the smallest of

* the site access links: ``site_Bps * eff`` (one contribution up, one RESULT down, full duplex);
* the FPGA's ingress ports: ``fpga_ingress_Bps * eff / G`` (G streams arrive at each member);
* the FPGA datapath, one ``bus_bits`` beat per clock: ``chunk * clock / beats_per_packet / G``;
* the backbone: each directed link carries one copy per tree that uses it, at most its capacity,
  shared max-min fairly between the groups of a round;

and the second term the reorder buffer as the gateware builds it (the self-clocked window of
PROTOCOL.md): the core has ``S`` slots of ``G_max`` member buffers each (S the largest power of two that
the memory holds), split into one bank per round of the period, ``S_b`` slots each; a site sends chunk
``c + S_b`` of a round only once its own RESULT for chunk ``c`` is in, so every window of ``S_b`` chunks
costs one loop ``lambda_g = max_{j,k} (d(j,k) + d(k,j)) / 2 + 2f``. A group that cannot get one slot per
bank does not run (infinite time, bound "memory").

A schedule's period pipelines its rounds chunk by chunk (a site starts chunk ``c`` of round ``r + 1`` as
soon as its RESULT for chunk ``c`` of round ``r`` is in), so::

    T_period = sum_r L_r + max(sum_r tensor_bytes / r_r, (ceil(n / S_b) - 1) * max_r lambda_r)

(``L_r``, ``r_r``, ``lambda_r`` of each round's slowest group). The discrete-event co-simulation
(:mod:`wanreduce.host.wan`, on the golden model or the RTL) is what this closed form is checked against.

The external-memory build (``buffers="external"``, member buffers in the card's HBM behind ``mem_ports``
AXI4 ports, :mod:`wanreduce.host.hbm`) holds fewer slots per byte (each member buffer padded to a power of
two), adds one more rate limit, ``"hbm"``: ``G r`` at most the payload rate K pseudo-channels carry when
every contribution is written once and read once, and adds the memory's delay (write acknowledged, reads
back) to ``L_g`` and ``lambda_g``. The on-chip build has none of these terms.

``eff = chunk / (chunk + 98)`` is the payload share of a frame on the wire (Ethernet 14 + FCS 4 +
preamble and inter-frame gap 20, IPv4 20, UDP 8, wanreduce header 32 bytes). Sites in no group wait.
"""

import math
from dataclasses import dataclass, field

import numpy as np

from ..spec.core import member_buffer_bytes
from ..spec.errors import WanreduceError
from ..spec.protocol import MAX_CHUNK_BYTES, PACKET_OVERHEAD, WIRE_OVERHEAD
from . import hbm
from .pacing import aggregator_slots
from .units import format_size
from .wan import bank_layout, chunk_count

__all__ = [
    "CostParams",
    "CostModel",
    "GroupCost",
    "RoundCost",
    "ScheduleCost",
]


def _positive(name, value):
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise WanreduceError(f"{name} must be a positive number, got {value!r}")


@dataclass(frozen=True, kw_only=True)
class CostParams:
    """Every knob of the model, with the CLI defaults.

    ``fpga_ingress_gbps`` is the sum of the aggregator's input ports (400: four 100GbE ports);
    ``clock_mhz`` and ``bus_bits`` set the datapath, one beat per clock (512 bits at 250 MHz is
    128 Gbit/s of packets). ``buffers`` is the build: ``"internal"`` (member buffers on chip) or
    ``"external"`` (in the card's HBM through ``mem_ports`` AXI4 ports, each access ``mem_latency_us``;
    :mod:`wanreduce.host.hbm` says what that build costs and caps ``memory_bytes`` at the card's HBM).
    """

    memory_bytes: int = 1 << 20
    chunk_bytes: int = 1024
    tensor_bytes: int = 8 << 20
    site_gbps: float = 100.0
    fpga_ingress_gbps: float = 400.0
    clock_mhz: float = 250.0
    bus_bits: int = 512
    epsilon: float = 1e-6
    buffers: str = "internal"
    mem_ports: int = 1
    mem_latency_us: float = hbm.DEFAULT_LATENCY_US

    def __post_init__(self):
        for name in ("memory_bytes", "chunk_bytes", "tensor_bytes"):
            v = getattr(self, name)
            if not (isinstance(v, (int, np.integer)) and v > 0):
                raise WanreduceError(f"{name.replace('_', ' ')} must be a positive whole number, got {v!r}")
        if self.chunk_bytes > MAX_CHUNK_BYTES:
            raise WanreduceError(
                f"chunk bytes {self.chunk_bytes} do not fit one jumbo frame (at most {MAX_CHUNK_BYTES})"
            )
        for name in ("site_gbps", "fpga_ingress_gbps", "clock_mhz"):
            _positive(name.replace("_", " "), getattr(self, name))
        if not (isinstance(self.bus_bits, int) and self.bus_bits >= 8 and self.bus_bits % 8 == 0):
            raise WanreduceError(f"bus bits must be a positive multiple of 8, got {self.bus_bits!r}")
        if not (0 < self.epsilon < 1):
            raise WanreduceError(f"epsilon must be between 0 and 1, got {self.epsilon!r}")
        if self.buffers not in ("internal", "external"):
            raise WanreduceError(f"buffers must be 'internal' or 'external', got {self.buffers!r}")
        if self.mem_ports not in (1, 2, 4, 8) or isinstance(self.mem_ports, bool):
            raise WanreduceError(f"memory ports must be 1, 2, 4 or 8, got {self.mem_ports!r}")
        if not (isinstance(self.mem_latency_us, (int, float)) and 0 <= self.mem_latency_us <= 1e3):
            raise WanreduceError(f"memory latency must be 0..1000 microseconds, got {self.mem_latency_us!r}")
        if self.external and self.memory_bytes > hbm.HBM_BYTES:
            raise WanreduceError(
                f"{format_size(self.memory_bytes)} of aggregator memory is more than the "
                f"{format_size(hbm.HBM_BYTES)} of HBM on an {hbm.CARD}, the external build's card"
            )

    @classmethod
    def for_tensor(cls, elements, chunk_elems, dtype, **knobs):
        """The parameters of a sync of ``elements`` elements of ``dtype`` in chunks of ``chunk_elems``: the
        tensor counted in whole chunks, as the wire carries it (the last one padded); ``knobs`` the rest."""
        chunk_bytes = chunk_elems * dtype.size
        return cls(
            chunk_bytes=chunk_bytes, tensor_bytes=chunk_count(elements, chunk_elems) * chunk_bytes, **knobs
        )

    @property
    def external(self):
        """True for the external-memory build (member buffers in HBM)."""
        return self.buffers == "external"

    @property
    def buffer_bytes(self):
        """Memory one member buffer takes in this build (the external map pads it to a power of two)."""
        if self.external:
            return hbm.stride_bytes(self.chunk_bytes, self.bus_bits)
        return member_buffer_bytes(self.chunk_bytes, self.bus_bits)

    def slots(self, members):
        """Slots S (a power of two) of a core built for groups of up to ``members`` in this memory: each
        ``members`` member buffers and a shadow RESULT (0: not one fits)."""
        return aggregator_slots(
            self.memory_bytes,
            chunk_bytes=self.chunk_bytes,
            members=members,
            width=self.bus_bits,
            buffers=self.buffers,
        )

    @property
    def memory_Bps(self):
        """Payload bytes/s of all input streams together the external memory carries (inf on chip)."""
        if not self.external:
            return math.inf
        return hbm.memory_rate_Bps(ports=self.mem_ports, chunk_bytes=self.chunk_bytes, width=self.bus_bits)

    def memory_delay_s(self, members):
        """What the external memory adds to a chunk's way to its RESULT in a group of ``members`` (0 on
        chip)."""
        if not self.external:
            return 0.0
        return hbm.memory_delay_s(
            members=members,
            latency_us=self.mem_latency_us,
            chunk_bytes=self.chunk_bytes,
            width=self.bus_bits,
            clock_mhz=self.clock_mhz,
        )

    @property
    def wire_eff(self):
        """Payload share of the bytes on an Ethernet link."""
        return self.chunk_bytes / (self.chunk_bytes + WIRE_OVERHEAD)

    @property
    def datapath_Bps(self):
        """Payload bytes/s the FPGA datapath takes in, all inputs together."""
        beats = math.ceil((self.chunk_bytes + PACKET_OVERHEAD) / (self.bus_bits // 8))
        return self.chunk_bytes * self.clock_mhz * 1e6 / beats

    def replace(self, **kw):
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d.update(kw)
        return CostParams(**d)


@dataclass(frozen=True)
class GroupCost:
    """One group's time and what bounds it."""

    members: tuple
    time_s: float
    latency_s: float
    rate_Bps: float
    bound: str  # "latency", "memory", "site", "fpga", "hbm", "backbone"
    loop_s: float = 0.0  # lambda_g: one window's loop
    windows: float = 1.0  # ceil(n / S_b): windows of the round (inf when no slot fits)


@dataclass(frozen=True)
class RoundCost:
    groups: tuple = field(default_factory=tuple)

    @property
    def time_s(self):
        return max((g.time_s for g in self.groups), default=0.0)

    @property
    def slowest(self):
        return max(self.groups, key=lambda g: g.time_s, default=None)

    @property
    def bound(self):
        s = self.slowest
        return "idle" if s is None else s.bound


@dataclass(frozen=True)
class ScheduleCost:
    """A whole period: its time, when each round's last RESULT is in, and what bounds it."""

    period_s: float
    finish_s: tuple  # per round, from the start of the period
    bank_slots: int
    window_s: float  # (windows - 1) * max loop: the reorder buffer's share
    transfer_s: float  # sum of the rounds' tensor / rate: the links' and datapath's share
    latency_s: float  # sum of the rounds' first-chunk latencies

    @property
    def bound(self):
        if not math.isfinite(self.period_s):
            return "memory"
        return "memory" if self.window_s >= self.transfer_s else "rate"


class CostModel:
    """Evaluates groups, rounds and periods of a schedule on one topology under one set of parameters.

    Group results are cached by member set, which makes the exhaustive and local searches cheap.
    """

    def __init__(self, topology, params):
        self.topology = topology
        self.params = params
        p = params
        self.D = topology.one_way_s
        caps = topology.site_cap_Bps.copy()
        caps[np.isnan(caps)] = p.site_gbps * 1e9 / 8
        self.site_rate = caps * p.wire_eff
        #: Time one frame takes on each site's access link.
        self.frame_s = p.chunk_bytes / self.site_rate
        self.fpga_rate = min(p.fpga_ingress_gbps * 1e9 / 8 * p.wire_eff, p.datapath_Bps)
        self.n_chunks = -(-p.tensor_bytes // p.chunk_bytes)
        self._cache = {}
        self._link_limited = topology.links_limited

    @property
    def site_wire_Bps(self):
        """Each site's access-link rate in bytes/s on the wire, frame overheads included: what the
        discrete-event WAN simulators charge a frame's bytes against."""
        return self.site_rate / self.params.wire_eff

    def sim_args(self, *, elements, chunk_elems, dtype):
        """A sync of ``elements`` elements of ``dtype`` in chunks of ``chunk_elems`` over the WAN this model
        prices, in the keywords the discrete-event simulators (:func:`wanreduce.host.wan.simulate`,
        :func:`wanreduce.host.wan_lean.simulate_lean`) take: the topology's one-way delays, each site's wire
        rate and the tensor's layout."""
        return dict(
            one_way_s=self.topology.one_way_s,
            site_Bps=self.site_wire_Bps,
            chunk_elems=chunk_elems,
            elements=elements,
            dtype=dtype,
        )

    def bank_slots(self, period, members):
        """Slots per round bank of a core built for groups of up to ``members`` and ``period`` rounds."""
        slots = self.params.slots(max(int(members), 1))
        return bank_layout(slots, max(int(period), 1))[1]

    def windows(self, bank_slots):
        return math.ceil(self.n_chunks / bank_slots) if bank_slots > 0 else math.inf

    # -- one group on its own ------------------------------------------------------------------
    def _solo(self, members):
        key = members
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        idx = np.asarray(members)
        k = len(idx)
        if k < 2:
            res = (0.0, math.inf, "idle", 0.0)
        else:
            d = self.D[np.ix_(idx, idx)]
            f2 = 2 * float(self.frame_s[idx].max()) + self.params.memory_delay_s(k)
            lat = float(d.max()) + f2
            loop = float(((d + d.T) / 2).max()) + f2
            limits = [
                (float(self.site_rate[idx].min()), "site"),
                (self.fpga_rate / k, "fpga"),
                (self.params.memory_Bps / k, "hbm"),
            ]
            rate, bound = min(limits, key=lambda x: x[0])
            res = (lat, rate, bound, loop)
        self._cache[key] = res
        return res

    def _finish(self, members, lat, rate, bound, loop, windows):
        if len(members) < 2:
            return GroupCost(members, 0.0, 0.0, math.inf, "idle")
        if rate <= 0 or not math.isfinite(windows):
            return GroupCost(members, math.inf, lat, 0.0, "memory" if rate > 0 else bound, loop, windows)
        xfer = self.params.tensor_bytes / rate
        wait = (windows - 1) * loop
        tail = max(xfer, wait)
        which = "memory" if wait > xfer else bound
        return GroupCost(members, lat + tail, lat, rate, "latency" if lat >= tail else which, loop, windows)

    def _default_bank(self, groups):
        return self.bank_slots(1, max((len(g) for g in groups), default=1))

    def group(self, members, *, bank_slots=None):
        """Cost of one group alone (no backbone contention with other groups)."""
        members = tuple(sorted(int(m) for m in members))
        if self._link_limited and len(members) > 1:
            return self.round([members], bank_slots=bank_slots).groups[0]
        bank_slots = self._default_bank([members]) if bank_slots is None else bank_slots
        lat, rate, bound, loop = self._solo(members)
        return self._finish(members, lat, rate, bound, loop, self.windows(bank_slots))

    def group_time(self, members, *, bank_slots=None):
        """Fast path for searches: the time of a sorted tuple of members, ignoring the backbone."""
        bank_slots = self._default_bank([members]) if bank_slots is None else bank_slots
        return self._finish(members, *self._solo(members), self.windows(bank_slots)).time_s

    # -- a round: groups share the backbone ------------------------------------------------------
    def round(self, groups, *, bank_slots=None):
        groups = [tuple(sorted(int(m) for m in g)) for g in groups]
        bank_slots = self._default_bank(groups) if bank_slots is None else bank_slots
        windows = self.windows(bank_slots)
        solo = [self._solo(g) for g in groups]
        if not self._link_limited:
            return RoundCost(tuple(self._finish(g, *s, windows) for g, s in zip(groups, solo, strict=True)))
        rates, bounds = self._share_links(groups, solo)
        return RoundCost(
            tuple(
                self._finish(g, s[0], r, b, s[3], windows)
                for g, s, r, b in zip(groups, solo, rates, bounds, strict=True)
            )
        )

    def round_time(self, groups, *, bank_slots=None):
        return self.round(groups, bank_slots=bank_slots).time_s

    # -- a period: rounds pipeline chunk by chunk --------------------------------------------------
    def schedule_bank_slots(self, rounds):
        members = max((len(g) for rnd in rounds for g in rnd), default=1)
        return self.bank_slots(len(rounds), members)

    def period(self, rounds, round_costs=None):
        """:class:`ScheduleCost` of one period of ``rounds`` (the formula in the module docstring)."""
        sb = self.schedule_bank_slots(rounds)
        if round_costs is None:
            round_costs = [self.round(g, bank_slots=sb) for g in rounds]
        windows = self.windows(sb)
        lat = xfer = loop = 0.0
        finish = []
        latency_sum = 0.0
        for rc in round_costs:
            active = [g for g in rc.groups if len(g.members) > 1]
            if active:
                if any(not math.isfinite(g.time_s) for g in active):
                    return ScheduleCost(
                        math.inf, tuple(math.inf for _ in round_costs), sb, math.inf, math.inf, math.inf
                    )
                lat += max(g.latency_s for g in active)
                xfer += max(self.params.tensor_bytes / g.rate_Bps for g in active)
                loop = max(loop, max(g.loop_s for g in active))
            wait = (windows - 1) * loop if loop else 0.0
            finish.append(lat + max(xfer, wait))
            latency_sum = lat
        wait = (windows - 1) * loop if loop else 0.0
        return ScheduleCost(finish[-1] if finish else 0.0, tuple(finish), sb, wait, xfer, latency_sum)

    def _share_links(self, groups, solo):
        """Max-min fair payload rates for the groups of one round over the capacitated backbone."""
        topo = self.topology
        eff = self.params.wire_eff
        cap = topo.link_cap_Bps * eff
        use = np.zeros((len(groups), len(cap)))
        for gi, g in enumerate(groups):
            if len(g) < 2:
                continue
            for j in g:
                for e in topo.tree_links(j, g):
                    use[gi, e] += 1
        upper = np.array([s[1] for s in solo], dtype=float)
        bounds = [s[2] for s in solo]
        rates = np.zeros(len(groups))
        active = np.array([len(g) >= 2 and u > 0 for g, u in zip(groups, upper, strict=True)])
        finite_links = np.isfinite(cap)
        while active.any():
            load = use.T @ rates
            demand = use[active].sum(axis=0)
            step = float((upper - rates)[active].min())
            sel = finite_links & (demand > 0)
            if sel.any():
                step = min(step, float(((cap - load)[sel] / demand[sel]).min()))
            step = max(step, 0.0)
            rates[active] += step
            load = use.T @ rates
            saturated = sel & (load >= cap * (1 - 1e-9))
            for gi in np.flatnonzero(active):
                if rates[gi] >= upper[gi] * (1 - 1e-12):
                    active[gi] = False
                elif saturated.any() and use[gi, saturated].any():
                    active[gi] = False
                    bounds[gi] = "backbone"
        for gi, g in enumerate(groups):
            if len(g) < 2:
                rates[gi] = math.inf
        return rates, bounds
