"""The WAN cost model: how long one round of a sync schedule takes on a given topology.

Where things sit: each site's FPGA aggregator is at the edge of the wide-area network. Every member
of a group multicasts its contribution once; the backbone carries one copy of that stream on each
link of its multicast tree (the union of shortest paths to the other members) and delivers it to
every other member's FPGA. The FPGA merges its G inputs (G - 1 from the backbone, its own site's
contribution) and sends one RESULT stream down the site's access link.

A group ``g`` whose members each stream their tensor at payload rate ``r`` finishes in::

    T_g = max_{j,m in g} d(j, m)  +  tensor_bytes / r

with ``r`` the smallest of

* the site access links: ``site_Bps * eff`` (one contribution up, one RESULT down, full duplex);
* the FPGA's ingress ports: ``fpga_ingress_Bps * eff / G`` (G streams arrive at each member);
* the FPGA datapath, one ``bus_bits`` beat per clock: ``chunk * clock / beats_per_packet / G``;
* the backbone: each directed link carries one copy per tree that uses it, at most its capacity,
  shared max-min fairly between the groups of a round;
* the reorder buffer: at member ``m`` a contribution from ``j`` waits from its arrival ``d(j, m)``
  until the last one arrives, so the memory held is ``r * S_m`` with
  ``S_m = sum_j (max_k d(k, m) - d(j, m))``, hence ``r <= memory_bytes / max_m S_m``. A group also
  needs one slot (``G * chunk_bytes``) to run at all.

``eff = chunk / (chunk + 98)`` is the payload share of a frame on the wire (Ethernet 14 + FCS 4 +
preamble and inter-frame gap 20, IPv4 20, UDP 8, wanreduce header 32 bytes). A round lasts as long
as its slowest group; sites in no group wait. A schedule's period is the sum of its rounds.
"""

import math
from dataclasses import dataclass, field

import numpy as np

from ..spec.errors import WanreduceError

__all__ = [
    "CostParams",
    "CostModel",
    "GroupCost",
    "RoundCost",
    "FRAME_OVERHEAD",
    "PACKET_OVERHEAD",
]

#: Bytes on the wire per chunk besides its payload: Ethernet header 14 + FCS 4 + preamble/SFD 8 +
#: inter-frame gap 12, IPv4 20, UDP 8, wanreduce header 32.
FRAME_OVERHEAD = 98
#: Bytes the FPGA datapath sees per chunk besides its payload (no preamble, gap or FCS).
PACKET_OVERHEAD = 74


def _positive(name, value):
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise WanreduceError(f"{name} must be a positive number, got {value!r}")


@dataclass(frozen=True, kw_only=True)
class CostParams:
    """Every knob of the model, with the CLI defaults.

    ``fpga_ingress_gbps`` is the sum of the aggregator's input ports (400: four 100GbE ports);
    ``clock_mhz`` and ``bus_bits`` set the datapath, one beat per clock (512 bits at 250 MHz is
    128 Gbit/s of packets).
    """

    memory_bytes: int = 1 << 20
    chunk_bytes: int = 1024
    tensor_bytes: int = 8 << 20
    site_gbps: float = 100.0
    fpga_ingress_gbps: float = 400.0
    clock_mhz: float = 250.0
    bus_bits: int = 512
    epsilon: float = 1e-6

    def __post_init__(self):
        for name in ("memory_bytes", "chunk_bytes", "tensor_bytes"):
            v = getattr(self, name)
            if not (isinstance(v, (int, np.integer)) and v > 0):
                raise WanreduceError(f"{name.replace('_', ' ')} must be a positive whole number, got {v!r}")
        if self.chunk_bytes > 8960:
            raise WanreduceError(
                f"chunk bytes {self.chunk_bytes} do not fit one jumbo frame (at most 8960 payload bytes)"
            )
        for name in ("site_gbps", "fpga_ingress_gbps", "clock_mhz"):
            _positive(name.replace("_", " "), getattr(self, name))
        if not (isinstance(self.bus_bits, int) and self.bus_bits >= 8 and self.bus_bits % 8 == 0):
            raise WanreduceError(f"bus bits must be a positive multiple of 8, got {self.bus_bits!r}")
        if not (0 < self.epsilon < 1):
            raise WanreduceError(f"epsilon must be between 0 and 1, got {self.epsilon!r}")

    @property
    def wire_eff(self):
        """Payload share of the bytes on an Ethernet link."""
        return self.chunk_bytes / (self.chunk_bytes + FRAME_OVERHEAD)

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
    bound: str  # "latency", "memory", "site", "fpga", "backbone"


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


class CostModel:
    """Evaluates groups and rounds of a schedule on one topology under one set of parameters.

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
        self.fpga_rate = min(p.fpga_ingress_gbps * 1e9 / 8 * p.wire_eff, p.datapath_Bps)
        self.fpga_bound = "fpga"
        self._cache = {}
        self._link_limited = topology.links_limited

    # -- one group on its own ------------------------------------------------------------------
    def _solo(self, members):
        key = members
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        p = self.params
        idx = np.asarray(members)
        k = len(idx)
        if k < 2:
            res = (0.0, math.inf, "idle")
        else:
            d = self.D[np.ix_(idx, idx)]
            lat = float(d.max())
            colmax = d.max(axis=0)
            wait = float((k * colmax - d.sum(axis=0)).max())
            limits = [
                (float(self.site_rate[idx].min()), "site"),
                (self.fpga_rate / k, "fpga"),
            ]
            if k * p.chunk_bytes > p.memory_bytes:
                limits.append((0.0, "memory"))
            elif wait > 0:
                limits.append((p.memory_bytes / wait, "memory"))
            rate, bound = min(limits, key=lambda x: x[0])
            res = (lat, rate, bound)
        self._cache[key] = res
        return res

    def _finish(self, members, lat, rate, bound):
        if len(members) < 2:
            return GroupCost(members, 0.0, 0.0, math.inf, "idle")
        if rate <= 0:
            return GroupCost(members, math.inf, lat, 0.0, bound)
        xfer = self.params.tensor_bytes / rate
        return GroupCost(members, lat + xfer, lat, rate, "latency" if lat >= xfer else bound)

    def group(self, members):
        """Cost of one group alone (no backbone contention with other groups)."""
        members = tuple(sorted(int(m) for m in members))
        lat, rate, bound = self._solo(members)
        if self._link_limited and len(members) > 1:
            return self.round([members]).groups[0]
        return self._finish(members, lat, rate, bound)

    def group_time(self, members):
        """Fast path for searches: the time of a sorted tuple of members, ignoring the backbone."""
        lat, rate, _ = self._solo(members)
        if len(members) < 2:
            return 0.0
        return math.inf if rate <= 0 else lat + self.params.tensor_bytes / rate

    # -- a round: groups share the backbone ------------------------------------------------------
    def round(self, groups):
        groups = [tuple(sorted(int(m) for m in g)) for g in groups]
        solo = [self._solo(g) for g in groups]
        if not self._link_limited:
            return RoundCost(tuple(self._finish(g, *s) for g, s in zip(groups, solo, strict=True)))
        rates, bounds = self._share_links(groups, solo)
        return RoundCost(
            tuple(
                self._finish(g, s[0], r, b)
                for g, s, r, b in zip(groups, solo, rates, bounds, strict=True)
            )
        )

    def round_time(self, groups):
        if not self._link_limited:
            return max((self.group_time(tuple(sorted(g))) for g in groups), default=0.0)
        return self.round(groups).time_s

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
