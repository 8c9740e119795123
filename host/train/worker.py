"""One site's training process: torch.distributed over gloo on loopback, synchronised through wanreduce.

Three algorithms, each with its sync through :func:`wanreduce.host.train.aggregate.run_rounds`:

* ``allreduce`` (H = 1): a :class:`~torch.nn.parallel.DistributedDataParallel` model whose communication
  hook replaces each gradient bucket by its average under the sync's rounds (or, pipelined, by the
  previous step's average, so that the sync can overlap the whole next step);
* ``diloco``: ``h`` inner SGD steps, then ``sync(model)`` averages the pseudo-gradients (global copy minus
  local weights) and an outer Nesterov-momentum SGD step moves the global copy (DiLoCo, Douillard et al.
  2023, arXiv:2311.08105; outer lr 0.7 and momentum 0.9 as there);
* ``gossip``: decentralised SGD (D-PSGD, Lian et al. 2017, arXiv:1705.09056): every step each site mixes its
  weights with its group's through one round and adds its own gradient step;
* ``streaming``: Streaming DiLoCo (Douillard et al. 2025, arXiv:2501.18512): the parameters are cut into
  ``fragments`` (transformer blocks dealt round-robin, a strided pattern); fragment ``p`` runs its own
  DiLoCo outer step every ``h`` steps, at offset ``p * h / fragments``; its averaged pseudo-gradient is
  applied ``tau`` inner steps later (the communication overlaps those steps), and the local fragment is
  then mixed with the new global one, ``alpha * local + (1 - alpha) * global``.

Two tasks: ``digits`` (the perceptron of :mod:`.data`, SGD with momentum, accuracy) and ``lm`` (the
byte-level transformer of :mod:`.lm` on :mod:`.corpus`, AdamW, validation loss). ``cfg["task"]`` picks one.

The transport between processes is ``all_gather`` of the wire bits (each site "multicasts" its tensor);
the aggregation itself is wanreduce's: summation order, wire dtype, division, as the aggregator and hosts
do. Every process computes the whole round (it holds every contribution) and keeps its own row, so the
numbers are the same in every process by construction.
"""

import threading

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from ..packet import to_wire_bits
from ..protocol import np_dtype
from .aggregate import run_rounds, wire_dtype
from .methods import streaming_syncs

__all__ = [
    "make_model",
    "Syncer",
    "DistComm",
    "ThreadComm",
    "run_site",
    "thread_sites",
    "train_trajectory",
    "worker_main",
    "fragments_of",
    "TASKS",
]


def make_model(seed, hidden=64):
    """The model every method trains: a two-layer perceptron on the 8x8 digits (4,810 parameters)."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10))


_INIT_LOCK = threading.Lock()


class DistComm:
    """The transport between the site processes: ``torch.distributed`` (gloo) ``all_gather``."""

    def all_gather(self, tensor):
        out = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
        dist.all_gather(out, tensor)
        return out

    def once(self, compute):
        """The sync's result: every process computes the whole round itself."""
        return compute()


class ThreadComm:
    """The transport between sites that are threads of one process: each ``all_gather`` is an exchange
    through shared slots between two barriers, and :meth:`once` computes a sync's rounds once for all the
    sites (every site's ``compute`` would return the same array). Every wait has a deadline."""

    def __init__(self, n, *, timeout_s=600.0):
        self.n = n
        self.barrier = threading.Barrier(n, timeout=timeout_s)
        self.slots = [None] * n
        self.lock = threading.Lock()
        self.memo = {}
        self.local = threading.local()

    def bind(self, rank):
        self.local.rank, self.local.calls = rank, 0

    def all_gather(self, tensor):
        self.slots[self.local.rank] = tensor.detach().clone()
        self.barrier.wait()
        out = list(self.slots)
        self.barrier.wait()
        return out

    def once(self, compute):
        k = self.local.calls
        self.local.calls += 1
        with self.lock:
            if k not in self.memo:
                self.memo[k] = [compute(), 0]
            entry = self.memo[k]
            entry[1] += 1
            if entry[1] == self.n:
                del self.memo[k]
        return entry[0]


