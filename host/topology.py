"""WAN topologies: which sites exist, the one-way delay between them, and the links their traffic uses.

Three sources give a :class:`Topology`:

* the embedded nine-city network (``nine-city``: public-internet RTTs between 9 cities, the default;
  ``nine-city-private``: the dedicated-fibre links between the cities' switches, with bandwidths);
* a user's CSV in the *public-links* form ``City1,City2,Latency[,Bandwidth]`` (a full mesh);
* a user's CSV in the *private-links* form ``Device1,Device2,Latency,Bandwidth[,Uptime,Shared]``.

Every ``Latency`` is a round-trip time in milliseconds; the model uses one-way = RTT / 2. Traffic
between two sites follows the shortest path by latency, so a triangle-inequality violation in the
measured mesh is routed around. Nodes are cities: the switches of one city (``NYC1``..``NYC4``) are
merged, since the site's aggregator sits at the city's edge and reaches all of them.

Everything a user can get wrong raises :class:`~wanreduce.spec.errors.WanreduceError` with one sentence.
"""

import csv
import io
import math
import os
import re
from dataclasses import dataclass
from importlib import resources

import numpy as np

from ..spec.errors import WanreduceError

__all__ = [
    "Topology",
    "EMBEDDED",
    "load_topology",
    "parse_topology_csv",
    "from_rtt_matrix",
    "synthetic_regions",
]

#: Names accepted by ``--topology`` besides a file path.
EMBEDDED = ("nine-city", "nine-city-private")

_PUBLIC = ("city1", "city2", "latency")
_PRIVATE = ("device1", "device2", "latency", "bandwidth")


@dataclass(frozen=True, eq=False)
class Topology:
    """A routed network of sites.

    ``one_way_s[i, j]`` is the one-way delay from site ``i`` to site ``j`` along the shortest path.
    ``link_cap_Bps[e]`` is the capacity in bytes/s of directed link ``e`` (``inf`` when the source
    gave none), ``link_delay_s[e]`` its one-way delay, and ``paths[i][j]`` is the tuple of directed link ids
    from site ``i`` to site ``j``.
    ``site_cap_Bps[i]`` is site ``i``'s access bandwidth when the topology knows it (``nan`` when the
    cost model's ``--site-gbps`` applies).
    """

    name: str
    sites: tuple
    one_way_s: np.ndarray
    site_cap_Bps: np.ndarray
    link_ends: tuple
    link_cap_Bps: np.ndarray
    paths: tuple
    link_delay_s: np.ndarray

    @property
    def n(self):
        return len(self.sites)

    @property
    def links_limited(self):
        """True when some backbone link has a finite capacity, so multicast trees can contend."""
        return bool(np.isfinite(self.link_cap_Bps).any())

    def tree_links(self, src, members):
        """Directed links of the multicast tree from ``src`` to ``members`` (union of shortest paths)."""
        out = set()
        row = self.paths[src]
        for m in members:
            if m != src:
                out.update(row[m])
        return out

    def index(self, name):
        try:
            return self.sites.index(name)
        except ValueError:
            raise WanreduceError(f"unknown city {name!r}; the topology has {', '.join(self.sites)}") from None


def _gbps_to_Bps(gbps):
    return gbps * 1e9 / 8


def _build(name, nodes, edges, *, site_gbps=None, sites=None):
    """Route ``edges`` {(a, b): (rtt_ms, gbps or None)} between ``nodes`` and keep ``sites``."""
    n = len(nodes)
    ix = {c: i for i, c in enumerate(nodes)}
    dist = np.full((n, n), np.inf)
    np.fill_diagonal(dist, 0.0)
    nxt = np.full((n, n), -1, dtype=np.int64)
    np.fill_diagonal(nxt, np.arange(n))
    ends, caps, delays = [], [], []
    eid = {}
    for (a, b), (rtt, gbps) in sorted(edges.items()):
        i, j = ix[a], ix[b]
        cap = math.inf if gbps is None else _gbps_to_Bps(gbps)
        for u, v in ((i, j), (j, i)):
            eid[u, v] = len(ends)
            ends.append((nodes[u], nodes[v]))
            caps.append(cap)
            delays.append(rtt / 2e3)
            dist[u, v] = rtt / 2e3
            nxt[u, v] = v
    # Floyd-Warshall with next hops; strict improvement keeps the direct link on ties, so paths on a
    # mesh without triangle violations are the direct links.
    for k in range(n):
        via = dist[:, k : k + 1] + dist[k : k + 1, :]
        better = via < dist - 1e-12
        if better.any():
            dist = np.where(better, via, dist)
            nxt = np.where(better, nxt[:, k : k + 1], nxt)
    if sites is None:
        sites = list(nodes)
    site_ix = [ix[s] for s in sites]
    sub = dist[np.ix_(site_ix, site_ix)]
    if not np.isfinite(sub).all():
        i, j = np.argwhere(~np.isfinite(sub))[0]
        cut = [sites[k] for k in range(len(sites)) if not np.isfinite(sub[i, k])]
        raise WanreduceError(f"{name}: the network is disconnected: {sites[i]} cannot reach {', '.join(cut)}")
    paths = []
    for si in site_ix:
        row = []
        for sj in site_ix:
            hops, u = [], si
            while u != sj:
                v = int(nxt[u, sj])
                hops.append(eid[u, v])
                u = v
            row.append(tuple(hops))
        paths.append(tuple(row))
    cap_site = np.full(len(sites), np.nan)
    if site_gbps is not None:
        for k, s in enumerate(sites):
            if s in site_gbps:
                cap_site[k] = _gbps_to_Bps(site_gbps[s])
    return Topology(
        name=name,
        sites=tuple(sites),
        one_way_s=sub,
        site_cap_Bps=cap_site,
        link_ends=tuple(ends),
        link_cap_Bps=np.asarray(caps, dtype=float),
        paths=tuple(paths),
        link_delay_s=np.asarray(delays, dtype=float),
    )


