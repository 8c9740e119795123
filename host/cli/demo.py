"""``wanreduce demo``: the nine-city network synchronising under its optimised schedule.

It computes the sync schedule for the embedded nine-city topology at the given aggregator memory, then runs
one period of it: every site multicasts a random tensor as CONTRIB frames, each member's aggregator (the
golden model; the Verilated core joins in the end-to-end co-simulation) receives them in the order the WAN's
delays interleave them, and every site takes its group's RESULT divided by the group size. It checks that
every member of a group got identical bits, that no packet was dropped, and that after one period every site
holds the average of all nine tensors to within a few units in the last place. A three-site check over all
three dtypes against numpy summing in rank order follows.
"""

import numpy as np

from ..host.cosim import run_schedule
from ..host.costmodel import CostModel, CostParams
from ..host.frames import build_frames, parse_frame
from ..host.golden import Destination, GoldenAggregator
from ..host.packet import pack_tensor, unpack_payloads
from ..host.protocol import UDP_PORT, DType, bits_dtype, np_dtype
from ..host.schedule import optimize, plan_to_schedule
from ..host.topology import load_topology
from ..host.units import format_seconds, format_size, parse_size
from ..spec.errors import WanreduceError
from ._common import int_in

__all__ = ["register", "run", "three_site_check"]


def register(sub):
    p = sub.add_parser("demo", help="nine sites synchronise under the optimised schedule (golden model)",
                       description=__doc__.split("\n\n")[1].replace("\n", " "))
    p.add_argument("--memory", default="1MiB",
                   help="aggregator memory the schedule is optimised for (default: 1MiB)")
    p.add_argument("--elements", type=int_in(1, 1 << 24, "--elements"), default=65536,
                   help="elements per site's tensor (default: 65536)")
    p.add_argument("--chunk-elems", type=int_in(1, 2240, "--chunk-elems"), default=256,
                   help="elements per packet (default: 256, 1 KiB of fp32)")
    p.add_argument("--dtype", choices=[d.label for d in DType], default="fp32",
                   help="element type of the nine-site run (default: fp32)")
    p.add_argument("--seed", type=int_in(0, 2**32 - 1, "--seed"), default=1, help="random seed (default: 1)")
    p.add_argument("--time-limit", type=int_in(1, 600, "--time-limit"), default=5,
                   help="seconds for the schedule search (default: 5)")
    p.set_defaults(func=run)


