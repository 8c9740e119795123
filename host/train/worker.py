"""One site's training process: torch.distributed over gloo on loopback, synchronised through wanreduce.

Three algorithms, each with its sync through :func:`wanreduce.host.train.aggregate.run_rounds`:

* ``allreduce`` (H = 1): a :class:`~torch.nn.parallel.DistributedDataParallel` model whose communication
  hook replaces each gradient bucket by its average under the sync's rounds (or, pipelined, by the
  previous step's average, so that the sync can overlap the whole next step);
* ``diloco``: ``h`` inner SGD steps, then ``sync(model)`` averages the pseudo-gradients (global copy minus
  local weights) and an outer Nesterov-momentum SGD step moves the global copy (DiLoCo, Douillard et al.
  2023, arXiv:2311.08105; outer lr 0.7 and momentum 0.9 as there);
* ``gossip``: decentralised SGD (D-PSGD, Lian et al. 2017, arXiv:1705.09056): every step each site mixes its
  weights with its group's through one round and adds its own gradient step.

The transport between processes is ``all_gather`` of the wire bits (each site "multicasts" its tensor);
the aggregation itself is wanreduce's: summation order, wire dtype, division, as the aggregator and hosts
do. Every process computes the whole round (it holds every contribution) and keeps its own row, so the
numbers are the same in every process by construction.
"""

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from ..packet import to_wire_bits
from ..protocol import np_dtype
from .aggregate import run_rounds, wire_dtype

__all__ = ["make_model", "Syncer", "train_trajectory", "worker_main"]