class Syncer:
    """Averages a flat float32 tensor over the rounds of one sync, through wanreduce. ``comm`` is the
    transport of the contributions (default: ``torch.distributed``)."""

    def __init__(self, *, rank, n, dtype, engine, chunk_elems, record=False, comm=None):
        self.rank, self.n = rank, n
        self.dtype = wire_dtype(dtype)
        self.engine, self.chunk_elems = engine, chunk_elems
        self.record = [] if record else None
        self.syncs = 0
        self.comm = comm or DistComm()

    def average(self, flat, rounds):
        """``flat`` (numpy float32) of this site → its value after ``rounds``, as float32."""
        bits = to_wire_bits(flat, self.dtype)
        mine = torch.from_numpy(bits.view(np.uint8).copy())  # gloo gathers bytes of any width
        gathered = self.comm.all_gather(mine)
        x = np.stack([g.numpy() for g in gathered]).view(np_dtype(self.dtype))  # (sites, elements)
        first = self.syncs
        y = self.comm.once(
            lambda: run_rounds(
                x, rounds, self.dtype, engine=self.engine, chunk_elems=self.chunk_elems, first_round=first
            )
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
    # Kept per parameter, not per bucket: DDP rebuilds its buckets after the first step (in the order
    # the gradients became ready), so a bucket's layout may differ from one step to the next.
    prev, i = np.zeros_like(out), 0
    for p in bucket.parameters():
        k = p.numel()
        if id(p) in pending:
            prev[i : i + k] = pending[id(p)]
        pending[id(p)] = out[i : i + k]
        i += k
    if i != out.size:
        raise RuntimeError(f"The bucket holds {out.size} elements, its parameters {i}.")
    fut = torch.futures.Future()
    fut.set_result(torch.from_numpy(prev).view_as(buf))
    return fut


class _Bucket:
    """What a communication hook sees of a DDP gradient bucket: its flat buffer, index and parameters."""

    def __init__(self, buffer, index, params):
        self._buffer, self._index, self._params = buffer, index, params

    def buffer(self):
        return self._buffer

    def parameters(self):
        return self._params

    def index(self):
        return self._index


def _hook_without_ddp(model, state, hook):
    """The same communication hook applied to all the gradients as one bucket (sites that are threads
    have no process group for DDP). Each element is averaged on its own, so the bits do not depend on how
    DDP would have laid out or cut its buckets."""
    params = [p for p in model.parameters() if p.grad is not None]
    flat = torch.cat([p.grad.reshape(-1) for p in params])
    out = hook(state, _Bucket(flat, 0, params)).wait()
    i = 0
    for p in params:
        p.grad.copy_(out[i : i + p.numel()].view_as(p.grad))
        i += p.numel()


def _accuracy(model, x, y):
    with torch.no_grad():
        return float((model(x).argmax(1) == y).float().mean())


class _DigitsTask:
    """The perceptron on the digits: SGD with momentum, test accuracy (higher is better)."""

    higher_is_better = True

    def __init__(self, rank, n, cfg):
        from .data import load_split

        split = load_split(n, seed=cfg["seed"])
        self.xs, self.ys = torch.from_numpy(split.site_x[rank]), torch.from_numpy(split.site_y[rank])
        self.tx, self.ty = torch.from_numpy(split.test_x), torch.from_numpy(split.test_y)
        self.cfg = cfg
        self.loss_fn = nn.CrossEntropyLoss()

    def model(self):
        return make_model(self.cfg["seed"], self.cfg["hidden"])

    def optimizer(self, params, lr):
        return _SGD(params, lr=lr, momentum=self.cfg["momentum"])

    def loss(self, net, rng):
        idx = rng.integers(0, len(self.ys), self.cfg["batch"])
        return self.loss_fn(net(self.xs[idx]), self.ys[idx])

    def metric(self, model):
        return _accuracy(model, self.tx, self.ty)


class _LMTask:
    """The byte-level transformer on the standard library's sources: AdamW, validation loss (lower is
    better)."""

    higher_is_better = False

    def __init__(self, rank, n, cfg):
        from .corpus import load_lm_split

        self.cfg = cfg
        split = load_lm_split(
            n, seed=cfg["seed"], context=cfg["context"], val_windows=cfg.get("val_windows", 32)
        )
        self.text, self.val = split.site_text[rank], split.val_windows

    def model(self):
        from .lm import make_lm

        c = self.cfg
        return make_lm(
            c["seed"], layers=c["layers"], width=c["width"], heads=c["heads"], context=c["context"]
        )

    def optimizer(self, params, lr):
        from .lm import AdamW

        return AdamW(params, lr=lr, weight_decay=self.cfg["weight_decay"], warmup=self.cfg["warmup"])

    def loss(self, net, rng):
        from .lm import lm_batch, lm_loss

        x, y = lm_batch(self.text, rng, self.cfg["batch"], self.cfg["context"])
        return lm_loss(net, x, y)

    def metric(self, model):
        from .lm import validation_loss

        return validation_loss(model, self.val)


TASKS = {"digits": _DigitsTask, "lm": _LMTask}


def fragments_of(model, count):
    """Streaming DiLoCo's fragments: lists of parameters. Blocks (``model.blocks``) are dealt round-robin
    (the paper's strided pattern); the other parameters (embeddings, final norm) join fragment 0. A model
    without blocks is cut into ``count`` runs of its parameters of about equal size."""
    blocks = getattr(model, "blocks", None)
    if blocks is not None and len(blocks) >= count:
        frags = [[] for _ in range(count)]
        in_block = set()
        for i, blk in enumerate(blocks):
            frags[i % count] += list(blk.parameters())
            in_block.update(id(p) for p in blk.parameters())
        frags[0] = [p for p in model.parameters() if id(p) not in in_block] + frags[0]
        return frags
    params = list(model.parameters())
    total = sum(p.numel() for p in params)
    frags, acc = [[] for _ in range(count)], 0
    for p in params:
        frags[min(count - 1, acc * count // total)].append(p)
        acc += p.numel()
    return frags


class _Streaming:
    """Streaming DiLoCo's outer loop over the fragments of ``model`` (see the module docstring)."""

    def __init__(self, model, *, h, fragments, tau, alpha, outer_lr, syncer, rounds_now):
        self.frags = fragments_of(model, fragments)
        self.h, self.tau, self.alpha = h, tau, alpha
        self.outer = []  # per fragment: its global copy (a parameter) and the outer optimizer over it
        for f in self.frags:
            glob = nn.Parameter(nn.utils.parameters_to_vector(f).detach().clone())
            self.outer.append((glob, _SGD([glob], lr=outer_lr, momentum=0.9, nesterov=True)))
        self.syncer, self.rounds_now = syncer, rounds_now
        self.pending = []  # (step to apply at, fragment, averaged pseudo-gradient)

    @torch.no_grad()
    def after_step(self, step):
        for p in streaming_syncs(self.h, len(self.frags), step):
            outer_param = self.outer[p][0]
            local = nn.utils.parameters_to_vector(self.frags[p]).detach()
            delta = self.syncer.average((outer_param.detach() - local).numpy(), self.rounds_now())
            self.pending.append((step + self.tau, p, delta))
        due = [x for x in self.pending if x[0] <= step]
        self.pending = [x for x in self.pending if x[0] > step]
        for _, p, delta in due:
            outer_param, outer = self.outer[p]
            outer_param.grad = torch.from_numpy(delta)
            outer.step()
            local = nn.utils.parameters_to_vector(self.frags[p]).detach()
            mixed = self.alpha * local + (1 - self.alpha) * outer_param.detach()
            nn.utils.vector_to_parameters(mixed.clone(), self.frags[p])


def train_trajectory(*, rank, n, split=None, traj, cfg, syncer, task=None):
    """Train one trajectory on this site; returns (evals, final weights) where evals are
    ``(step, metric of each site's model, max spread of weights across sites)``; the metric is the
    task's (accuracy, or validation loss)."""
    task = task or TASKS[cfg.get("task", "digits")](rank, n, cfg)
    with _INIT_LOCK:  # the global generator: sites that are threads must not interleave their draws
        torch.manual_seed(cfg["seed"])
        model = task.model()
    algo, h, steps = traj["algorithm"], traj["h"], traj["steps"]
    syncs = traj["syncs"]  # list of rounds lists, one per sync index modulo its length
    rng = np.random.default_rng([cfg["seed"], rank])
    lr = traj.get("lr", cfg["lr"])
    outer_lr = traj.get("outer_lr", cfg["outer_lr"])
    sync_index = [0]

    def rounds_now():
        r = syncs[sync_index[0] % len(syncs)]
        sync_index[0] += 1
        return r

    net, hook = model, None
    if algo == "allreduce":
        hook_state = (syncer, rounds_now, {}) if traj.get("pipelined") else (syncer, rounds_now)
        hook_fn = _pipelined_hook if traj.get("pipelined") else _ddp_hook
        if isinstance(syncer.comm, DistComm):
            net = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=25)
            net.register_comm_hook(hook_state, hook_fn)
        else:
            hook = (hook_state, hook_fn)
    opt = task.optimizer(model.parameters(), lr)
    if algo == "diloco":
        glob = nn.utils.parameters_to_vector(model.parameters()).detach().clone()
        outer_param = nn.Parameter(glob.clone())
        outer = _SGD([outer_param], lr=outer_lr, momentum=0.9, nesterov=True)
    streaming = None
    if algo == "streaming":
        streaming = _Streaming(
            model,
            h=h,
            fragments=traj["fragments"],
            tau=traj["tau"],
            alpha=traj.get("alpha", cfg.get("alpha", 0.5)),
            outer_lr=outer_lr,
            syncer=syncer,
            rounds_now=rounds_now,
        )
    evals = []
    sign = 1.0 if task.higher_is_better else -1.0

    def evaluate(step):
        vec = nn.utils.parameters_to_vector(model.parameters()).detach()
        vecs = syncer.comm.all_gather(vec)
        stack = torch.stack(vecs)
        spread = float((stack.max(0).values - stack.min(0).values).max())
        # Replicas with identical bits have the same metric: site 0 computes it for all.
        same = all(torch.equal(v, vecs[0]) for v in vecs[1:])
        metric = torch.tensor([task.metric(model) if rank == 0 or not same else 0.0])
        metrics = syncer.comm.all_gather(metric)
        if same:
            metrics = [metrics[0]] * n
        evals.append((step, [float(a) for a in metrics], spread))
        return min(sign * float(a) for a in metrics)  # the worst site, in "higher is better" terms

    evaluate(0)
    reached = None
    for step in range(1, steps + 1):
        opt.zero_grad()
        loss = task.loss(net, rng)
        loss.backward()
        if hook is not None:
            _hook_without_ddp(model, *hook)
        if algo == "gossip":
            syncer.sync(model, rounds_now())  # x_i <- mix(x)_i - lr g_i(x_i): mix first, then step
        opt.step()
        if algo == "diloco" and step % h == 0:
            local = nn.utils.parameters_to_vector(model.parameters()).detach()
            delta = syncer.average((outer_param.detach() - local).numpy(), rounds_now())
            outer_param.grad = torch.from_numpy(delta)
            outer.step()
            nn.utils.vector_to_parameters(outer_param.detach().clone(), model.parameters())
        if streaming is not None:
            streaming.after_step(step)
        if step % traj["eval_every"] == 0:
            worst = evaluate(step)
            if reached is None and worst >= sign * cfg["target"]:
                reached = step
            if reached is not None and step >= reached * cfg["past_target"] + traj["eval_every"]:
                break
    final = nn.utils.parameters_to_vector(model.parameters()).detach().numpy().copy()
    return evals, final


def run_site(rank, n, cfg, trajectories, comm, log=None):
    """Every trajectory in turn at site ``rank``; rank 0 returns the results by key (others None) and
    reports each finished trajectory to ``log``."""
    import time

    task = TASKS[cfg.get("task", "digits")](rank, n, cfg)
    results = {}
    for traj in trajectories:
        syncer = Syncer(
            rank=rank,
            n=n,
            dtype=traj.get("dtype", cfg["dtype"]),
            engine=traj.get("engine", cfg["engine"]),
            chunk_elems=cfg["chunk_elems"],
            record=cfg.get("record", False),
            comm=comm,
        )
        t0 = time.perf_counter()
        evals, final = train_trajectory(rank=rank, n=n, traj=traj, cfg=cfg, syncer=syncer, task=task)
        wall = time.perf_counter() - t0
        finals = comm.all_gather(torch.from_numpy(final))
        if rank == 0:
            results[traj["key"]] = {
                "evals": evals,
                "final": np.stack([f.numpy() for f in finals]),
                "record": syncer.record,
                "syncs": syncer.syncs,
                "wall_s": wall,
            }
            if log is not None:
                log(f"run {len(results)}/{len(trajectories)}: {evals[-1][0]} steps in {wall:.0f} s")
    return results if rank == 0 else None


def worker_main(rank, n, init_file, cfg, trajectories, out_queue):
    """Entry point of site ``rank``'s process: every trajectory in turn, results to ``out_queue``."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=n)
    try:
        results = run_site(rank, n, cfg, trajectories, DistComm())
        if rank == 0:
            out_queue.put(results)
    finally:
        dist.destroy_process_group()


def thread_sites(n, cfg, trajectories, *, timeout_s=1800.0, log=None):
    """The sites as threads of this process (one intra-op thread each, torch kernels run outside the
    GIL): the same algorithms and the same sync arithmetic, computed once per sync for all the sites,
    without the process group's per-step scheduling of ``n`` processes. Returns rank 0's results."""
    import time

    torch.set_num_threads(1)
    comm = ThreadComm(n, timeout_s=timeout_s)
    out, errors = {}, []

    def site(rank):
        comm.bind(rank)
        try:
            res = run_site(rank, n, cfg, trajectories, comm, log)
            if rank == 0:
                out.update(res)
        except BaseException as exc:  # noqa: BLE001 - reported to the caller with its site
            errors.append((rank, exc))
            comm.barrier.abort()

    threads = [threading.Thread(target=site, args=(r,), daemon=True) for r in range(n)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout_s
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    if any(t.is_alive() for t in threads):
        comm.barrier.abort()
        raise TimeoutError(f"the site threads did not finish in {timeout_s:g} s")
    real = [(r, e) for r, e in errors if not isinstance(e, threading.BrokenBarrierError)]
    if real or errors:
        rank, exc = (real or errors)[0]
        raise RuntimeError(f"site {rank} failed: {type(exc).__name__}: {exc}") from exc
    return out