def _number(text, what, where, *, positive=True):
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise WanreduceError(f"{where}: {what} {text!r} is not a number") from None
    if not math.isfinite(value):
        raise WanreduceError(f"{where}: {what} {text!r} is not a finite number")
    if positive and value <= 0:
        raise WanreduceError(f"{where}: {what} must be positive, got {text.strip()}")
    return value


def _city_of(device):
    """``NYC4`` -> ``NYC``: a switch belongs to the city its name starts with."""
    m = re.fullmatch(r"(.*?[^\d])\d+", device)
    return m.group(1) if m else device


def _read_rows(text, source):
    # Spreadsheet programs on Windows start a UTF-8 CSV with a byte-order mark; it is not part of the header.
    text = text.removeprefix("\ufeff")
    rows = [r for r in csv.reader(io.StringIO(text)) if any(c.strip() for c in r)]
    if not rows:
        raise WanreduceError(f"{source} is empty")
    header = [c.strip().lower() for c in rows[0]]
    return header, rows[1:]


def _links(header, rows, source, first, second, with_bw):
    col = {h: k for k, h in enumerate(header)}
    bw_col = col.get("bandwidth")
    edges, seen = {}, {}
    for lineno, row in enumerate(rows, start=2):
        where = f"{source} line {lineno}"
        if len(row) < len(header):
            raise WanreduceError(f"{where}: expected {len(header)} columns, got {len(row)}")
        a, b = row[col[first]].strip(), row[col[second]].strip()
        if not a or not b:
            raise WanreduceError(f"{where}: a link needs two names, got {a!r} and {b!r}")
        if a == b:
            raise WanreduceError(f"{where}: the link joins {a} to itself")
        rtt = _number(row[col["latency"]], f"latency of {a}-{b}", where)
        gbps = None
        if bw_col is not None and (with_bw or row[bw_col].strip()):
            gbps = _number(row[bw_col], f"bandwidth of {a}-{b}", where)
        key = tuple(sorted((a, b)))
        if key in edges:
            if edges[key] != (rtt, gbps):
                raise WanreduceError(
                    f"{where}: pair {key[0]}-{key[1]} appears twice with different values "
                    f"(first on line {seen[key]})"
                )
            continue
        edges[key] = (rtt, gbps)
        seen[key] = lineno
    if not edges:
        raise WanreduceError(f"{source} has no links")
    return edges


def parse_topology_csv(text, *, source="topology", devices_text=None, link_gbps=None, sites=None):
    """Parse either CSV form into a :class:`Topology`; ``sites`` restricts (and orders) the sites kept.

    ``link_gbps`` is the capacity given to public links that have no ``Bandwidth`` value (``None``:
    unlimited).
    """
    header, rows = _read_rows(text, source)
    if all(h in header for h in _PRIVATE):
        device_edges = _links(header, rows, source, "device1", "device2", True)
        edges = {}
        for (a, b), (rtt, gbps) in device_edges.items():
            ca, cb = _city_of(a), _city_of(b)
            if ca == cb:
                continue  # intra-city: merged into one node
            key = tuple(sorted((ca, cb)))
            # Routing uses the fastest of parallel city-to-city links, so that one is the capacity.
            if key not in edges or rtt < edges[key][0]:
                edges[key] = (rtt, gbps)
        nodes = sorted({_city_of(d) for pair in device_edges for d in pair})
        site_gbps = None
        if devices_text is not None:
            site_gbps = {}
            dh, drows = _read_rows(devices_text, "devices")
            dcol = {h: k for k, h in enumerate(dh)}
            for lineno, row in enumerate(drows, start=2):
                city = _city_of(row[dcol["device"]].strip())
                edge = _number(row[dcol["edge"]], "edge capacity", f"devices line {lineno}")
                site_gbps[city] = site_gbps.get(city, 0.0) + edge
    elif all(h in header for h in _PUBLIC):
        edges = _links(header, rows, source, "city1", "city2", False)
        nodes = sorted({c for pair in edges for c in pair})
        for i, a in enumerate(nodes):
            for b in nodes[i + 1 :]:
                if (a, b) not in edges:
                    raise WanreduceError(
                        f"{source}: pair {a}-{b} is missing; the public-links form needs the latency "
                        f"of every pair of its {len(nodes)} cities"
                    )
        if link_gbps is not None:
            edges = {k: (rtt, link_gbps if g is None else g) for k, (rtt, g) in edges.items()}
        site_gbps = None
    else:
        raise WanreduceError(
            f"{source}: the header must name City1,City2,Latency (public links) or "
            f"Device1,Device2,Latency,Bandwidth (private links), got {','.join(header)}"
        )
    if sites is not None:
        known = set(nodes)
        for s in sites:
            if s not in known:
                raise WanreduceError(f"unknown city {s!r}; {source} has {', '.join(nodes)}")
        if len(set(sites)) != len(sites):
            raise WanreduceError("the list of sites names a city twice")
    chosen = list(nodes) if sites is None else list(sites)
    if len(chosen) < 2:
        raise WanreduceError(f"{source}: a schedule needs at least 2 sites, got {len(chosen)}")
    return _build(source, nodes, edges, site_gbps=site_gbps, sites=chosen)