def three_site_check(*, dtype, elements, chunk_elems, seed):
    """Three sites in one group, each aggregator fed in its own order: (identical, exact, chunks)."""
    rng = np.random.default_rng(seed)
    ranks = [0, 1, 2]
    expected = sum(1 << r for r in ranks)
    tensors = [rng.standard_normal(elements).astype(np.float32) for _ in ranks]
    frames = []
    for r, t in zip(ranks, tensors, strict=True):
        payloads = pack_tensor(t, dtype=dtype, rank=r, chunk_elems=chunk_elems)
        for block in payloads.blocks:
            frames += [f.tobytes() for f in build_frames(
                block, src_mac=f"02:57:52:00:00:{r:02x}", dst_mac="01:00:5e:57:52:00", src_ip=f"10.87.82.{r}",
                dst_ip="239.87.82.0", sport=UDP_PORT, dport=UDP_PORT)]
    n_chunks = -(-elements // chunk_elems)
    results = {}
    for site in ranks:
        agg = GoldenAggregator(rank=site, jobs={0: [expected]}, slots=n_chunks, members=3,
                               slot_bytes=chunk_elems * 4, mac=f"02:57:52:00:01:{site:02x}",
                               ip=f"10.87.83.{site}",
                               destinations=[Destination(f"02:57:52:00:00:{site:02x}", f"10.87.82.{site}")])
        out = []
        for i in np.random.default_rng(seed * 100 + site).permutation(len(frames)):
            out += agg.feed_frame(frames[i])
        if agg.counters["results"] != n_chunks:
            return False, False, n_chunks
        results[site], _ = unpack_payloads([parse_frame(f, port=UDP_PORT)[0] for f in out], dtype=dtype)
    wire = [t.astype(np_dtype(dtype)) for t in tensors]
    reference = ((wire[0] + wire[1]).astype(np_dtype(dtype)) + wire[2]).astype(np_dtype(dtype))
    bits = [results[s].view(bits_dtype(dtype)) for s in ranks]
    identical = all(np.array_equal(bits[0], b) for b in bits[1:])
    exact = np.array_equal(bits[0], reference.view(bits_dtype(dtype)))
    return identical, exact, n_chunks


def _error_ulps(report, dtype):
    """Largest distance from the exact average, in ulps of the average absolute input.

    Summation error scales with the inputs' magnitudes, not the result's (the average can cancel to near
    zero), so this is the unit in which a few ulps per addition is the expected size.
    """
    eps = {DType.FP32: 2.0**-23, DType.FP16: 2.0**-10, DType.BF16: 2.0**-7}[dtype]
    scale = np.maximum(report.scale, np.finfo(np.float64).tiny)
    worst = max(np.max(np.abs(v.astype(np.float64) - report.exact) / scale) for v in report.values)
    return float(worst / eps)


def run(args):
    memory = parse_size(args.memory, what="--memory")
    dtype = DType.from_label(args.dtype)
    topo = load_topology("nine-city")
    model = CostModel(topo, CostParams(memory_bytes=memory, chunk_bytes=args.chunk_elems * dtype.size))
    best, _ = optimize(model, time_limit_s=args.time_limit, seed=args.seed)
    if not np.isfinite(best.score_s):
        raise WanreduceError(f"{format_size(memory)} of aggregator memory cannot hold one slot for any group")
    schedule = plan_to_schedule(best, model)
    sync = format_size(model.params.tensor_bytes)
    print(f"nine-city WAN, {format_size(memory)} of aggregator memory per site: best schedule {best.name}, "
          f"time to consensus {format_seconds(best.score_s)} per {sync} sync")
    for r, rnd in enumerate(schedule.rounds):
        print(f"  round {r}: " + "  ".join("{" + ",".join(topo.sites[i] for i in g) + "}" for g in rnd))

    rng = np.random.default_rng(args.seed)
    tensors = [rng.standard_normal(args.elements).astype(np.float32) for _ in range(topo.n)]
    report = run_schedule(schedule, tensors, one_way_s=topo.one_way_s, dtype=dtype,
                          chunk_elems=args.chunk_elems, seed=args.seed)
    print(f"one period with nine golden aggregators, {args.elements} {dtype.label} elements per site, "
          f"{args.chunk_elems} per packet, arrival orders from the WAN's one-way delays:")
    ok = True
    for rr in report.rounds:
        same = all(rr.identical)
        ok &= same and not rr.drops
        drops = ", ".join(f"{k} {v}" for k, v in rr.drops.items()) or "none"
        print(f"  round {rr.round}: {rr.results} RESULTs, each group's members identical to the bit: {same}, "
              f"drops: {drops}, last contribution in at {rr.finish_s * 1e3:.1f} ms")
    patterns = len({v.view(bits_dtype(dtype)).tobytes() for v in report.values})
    ulps = _error_ulps(report, dtype)
    # Each round adds at most one rounding per addition plus the division, per element.
    tolerance = 2 * sum(max(len(g) for g in rnd) + 1 for rnd in schedule.rounds)
    ok &= ulps <= tolerance
    print(f"  after the period: every site within {ulps:.2f} ulp (of the mean |input|) of the exact "
          f"average of all nine tensors (allowed {tolerance}); {patterns} distinct bit patterns across the "
          f"nine sites")
    if patterns > 1:
        print("  (sites agree to the bit within each group; across groups of the last round the same "
              "values are summed in different rank orders, so they may differ in the last place)")

    print("three sites, one group, each aggregator fed in its own random order:")
    for d in DType:
        identical, exact, n = three_site_check(dtype=d, elements=min(args.elements, 20000),
                                               chunk_elems=args.chunk_elems, seed=args.seed)
        ok &= identical and exact
        print(f"  {d.label}: {n} RESULTs per site; identical to the bit: {identical}; "
              f"equal to numpy summing in rank order: {exact}")
    print("demo: PASS" if ok else "demo: FAIL")
    return 0 if ok else 1
