"""Backbone-bound syncs in the discrete-event WAN (:mod:`wanreduce.sim.verify.backbone`) against the cost
model: frames queued at each capacitated link against max-min fair shares of the links.

* ``backbone_line_sim_over_model``: three sites in a line (two 10 Gbit/s links, 1 ms one way each), one group,
  16 MiB of fp32 per site: the simulated sync over the cost model's period (``backbone_line_sim_s``,
  ``backbone_line_model_s``), and ``backbone_line_queue_share``, the part of the simulated time the
  queues add (simulated with the backbone's capacities over simulated without them).
* ``backbone_private_sim_over_model``: the embedded nine-city-private topology with ample memory, 4 MiB
  per site: where the trees contend at different delays and the closed form is pessimistic
  (``backbone_private_sim_s``, ``backbone_private_model_s``).

Each is one deterministic run (the WAN has no randomness without faults).
"""

from ..verify.backbone import backbone_bound, line_topology

__all__ = ["run", "NOTES", "RUNS"]


def run():
    out = {}
    line = backbone_bound(line_topology(), elements=1 << 22)
    private = backbone_bound("nine-city-private", elements=1 << 20)
    for tag, r in (("line", line), ("private", private)):
        out[f"backbone_{tag}_sim_over_model"] = round(float(r["sim_over_model"]), 4)
        out[f"backbone_{tag}_sim_s"] = float(r["sim_s"])
        out[f"backbone_{tag}_model_s"] = float(r["model_s"])
    out["backbone_line_queue_share"] = round(float(line["sim_s"] / line["sim_without_backbone_s"]), 3)
    return out


NOTES = {
    k: "one deterministic run: the discrete-event WAN has no randomness without faults"
    for k in ("backbone_line_sim_over_model", "backbone_private_sim_over_model")
}
RUNS = {"backbone_line_sim_over_model": 1, "backbone_private_sim_over_model": 1}
