"""Every site on one machine over real UDP: one aggregator process and one host process per site.

:func:`run_sites` forks an :class:`~wanreduce.host.aggd.Aggd` and a
:class:`~wanreduce.host.transport.SiteTransport` per site, all on one interface (loopback by default),
each with its own socket; the WAN between them is emulated where datagrams are received
(:class:`~wanreduce.host.netio.WanEmulator`: the topology's one-way delay per pair, scaled by
``delay_scale``, and the seeded faults). The parent only coordinates: it starts the hosts together once
every socket is bound and joined, collects each site's tensor and round times, asks every aggregator for
its counters, and stops every process it started, whatever happens (an error, a dead site, Ctrl-C).

A host that runs out of retransmissions makes the run stop: the parent asks that site's aggregator which
members' contributions it lacks (its slot bitmap) and raises one :class:`~wanreduce.host.wan.SiteTimeout`
naming them and the round.
"""

import contextlib
import dataclasses
import multiprocessing
import multiprocessing.connection
import signal
import time

import numpy as np

from ..spec.errors import WanreduceError
from .aggd import Aggd
from .netio import WanEmulator
from .transport import SiteTransport
from .wan import SiteTimeout

__all__ = ["NetFaults", "SitesRun", "run_sites", "aggregators"]

#: Seconds a process gets to bind its socket and join its groups (an RTL engine's build is done before).
READY_S = 120.0
#: Seconds a process gets to stop after being asked before it is killed.
STOP_S = 5.0


@dataclasses.dataclass(frozen=True)
class NetFaults:
    """WAN faults (as :class:`wanreduce.host.wan.Faults`): probabilities per datagram and a dead site."""

    loss: float = 0.0
    dup: float = 0.0
    reorder: bool = False
    corrupt: float = 0.0
    kill: tuple | None = None  # (site, round): that site's hosts send nothing from that round on
    seed: int = 0


@dataclasses.dataclass
class SitesRun:
    """Every site's final tensor, round times, recovery work and its aggregator's counters."""

    values: list
    first_send_s: np.ndarray  # [site, round], NaN where the site waits
    last_result_s: np.ndarray
    transports: list  # per site: TransportRun without its values
    counters: list  # per site: the aggregator's counters
    wall_s: float


def _quiet_signals(stop):
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__(0, True))


def _aggd_main(conn, schedule, rank, make_engine, layout, wan, interface, port, job, netns=None):
    stop = [False]
    _quiet_signals(stop)
    try:
        if netns is not None:
            netns.enter(rank)
        daemon = Aggd(
            schedule,
            rank,
            make_engine(schedule, rank, layout),
            interface=interface,
            port=port,
            job=job,
            wan=wan,
            local_results=netns is not None,
        ).open()
    except Exception as exc:  # reported to the parent as one line
        conn.send(("error", str(exc)))
        return
    conn.send(("ready",))

    def tick():
        while conn.poll():
            what, *args = conn.recv()
            if what == "counters":
                conn.send(("counters", daemon.counters()))
            elif what == "missing":
                conn.send(("missing", tuple(daemon.engine.missing(*args))))
            elif what == "stop":
                stop[0] = True

    try:
        daemon.serve(lambda: stop[0], on_tick=tick)
    finally:
        daemon.close()


def _host_main(conn, transport, tensor, kill_round, deadline_s, netns=None):
    stop = [False]
    _quiet_signals(stop)
    try:
        if netns is not None:
            netns.enter(transport.rank)
        transport.open()
    except Exception as exc:
        conn.send(("error", str(exc)))
        return
    conn.send(("ready",))
    what, t0 = conn.recv()
    try:
        run = transport.run(tensor, t0=t0, kill_round=kill_round, deadline_s=deadline_s)
    except SiteTimeout as exc:
        conn.send(("timeout", str(exc), exc.site, exc.round, exc.chunk))
        return
    except Exception as exc:
        conn.send(("error", str(exc)))
        transport.close()
        return
    values = run.values
    run.values = None
    conn.send(("done", values, run))
    try:
        transport.linger(lambda: stop[0] or conn.poll(), deadline_s=deadline_s)
    finally:
        transport.close()


