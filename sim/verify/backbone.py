"""Backbone-bound syncs: the discrete-event WAN with its links queued at their capacity
(:class:`~wanreduce.host.wan.Backbone`) against the cost model's backbone term.

The two share the topology (delays, capacities, routes) and the schedule, not the rate rule: the cost
model gives each group a max-min fair share of every link its multicast tree crosses, for the whole
transfer, and adds that transfer time to the first chunk's latency; the simulation queues every frame
at every capacitated link it crosses, first come first served, so streams that reach a shared link at
different times do not share it all along, and a link's queue drains while later frames are still on
their way.

Two workloads, each one deterministic run (no jitter, no seed matters once the schedule is fixed):

* :data:`LINE`: three sites in a line, ``AAA - BBB - CCC``, 1 ms one way and 10 Gbit/s per link, 100 Gbit/s
  access links, one all-to-all group: the middle links carry two trees each, so the backbone, not the
  access links or the FPGA, sets the pace. The transfer dominates the sync, which is where the closed form
  is meant to hold; it is still pessimistic by about one link's delay, the head start the nearer sender's
  stream has on the shared link.
* the embedded ``nine-city-private`` topology (twelve 10 Gbit/s links, multi-hop routes), with ample
  memory, where the trees of nine sites contend on links at different delays: the closed form is
  pessimistic there, and the figure says by how much.
"""

from ...host import wan
from ...host.costmodel import CostModel, CostParams
from ...host.pacing import aggregator_slots
from ...host.schedule import optimize, plan_to_schedule
from ...host.topology import load_topology, parse_topology_csv
from ...spec.protocol import DType

__all__ = ["LINE", "line_topology", "backbone_bound"]

#: The line topology, in the private topology file form (docs: host/data/README.md).
LINE = (
    "Device1,Device2,Latency,Bandwidth,Uptime,Shared\nAAA1,BBB1,2.0,10,1.0,NA\nBBB1,CCC1,2.0,10,1.0,NA\n",
    "Device,Edge,Operator\nAAA1,100,line\nBBB1,100,line\nCCC1,100,line\n",
)


def line_topology():
    csv, devices = LINE
    return parse_topology_csv(csv, source="line", devices_text=devices)


def backbone_bound(topology, *, elements, memory=1 << 30, chunk_elems=256, site_gbps=100.0, seed=0):
    """One period of the optimizer's schedule for ``topology`` (a Topology or an embedded name), simulated
    with and without the backbone's queues; a dict of the times and what the cost model says."""
    topo = load_topology(topology) if isinstance(topology, str) else topology
    if not topo.links_limited:
        raise ValueError(
            f"The topology {topo.name} has no link with a capacity: nothing bounds the backbone."
        )
    dtype = DType.FP32
    params = CostParams.for_tensor(
        elements, chunk_elems, dtype, memory_bytes=memory, bus_bits=512, clock_mhz=322.0, site_gbps=site_gbps
    )
    model = CostModel(topo, params)
    best, _ = optimize(model, time_limit_s=2.0, seed=seed)
    schedule = plan_to_schedule(best, model)
    g_max = max(len(g) for rnd in schedule.rounds for g in rnd)
    slots = aggregator_slots(memory, chunk_bytes=params.chunk_bytes, members=g_max, width=params.bus_bits)
    _, bank_slots = wan.bank_layout(slots, schedule.period)
    common = dict(
        model.sim_args(elements=elements, chunk_elems=chunk_elems, dtype=dtype), bank_slots=bank_slots
    )
    queued = wan.simulate(schedule, backbone=topo, **common)
    free = wan.simulate(schedule, **common)
    cost = model.period(schedule.rounds)
    bounds = sorted(
        {g.bound for rnd in schedule.rounds for g in model.round(rnd, bank_slots=bank_slots).groups}
    )
    return {
        "rounds": [[list(g) for g in rnd] for rnd in schedule.rounds],
        "sim_s": queued.finish_s,
        "sim_without_backbone_s": free.finish_s,
        "model_s": cost.period_s,
        "model_latency_s": cost.latency_s,
        "sim_over_model": queued.finish_s / cost.period_s,
        "model_bounds": bounds,
    }