def make_model(seed, hidden=64):
    """The model every method trains: a two-layer perceptron on the 8x8 digits (4,810 parameters)."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10))


class Syncer:
    """Averages a flat float32 tensor over the rounds of one sync, through wanreduce."""

    def __init__(self, *, rank, n, dtype, engine, chunk_elems, record=False):
        self.rank, self.n = rank, n
        self.dtype = wire_dtype(dtype)
        self.engine, self.chunk_elems = engine, chunk_elems
        self.record = [] if record else None
        self.syncs = 0

    def average(self, flat, rounds):
        """``flat`` (numpy float32) of this site → its value after ``rounds``, as float32."""
        bits = to_wire_bits(flat, self.dtype)
        mine = torch.from_numpy(bits.view(np.uint8).copy())  # gloo gathers bytes of any width
        gathered = [torch.empty_like(mine) for _ in range(self.n)]
        dist.all_gather(gathered, mine)
        x = np.stack([g.numpy() for g in gathered]).view(np_dtype(self.dtype))  # (sites, elements)
        y = run_rounds(
            x, rounds, self.dtype, engine=self.engine, chunk_elems=self.chunk_elems, first_round=self.syncs
        )
        if self.record is not None:
            self.record.append((x.copy(), [list(map(list, r)) for r in rounds], y.copy()))
        self.syncs += 1
        return y[self.rank].astype(np.float32)

    def sync(self, model, rounds):
        """The plain ``sync(model)`` of local SGD: average the weights in place; returns nothing."""
        vec = nn.utils.parameters_to_vector(model.parameters()).detach().numpy()
        new = self.average(vec, rounds)
        nn.utils.vector_to_parameters(torch.from_numpy(new), model.parameters())


class _SGD:
    """SGD with momentum (torch.optim.SGD's update, dampening 0), written out because constructing a
    torch.optim optimizer imports torch._dynamo, which costs each site process tens of seconds of CPU."""

    def __init__(self, params, *, lr, momentum, nesterov=False):
        self.params, self.lr, self.momentum, self.nesterov = list(params), lr, momentum, nesterov
        self.bufs = [None] * len(self.params)

    @torch.no_grad()
    def step(self):
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            g = p.grad
            if self.bufs[i] is None:
                self.bufs[i] = g.clone()
            else:
                self.bufs[i].mul_(self.momentum).add_(g)
            d = g.add(self.bufs[i], alpha=self.momentum) if self.nesterov else self.bufs[i]
            p.add_(d, alpha=-self.lr)

    def zero_grad(self):
        for p in self.params:
            p.grad = None


def _ddp_hook(state, bucket):
    syncer, rounds_of = state
    buf = bucket.buffer()
    out = syncer.average(buf.detach().numpy(), rounds_of())
    fut = torch.futures.Future()
    fut.set_result(torch.from_numpy(out).view_as(buf))
    return fut


def _pipelined_hook(state, bucket):
    """The previous step's averaged gradients (zero on the first step); this step's are averaged now and
    applied next step, so on the clock their sync overlaps the whole next step."""
    syncer, rounds_of, pending = state
    buf = bucket.buffer()
    out = syncer.average(buf.detach().numpy(), rounds_of())
    prev = pending.get(bucket.index(), np.zeros_like(out))
    pending[bucket.index()] = out
    fut = torch.futures.Future()
    fut.set_result(torch.from_numpy(prev).view_as(buf))
    return fut


def _accuracy(model, x, y):
    with torch.no_grad():
        return float((model(x).argmax(1) == y).float().mean())


def train_trajectory(*, rank, n, split, traj, cfg, syncer):
    """Train one trajectory on this site; returns (evals, final weights) where evals are
    ``(step, accuracy of each site's model, max spread of weights across sites)`` (rank 0 only)."""
    torch.manual_seed(cfg["seed"])
    model = make_model(cfg["seed"], cfg["hidden"])
    algo, h, steps = traj["algorithm"], traj["h"], traj["steps"]
    syncs = traj["syncs"]  # list of rounds lists, one per sync index modulo its length
    rng = np.random.default_rng([cfg["seed"], rank])
    xs, ys = torch.from_numpy(split.site_x[rank]), torch.from_numpy(split.site_y[rank])
    tx, ty = torch.from_numpy(split.test_x), torch.from_numpy(split.test_y)
    loss_fn = nn.CrossEntropyLoss()
    lr = cfg["lr"]
    sync_index = [0]

    def rounds_now():
        r = syncs[sync_index[0] % len(syncs)]
        sync_index[0] += 1
        return r

    net = model
    if algo == "allreduce":
        net = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=25)
        if traj.get("pipelined"):
            net.register_comm_hook((syncer, rounds_now, {}), _pipelined_hook)
        else:
            net.register_comm_hook((syncer, rounds_now), _ddp_hook)
    opt = _SGD(model.parameters(), lr=lr, momentum=cfg["momentum"])
    if algo == "diloco":
        glob = nn.utils.parameters_to_vector(model.parameters()).detach().clone()
        outer_param = nn.Parameter(glob.clone())
        outer = _SGD([outer_param], lr=cfg["outer_lr"], momentum=0.9, nesterov=True)
    evals = []

    def evaluate(step):
        acc = torch.tensor([_accuracy(model, tx, ty)])
        accs = [torch.empty(1) for _ in range(n)]
        dist.all_gather(accs, acc)
        vec = nn.utils.parameters_to_vector(model.parameters()).detach()
        vecs = [torch.empty_like(vec) for _ in range(n)]
        dist.all_gather(vecs, vec)
        stack = torch.stack(vecs)
        spread = float((stack.max(0).values - stack.min(0).values).max())
        evals.append((step, [float(a) for a in accs], spread))
        return min(float(a) for a in accs)

    evaluate(0)
    reached = None
    for step in range(1, steps + 1):
        idx = rng.integers(0, len(ys), cfg["batch"])
        opt.zero_grad()
        loss = loss_fn(net(xs[idx]), ys[idx])
        loss.backward()
        if algo == "gossip":
            syncer.sync(model, rounds_now())  # x_i <- mix(x)_i - lr g_i(x_i): mix first, then step
        opt.step()
        if algo == "diloco" and step % h == 0:
            local = nn.utils.parameters_to_vector(model.parameters()).detach()
            delta = syncer.average((outer_param.detach() - local).numpy(), rounds_now())
            outer_param.grad = torch.from_numpy(delta)
            outer.step()
            nn.utils.vector_to_parameters(outer_param.detach().clone(), model.parameters())
        if step % traj["eval_every"] == 0:
            acc = evaluate(step)
            if reached is None and acc >= cfg["target"]:
                reached = step
            if reached is not None and step >= reached * cfg["past_target"] + traj["eval_every"]:
                break
    final = nn.utils.parameters_to_vector(model.parameters()).detach().numpy().copy()
    return evals, final


def worker_main(rank, n, init_file, cfg, trajectories, out_queue):
    """Entry point of site ``rank``'s process: every trajectory in turn, results to ``out_queue``."""
    from .data import load_split

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=n)
    try:
        split = load_split(n, seed=cfg["seed"])
        results = {}
        for traj in trajectories:
            syncer = Syncer(
                rank=rank,
                n=n,
                dtype=traj.get("dtype", cfg["dtype"]),
                engine=traj.get("engine", cfg["engine"]),
                chunk_elems=cfg["chunk_elems"],
                record=cfg.get("record", False),
            )
            import time

            t0 = time.perf_counter()
            evals, final = train_trajectory(rank=rank, n=n, split=split, traj=traj, cfg=cfg, syncer=syncer)
            wall = time.perf_counter() - t0
            finals = [torch.empty(final.size) for _ in range(n)]
            dist.all_gather(finals, torch.from_numpy(final))
            if rank == 0:
                results[traj["key"]] = {
                    "evals": evals,
                    "final": np.stack([f.numpy() for f in finals]),
                    "record": syncer.record,
                    "syncs": syncer.syncs,
                    "wall_s": wall,
                }
        if rank == 0:
            out_queue.put(results)
    finally:
        dist.destroy_process_group()