def _expect(conn, what, deadline, who):
    left = deadline - time.monotonic()
    if left <= 0 or not conn.poll(left):
        raise WanreduceError(f"{who} did not answer within its deadline")
    msg = conn.recv()
    if msg[0] == "error":
        raise WanreduceError(f"{who}: {msg[1]}")
    if msg[0] != what:
        raise WanreduceError(f"{who} answered {msg[0]!r} where {what!r} was expected")
    return msg


def run_sites(
    schedule,
    tensors,
    *,
    layout,
    one_way_s,
    site_Bps,
    make_engine,
    dtype,
    faults=NetFaults(),
    delay_scale=1.0,
    interface="127.0.0.1",
    port,
    job=0,
    deadline_s=600.0,
    slack_s=None,
    progress=None,
    netns=None,
):
    """One period of ``schedule`` with every site as processes over UDP; returns a :class:`SitesRun`.

    ``netns`` (a :class:`~wanreduce.host.netns.SiteNamespaces` already made): each site's processes run
    in its namespace on its own link, rate-limited in the kernel, instead of all on ``interface``.

    ``slack_s`` replaces the transport's allowance for software latency in its timeouts
    (:data:`wanreduce.host.transport.SLACK_S`): a machine busy with other work needs more.

    ``make_engine(schedule, rank, layout)`` builds a site's aggregation engine inside its process (it must
    not build anything slow: build caches first). Raises :class:`SiteTimeout` (one line naming the missing
    site and the round) when a site is dead, :class:`WanreduceError` for anything else that goes wrong.
    """
    n = schedule.n
    D = np.asarray(one_way_s, float) * float(delay_scale)
    site_Bps = np.broadcast_to(np.asarray(site_Bps, float), (n,))
    ctx = multiprocessing.get_context("fork")
    procs, aggs, hosts = [], [], []
    kill_site, kill_round = faults.kill if faults.kill is not None else (None, None)

    def start(target, *args):
        parent, child = ctx.Pipe()
        p = ctx.Process(target=target, args=(child, *args), daemon=True)
        p.start()
        child.close()
        procs.append(p)
        return parent

    def say(msg):
        if progress is not None:
            progress(msg)

    try:
        for s in range(n):
            wan = WanEmulator(
                D[:, s],
                loss=faults.loss,
                dup=faults.dup,
                reorder=faults.reorder,
                corrupt=faults.corrupt,
                seed=faults.seed * 1009 + s,
            )
            where = interface if netns is None else netns.address(s)
            aggs.append(start(_aggd_main, schedule, s, make_engine, layout, wan, where, port, job, netns))
        deadline = time.monotonic() + READY_S
        for s, conn in enumerate(aggs):
            _expect(conn, "ready", deadline, f"the aggregator of {schedule.sites[s]}")
        say(
            f"{n} aggregators listening on {interface} port {port}"
            if netns is None
            else f"{n} aggregators listening in network namespaces {netns.prefix}s0..{n - 1}, port {port}"
        )
        for s in range(n):
            host_wan = None
            if faults.loss or faults.dup:
                host_wan = WanEmulator(
                    np.zeros(n), loss=faults.loss, dup=faults.dup, seed=faults.seed * 1009 + n + s
                )
            tp = SiteTransport(
                schedule,
                s,
                layout=layout,
                one_way_s=D,
                site_Bps=site_Bps[s],
                dtype=dtype,
                interface=interface if netns is None else netns.address(s),
                port=port,
                job=job,
                wan=host_wan,
                **({} if slack_s is None else {"slack_s": slack_s}),
            )
            kr = kill_round if s == kill_site else None
            hosts.append(start(_host_main, tp, tensors[s], kr, deadline_s, netns))
        deadline = time.monotonic() + READY_S
        for s, conn in enumerate(hosts):
            _expect(conn, "ready", deadline, f"the hosts of {schedule.sites[s]}")
        t0 = time.monotonic()
        for conn in hosts:
            conn.send(("start", t0))
        say(f"{n} host processes started")
        values, runs = [None] * n, [None] * n
        pending = set(range(n))
        end = t0 + deadline_s
        while pending:
            ready = multiprocessing.connection.wait(
                [hosts[s] for s in pending], timeout=end - time.monotonic()
            )
            if not ready:
                raise WanreduceError(f"the sites did not finish within {deadline_s:g} s")
            for conn in ready:
                s = hosts.index(conn)
                try:
                    msg = conn.recv()
                except EOFError:
                    raise WanreduceError(f"the hosts of {schedule.sites[s]} stopped without a word") from None
                if msg[0] == "timeout":
                    _, text, site, rnd, chunk = msg
                    exc = _diagnose(schedule, aggs, text, site, rnd, chunk, job)
                    exc.counters = _counters(schedule, aggs)
                    raise exc
                if msg[0] == "error":
                    raise WanreduceError(f"{schedule.sites[s]}: {msg[1]}")
                values[s], runs[s] = msg[1], msg[2]
                pending.discard(s)
                if s != kill_site:
                    say(f"{schedule.sites[s]} done at {time.monotonic() - t0:.3f} s")
        wall = time.monotonic() - t0
        counters = []
        deadline = time.monotonic() + READY_S
        for s, conn in enumerate(aggs):
            conn.send(("counters",))
            counters.append(_expect(conn, "counters", deadline, f"the aggregator of {schedule.sites[s]}")[1])
        for conn in hosts:
            conn.send(("stop",))
        if kill_site is not None:
            raise WanreduceError(
                f"round {kill_round}: {schedule.sites[kill_site]} stopped sending but every other site "
                "finished: it is in no group with anyone after that round"
            )
    finally:
        _stop(procs, aggs)
    first = np.array([r.first_send_s for r in runs], float)
    last = np.array([r.last_result_s for r in runs], float)
    return SitesRun(values, first, last, runs, counters, wall)


