"""``wanreduce emit --to udp://INTERFACE:PORT --live``: one site's hosts over real UDP.

Instead of sending a pacing model's frames open-loop, the site runs the host transport
(:class:`wanreduce.host.transport.SiteTransport`): its CONTRIBs go to its groups' multicast addresses under
the self-clocked window, the RESULTs of its aggregator (``wanreduce aggd`` on the same interface and port)
are applied, lost ones are retransmitted, and a dead member stops it with one line. ``--result OUT.npy``
keeps the synchronised tensor.
"""

import math

import numpy as np

from ..host.aggd import site_layout
from ..host.transport import SiteTransport
from ..spec.errors import WanreduceError
from ._common import Outputs

__all__ = ["add_options", "run_live"]


def add_options(p):
    p.add_argument(
        "--live",
        action="store_true",
        help="with --to udp://INTERFACE:PORT: run this site's hosts over real UDP through the aggregators "
        "(wanreduce aggd) instead of sending the pacing model's frames",
    )
    p.add_argument(
        "--result", metavar="OUT.npy", default=None, help="with --live: write the synchronised tensor here"
    )
    p.add_argument(
        "--deadline", type=float, default=300.0, help="with --live: seconds the run may take (default: 300)"
    )


def run_live(args, schedule, address, topo, grads, dtype, gbps):
    """The ``--live`` branch of ``wanreduce emit``: returns the exit code."""
    interface, port = address
    if not (0 < args.deadline < math.inf):
        raise WanreduceError(f"--deadline must be a positive number of seconds, not {args.deadline}")
    outs = Outputs(force=args.force, inputs=[args.schedule, args.grads])
    result = outs.add(args.result, "--result") if args.result else None
    layout = site_layout(schedule, dtype=dtype)
    tp = SiteTransport(
        schedule,
        args.rank,
        layout=layout,
        one_way_s=topo.one_way_s,
        site_Bps=gbps[args.rank] * 1e9 / 8,
        dtype=dtype,
        interface=interface,
        port=port,
        job=args.job,
    )
    try:
        run = tp.open().run(grads[args.rank], rounds=args.rounds, deadline_s=args.deadline)
    finally:
        tp.close()
    site = schedule.sites[args.rank]
    for r, (a, b) in enumerate(zip(run.first_send_s, run.last_result_s, strict=True)):
        if not math.isnan(a):
            print(f"{site} round {r}: first CONTRIB at {a * 1e3:.1f} ms, last RESULT at {b * 1e3:.1f} ms")
    print(
        f"{site}: {run.sent} datagrams sent ({run.retransmits} retransmitted on timeout, "
        f"{run.resends_on_result} on a repeated RESULT)"
    )
    if result is not None:
        with outs.commit():
            np.save(outs.temp(result), run.values)
        print(f"wrote {args.result}")
    return 0
