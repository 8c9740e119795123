"""PyTorch over real sockets: the DDP communication hook and ``sync(model)`` on the UDP host transport.

:class:`UdpSyncer` has the interface of :class:`wanreduce.host.train.worker.Syncer` (``average(flat,
rounds)`` and ``sync(model, rounds)``), so the same DDP hook and the same local-SGD loop use it; but where
``Syncer`` gathers every site's tensor with torch.distributed and computes the rounds itself, this one
sends the site's tensor through the aggregators as CONTRIB datagrams and applies the RESULTs it receives
(:class:`wanreduce.host.transport.SiteTransport`). torch.distributed still launches the site processes and
keeps them in step (DDP's own broadcasts and the final gather); no gradient goes through it.

The aggregators are processes too (:func:`wanreduce.host.netdemo.aggregators`), configured with the
schedule whose period every sync runs; each sync continues the round numbering, so no chunk of a sync looks
like a retransmission of an earlier one.

:func:`train_sites` is the reduced run the tests use: a few DDP steps of the digits perceptron on every
site, over UDP or over the fast path, returning every site's final weights.
"""

import multiprocessing
import os
import tempfile
import time

import numpy as np

from ...spec.errors import WanreduceError
from ...spec.protocol import UDP_PORT
from ..aggd import GoldenEngine, site_layout
from ..transport import SiteTransport
from .aggregate import wire_dtype
from .experiment import Config
from .runner import next_from_sites, stop_sites

__all__ = ["UdpSyncer", "train_sites"]


class UdpSyncer:
    """Averages a flat float32 tensor over one period of ``schedule``, through the aggregators over UDP.

    Latency: one schedule period over the network per call. Back-pressure: the transport's window.
    """

    def __init__(
        self,
        *,
        rank,
        schedule,
        dtype,
        interface="127.0.0.1",
        port=UDP_PORT,
        job=0,
        site_Bps=1.25e9,
        deadline_s=120.0,
    ):
        self.rank, self.schedule = rank, schedule
        self.dtype = wire_dtype(dtype)
        self.layout = site_layout(schedule, dtype=self.dtype)
        self.transport = SiteTransport(
            schedule,
            rank,
            layout=self.layout,
            one_way_s=np.zeros((schedule.n, schedule.n)),
            site_Bps=site_Bps,
            dtype=self.dtype,
            interface=interface,
            port=port,
            job=job,
        ).open()
        self.deadline_s = deadline_s
        self.syncs = 0

    def average(self, flat, rounds):
        """``flat`` (numpy float32) of this site → its value after one period, as float32; ``rounds`` must
        be the schedule's period (the aggregators are configured with it)."""
        period = [list(map(list, r)) for r in self.schedule.rounds]
        if [list(map(list, r)) for r in rounds] != period:
            raise ValueError("A UDP sync runs the aggregators' schedule period; other rounds were asked for.")
        run = self.transport.run(
            np.asarray(flat, np.float32),
            rounds=self.schedule.period,
            first_round=self.syncs * self.schedule.period,
            deadline_s=self.deadline_s,
        )
        self.syncs += 1
        return run.values.astype(np.float32)

    def sync(self, model, rounds):
        """The plain ``sync(model)`` of local SGD: average the weights in place."""
        import torch
        from torch import nn

        vec = nn.utils.parameters_to_vector(model.parameters()).detach().numpy()
        new = self.average(vec, rounds)
        nn.utils.vector_to_parameters(torch.from_numpy(new), model.parameters())

    def close(self):
        self.transport.close()


