"""``wanreduce unpack``: the RESULTs of a capture back to a tensor (.npy).

RESULT frames are grouped by the aggregator site that sent them (header ``src``), job and round, and each
group's chunks assembled into one tensor (repeats of a RESULT, one per destination, count once). The
tensor written is what the site's hosts hold after that round, the sum divided by the group size in the
wire dtype, or with ``--sum`` the sum itself. It is flat (the wire has no shape), in the wire dtype;
bfloat16 is saved the way numpy saves ``ml_dtypes.bfloat16`` (a 2-byte void type).
"""

import io

import numpy as np

from ..host.replay import capture_results
from ..spec.errors import WanreduceError
from ._common import (
    Outputs,
    add_force_option,
    add_json_option,
    add_output_option,
    add_rank_option,
    add_results_capture,
    header_field,
    print_json,
)

__all__ = ["register", "run", "averaged"]


def averaged(result_set):
    """What the hosts of the RESULT's site hold after the round: the sum / the number of contributors."""
    values = result_set.values
    size = bin(result_set.bitmap).count("1")
    with np.errstate(all="ignore"):
        return (values / values.dtype.type(size)).astype(values.dtype)


def register(sub):
    p = sub.add_parser(
        "unpack",
        help="RESULT frames of a capture back to a tensor (.npy)",
        description="Assemble the RESULTs one aggregator site sent for one round into a flat tensor in the "
        "wire dtype: by default what the site's hosts hold after the round (sum / group size), with --sum "
        "the sum. Frames that are not RESULTs are skipped.",
    )
    add_results_capture(p)
    add_output_option(
        p, "-o", "--output", metavar="OUT.npy", required=True, help="tensor to write, - for stdout (required)"
    )
    add_rank_option(p, "the aggregator site whose RESULTs to take (default: the only one in the capture)")
    p.add_argument(
        "--job",
        type=header_field("job"),
        default=None,
        help="job id (default: the only one in the capture)",
    )
    p.add_argument(
        "--round",
        type=header_field("round"),
        default=None,
        help="round (default: the last one in the capture)",
    )
    p.add_argument("--sum", action="store_true", help="write the RESULT sum, not sum / group size")
    add_force_option(p, "OUT.npy")
    add_json_option(p)
    p.set_defaults(func=run)


def _pick(sets, attr, wanted, option, what):
    values = sorted({getattr(s, attr) for s in sets})
    if wanted is None:
        if len(values) > 1 and attr != "round":
            raise WanreduceError(
                f"the capture holds RESULTs of {what}s {', '.join(map(str, values))}; "
                f"choose one with {option}"
            )
        wanted = values[-1]
    elif wanted not in values:
        raise WanreduceError(
            f"the capture holds no RESULTs of {what} {wanted} (it has "
            + (f"only {what} {values[0]})" if len(values) == 1 else f"{what}s {', '.join(map(str, values))})")
        )
    return [s for s in sets if getattr(s, attr) == wanted]


def run(args):
    outs = Outputs(force=args.force, inputs=[args.input], json=args.json)
    sets, ignored = capture_results(args.input)
    sets = _pick(sets, "site", args.rank, "--rank", "site")
    sets = _pick(sets, "job", args.job, "--job", "job")
    (chosen,) = _pick(sets, "round", args.round, "--round", "round")
    # Checked after the options that pick from the input, so a wrong --rank is named first.
    path = outs.add(args.output, stdout="binary")
    tensor = chosen.values if args.sum else averaged(chosen)
    buf = io.BytesIO()
    np.save(buf, tensor, allow_pickle=False)
    with outs.commit():
        outs.write_bytes(path, buf.getvalue())
    size = bin(chosen.bitmap).count("1")
    if args.json:
        print_json(
            {
                "output": str(path),
                "elements": int(tensor.size),
                "dtype": chosen.dtype.label,
                "value": "sum" if args.sum else "mean",
                "group_size": size,
                "results": chosen.chunks,
                "site": chosen.site,
                "job": chosen.job,
                "round": chosen.round,
                "group": chosen.group,
                "skipped": ignored,
            }
        )
        return 0
    what = "sum" if args.sum else f"sum / {size}"
    print(
        f"{outs.shown(path)}: {tensor.size} {chosen.dtype.label} elements ({what}) from {chosen.chunks} "
        f"RESULTs of site {chosen.site}, job {chosen.job}, round {chosen.round}, group {chosen.group}"
        + (f"; {ignored} frames that are not RESULTs skipped" if ignored else ""),
        file=outs.log,
    )
    return 0