def _counters(schedule, aggs):
    """Every aggregator's counters, or None for one that does not answer in time."""
    out = []
    for s, conn in enumerate(aggs):
        try:
            conn.send(("counters",))
            out.append(_expect(conn, "counters", time.monotonic() + STOP_S, schedule.sites[s])[1])
        except (WanreduceError, OSError):
            out.append(None)
    return out


def _stop(procs, conns):
    """Ask every process to stop, then terminate and kill whatever is still running."""
    for conn in conns:
        try:
            conn.send(("stop",))
        except OSError:
            pass
    end = time.monotonic() + STOP_S
    for p in procs:
        p.join(max(0.0, end - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        p.join(STOP_S)
        if p.is_alive():
            p.kill()
            p.join()


@contextlib.contextmanager
def aggregators(schedule, *, layout, make_engine, interface="127.0.0.1", port, job=0):
    """Every site's aggregator as a process, listening once the block starts, stopped when it ends (the
    real network only: no emulated WAN). Yields the processes' control connections."""
    ctx = multiprocessing.get_context("fork")
    procs, conns = [], []
    try:
        for s in range(schedule.n):
            parent, child = ctx.Pipe()
            args = (child, schedule, s, make_engine, layout, None, interface, port, job)
            p = ctx.Process(target=_aggd_main, args=args, daemon=True)
            p.start()
            child.close()
            procs.append(p)
            conns.append(parent)
        deadline = time.monotonic() + READY_S
        for s, conn in enumerate(conns):
            _expect(conn, "ready", deadline, f"the aggregator of {schedule.sites[s]}")
        yield conns
    finally:
        _stop(procs, conns)


def _diagnose(schedule, aggs, text, site, rnd, chunk, job):
    """A host's timeout → one SiteTimeout naming who its aggregator lacks, read from its slot."""
    names = schedule.sites
    try:
        aggs[site].send(("missing", job, rnd, chunk))
        held = _expect(aggs[site], "missing", time.monotonic() + STOP_S, "aggregator")[1]
    except WanreduceError:
        held = None
    if not held:
        return SiteTimeout(text, site=site, round=rnd, chunk=chunk, missing=())
    who = ", ".join(f"{names[m]} (rank {m})" for m in held)
    several = len(held) > 1
    waited = (
        text.split(" after ", 1)[1].split(" (", 1)[0] if " after " in text else "the retransmission limit"
    )
    return SiteTimeout(
        f"round {rnd}: site{'s' if several else ''} {who} missing from chunk {chunk}: {names[site]}'s "
        f"aggregator holds no contribution from {'them' if several else 'it'} after {waited}; stopping "
        f"rather than summing without {'them' if several else 'it'}",
        site=site,
        round=rnd,
        chunk=chunk,
        missing=held,
    )