def _site(rank, n, init_file, cfg, out_queue):
    """One site's process: DDP with the wanreduce hook, a few SGD steps, its final weights to the parent."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=n)
    try:
        _train(rank, n, cfg, out_queue)
    except BaseException as exc:  # reported to the parent; the others may be waiting in gloo for us
        out_queue.put((rank, f"{type(exc).__name__}: {exc}"))
        os._exit(1)
    dist.destroy_process_group()


def _train(rank, n, cfg, out_queue):
    import torch
    from torch import nn

    from .data import load_split
    from .worker import _SGD, Syncer, _ddp_hook, make_model

    schedule = cfg["schedule"]
    rounds = [list(map(list, r)) for r in schedule.rounds]
    if cfg["transport"] == "udp":
        syncer = UdpSyncer(rank=rank, schedule=schedule, dtype=cfg["dtype"], port=cfg["port"], job=cfg["job"])
    else:
        syncer = Syncer(rank=rank, n=n, dtype=cfg["dtype"], engine="fast", chunk_elems=cfg["chunk_elems"])
    split = load_split(n, seed=cfg["seed"])
    model = make_model(cfg["seed"])
    net = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=25)
    net.register_comm_hook((syncer, lambda: rounds), _ddp_hook)
    opt = _SGD(model.parameters(), lr=cfg["lr"], momentum=cfg["momentum"])
    xs, ys = torch.from_numpy(split.site_x[rank]), torch.from_numpy(split.site_y[rank])
    rng = np.random.default_rng([cfg["seed"], rank])
    loss_fn = nn.CrossEntropyLoss()
    for _ in range(cfg["steps"]):
        idx = torch.from_numpy(rng.choice(len(xs), size=cfg["batch"], replace=False))
        opt.zero_grad()
        loss_fn(net(xs[idx]), ys[idx]).backward()
        opt.step()
    out_queue.put((rank, nn.utils.parameters_to_vector(model.parameters()).detach().numpy().copy()))
    if cfg["transport"] == "udp":
        syncer.close()


def train_sites(schedule, *, transport, steps=3, dtype="fp32", seed=0, port=UDP_PORT, job=0, timeout_s=300.0):
    """``steps`` DDP steps on every site of ``schedule`` (one process each, gloo on loopback), each
    gradient averaged over one period through ``transport`` ("udp": aggregator processes and the UDP host
    transport; "fast": the numpy rounds); returns the sites' final weights, one float32 vector each."""
    if transport not in ("udp", "fast"):
        raise ValueError(f"The transport must be 'udp' or 'fast', not {transport!r}.")
    try:
        import torch._dynamo  # noqa: F401  (imported once in the parent, see runner.py)
    except ImportError as exc:
        raise WanreduceError("training needs PyTorch: pip install -e '.[train]' (or make train)") from exc
    from .data import load_split

    n = schedule.n
    load_split(n, seed=seed)
    layout = site_layout(schedule, dtype=wire_dtype(dtype))
    cfg = dict(schedule=schedule, transport=transport, steps=steps, dtype=dtype, seed=seed, port=port)
    # The digits comparison's optimiser and batch: its defaults.
    cfg.update(
        {k: getattr(Config, k) for k in ("lr", "momentum", "batch")}, job=job, chunk_elems=layout.chunk_elems
    )
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    finals = [None] * n

    def engine(s, r, lay):
        return GoldenEngine(s, r, lay, job=job)

    from ..netdemo import aggregators

    with tempfile.TemporaryDirectory(prefix="wanreduce-udp-train-") as tmp:
        init_file = os.path.join(tmp, "rendezvous")
        with (
            aggregators(schedule, layout=layout, make_engine=engine, port=port, job=job)
            if transport == "udp"
            else _null()
        ):
            procs = [
                ctx.Process(target=_site, args=(r, n, init_file, cfg, out), daemon=True) for r in range(n)
            ]
            for p in procs:
                p.start()
            try:
                deadline = time.monotonic() + timeout_s
                for _ in range(n):
                    rank, vec = next_from_sites(out, procs, deadline, timeout_s)
                    if isinstance(vec, str):
                        raise WanreduceError(f"site {schedule.sites[rank]}: {vec}")
                    finals[rank] = vec
            finally:
                stop_sites(procs)
    return finals


class _null:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False
