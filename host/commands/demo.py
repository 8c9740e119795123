"""``wanreduce demo``: three sites, one group, each site's aggregator sees its own arrival order.

Until the nine-site co-simulation replaces it, this packs random tensors for three sites, runs every
frame through each site's golden aggregator in a different (seeded) WAN order, and checks that all three
sites' RESULTs are identical to the bit and equal to numpy summing in rank order.
"""

import numpy as np

from ..frames import build_frames, parse_frame
from ..golden import Destination, GoldenAggregator
from ..packet import pack_tensor, unpack_payloads
from ..protocol import UDP_PORT, DType
from ._common import int_in

__all__ = ["register", "run", "three_site_check"]


def register(sub):
    p = sub.add_parser("demo", help="three-site aggregation check against numpy (golden model)",
                       description=__doc__.split("\n\n")[1].replace("\n", " "))
    p.add_argument("--elements", type=int_in(1, 1 << 26, "--elements"), default=100_000,
                   help="elements per tensor (default: 100000)")
    p.add_argument("--chunk-elems", type=int_in(1, 0xFFFF, "--chunk-elems"), default=256,
                   help="elements per packet (default: 256)")
    p.add_argument("--seed", type=int_in(0, 2**32 - 1, "--seed"), default=1, help="random seed (default: 1)")
    p.set_defaults(func=run)


def three_site_check(*, dtype, elements, chunk_elems, seed):
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
                               ip=f"10.87.82.{100 + site}", destinations=[Destination("02:00:00:00:00:01",
                                                                                      "10.0.0.1", UDP_PORT)])
        out = []
        for i in np.random.default_rng(seed * 100 + site).permutation(len(frames)):
            out += agg.feed_frame(frames[i])
        payloads = [parse_frame(f, port=UDP_PORT)[0] for f in out]
        results[site], _ = unpack_payloads(payloads, dtype=dtype)
        assert agg.counters["results"] == n_chunks
    wire = [t.astype(dtype.numpy) for t in tensors]
    reference = ((wire[0] + wire[1]).astype(dtype.numpy) + wire[2]).astype(dtype.numpy)
    bits = [results[s].view(dtype.bits) for s in ranks]
    identical = all(np.array_equal(bits[0], b) for b in bits[1:])
    exact = np.array_equal(bits[0], reference.view(dtype.bits))
    return identical, exact, n_chunks


def run(args):
    ok = True
    print(f"three sites, one group, {args.elements} elements, {args.chunk_elems} per packet, "
          f"each site's aggregator fed in its own random arrival order")
    for dtype in DType:
        identical, exact, n = three_site_check(dtype=dtype, elements=args.elements,
                                               chunk_elems=args.chunk_elems, seed=args.seed)
        ok &= identical and exact
        print(f"  {dtype.label}: {n} RESULTs per site; sites identical to the bit: {identical}; "
              f"equal to numpy summing in rank order: {exact}")
    print("demo: PASS" if ok else "demo: FAIL")
    return 0 if ok else 1