def load_topology(spec="nine-city", *, link_gbps=None, sites=None):
    """Load ``nine-city``, ``nine-city-private`` or a CSV file path (see :func:`parse_topology_csv`)."""
    if link_gbps is not None and not (link_gbps > 0 and math.isfinite(link_gbps)):
        raise WanreduceError(f"link bandwidth must be a positive number of Gbit/s, got {link_gbps}")
    data = resources.files("wanreduce.host.data")
    if spec == "nine-city":
        text = data.joinpath("nine_city.csv").read_text()
        return parse_topology_csv(text, source="nine-city", link_gbps=link_gbps, sites=sites)
    if spec == "nine-city-private":
        text = data.joinpath("nine_city_private.csv").read_text()
        dev = data.joinpath("nine_city_devices.csv").read_text()
        return parse_topology_csv(text, source="nine-city-private", devices_text=dev, sites=sites)
    if not os.path.exists(spec):
        raise WanreduceError(
            f"topology {spec!r} is neither {' nor '.join(EMBEDDED)} nor an existing CSV file"
        )
    try:
        with open(spec, encoding="utf-8-sig") as f:
            text = f.read()
    except UnicodeDecodeError as exc:
        raise WanreduceError(
            f"topology file {spec} is not UTF-8 text (byte {exc.start} is "
            f"{exc.object[exc.start]:#04x}); save it as UTF-8 CSV"
        ) from None
    except OSError as exc:
        raise WanreduceError(f"cannot read topology file {spec} ({exc.strerror})") from None
    return parse_topology_csv(text, source=os.path.basename(spec), link_gbps=link_gbps, sites=sites)


def from_rtt_matrix(names, rtt_ms, *, name="matrix", link_gbps=None):
    """A full-mesh topology from a symmetric matrix of RTTs in ms (used by benches and tests)."""
    rtt = np.asarray(rtt_ms, dtype=float)
    n = len(names)
    if rtt.shape != (n, n):
        raise ValueError(f"The RTT matrix must be {n}x{n}, got shape {rtt.shape}.")
    edges = {}
    for i in range(n):
        for j in range(i + 1, n):
            if not rtt[i, j] > 0:
                raise ValueError(f"The RTT between {names[i]} and {names[j]} must be positive.")
            edges[tuple(sorted((names[i], names[j])))] = (float(rtt[i, j]), link_gbps)
    return _build(name, sorted(names), edges, sites=list(names))


def synthetic_regions(n, *, regions=8, seed=0):
    """``n`` sites spread over ``regions`` metro areas on a globe, RTT from great-circle distance.

    RTT = 2 * distance / (2/3 c) * 1.5 (route stretch) + 1 ms, which gives about 1-3 ms inside a region
    and 50-250 ms between continents, like the nine-city figures.
    """
    if n < 2 or regions < 1:
        raise ValueError("A synthetic topology needs at least 2 sites and 1 region.")
    rng = np.random.default_rng(seed)
    lat_c = np.degrees(np.arcsin(rng.uniform(-0.8, 0.8, regions)))
    lon_c = rng.uniform(-180, 180, regions)
    region = np.arange(n) % regions
    lat = np.radians(lat_c[region] + rng.normal(0, 1.5, n))
    lon = np.radians(lon_c[region] + rng.normal(0, 1.5, n))
    cosang = np.sin(lat)[:, None] * np.sin(lat)[None, :] + np.cos(lat)[:, None] * np.cos(lat)[
        None, :
    ] * np.cos(lon[:, None] - lon[None, :])
    km = 6371.0 * np.arccos(np.clip(cosang, -1, 1))
    rtt = 2 * km / 200.0 * 1.5 + 1.0
    names = [f"R{region[i]}S{i}" for i in range(n)]
    return from_rtt_matrix(names, rtt, name=f"synthetic-{n}x{regions}")
