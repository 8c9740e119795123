"""``wanreduce train --transport udp``: the DDP hook over real sockets, checked against the fast path.

The sites' PyTorch processes (torch.distributed over gloo on loopback) train the digits perceptron for
``--udp-steps`` DDP steps; every gradient goes through aggregator processes as UDP multicast under the
optimizer's schedule for the first ``--sites`` sites of the nine-city network (one period per step). The
same run is repeated on the fast path (numpy rounds), and the weights must agree bit for bit.
"""

import numpy as np

from ..host.costmodel import CostModel, CostParams
from ..host.schedule import optimize, plan_to_schedule
from ..host.topology import load_topology
from ..spec.errors import WanreduceError
from ._common import add_port_option, int_option, progress

__all__ = ["add_options", "run_udp"]


def add_options(p):
    """The options ``wanreduce train`` gains (defaults keep its simulated-clock experiment)."""
    p.add_argument(
        "--transport",
        choices=("gloo", "udp"),
        default="gloo",
        help="gloo: the experiment of every method; udp: DDP steps whose gradients go through aggregator "
        "processes over real UDP, checked bit for bit against the fast path (default: gloo)",
    )
    int_option(
        p,
        "--udp-steps",
        1,
        1000,
        default=5,
        help="with --transport udp: DDP steps to train (default: 5)",
    )
    add_port_option(p, "with --transport udp: UDP port")


def run_udp(args):
    from ..host.train.udp import train_sites

    topo = load_topology("nine-city")
    topo = load_topology("nine-city", sites=list(topo.sites[: args.sites]))
    params = CostParams(memory_bytes=1 << 20, chunk_bytes=1024, tensor_bytes=4810 * 4, bus_bits=64)
    model = CostModel(topo, params)
    best, _ = optimize(model, time_limit_s=min(args.schedule_time, 5), seed=args.seed)
    if not np.isfinite(best.score_s):
        raise WanreduceError("no schedule fits the aggregators for these sites")
    schedule = plan_to_schedule(best, model)
    names = ", ".join("{" + ",".join(topo.sites[i] for i in g) + "}" for r in schedule.rounds for g in r)
    progress("train", f"{topo.n} sites over UDP, schedule {best.name}: {names}")
    kw = dict(steps=args.udp_steps, dtype=args.dtype, seed=args.seed)
    udp = train_sites(schedule, transport="udp", port=args.port, **kw)
    fast = train_sites(schedule, transport="fast", **kw)
    same = all(np.array_equal(a.view(np.uint32), b.view(np.uint32)) for a, b in zip(udp, fast, strict=True))
    distinct = len({w.tobytes() for w in udp})
    print(
        f"{args.udp_steps} DDP steps on {topo.n} sites over UDP: weights equal to the fast path bit for bit: "
        f"{same}; distinct weights across sites: {distinct}"
    )
    return 0 if same else 1
