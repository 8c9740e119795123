"""``wanreduce pack``: a tensor becomes CONTRIB frames in a pcap file."""

from ..host.frames import build_frames
from ..host.packet import pack_tensor
from ..host.pcap import write_pcap
from ..spec import addressing
from ..spec.errors import WanreduceError
from ..spec.protocol import DType
from ._common import (
    DEFAULT_CHUNK_BYTES,
    Outputs,
    add_chunk_option,
    add_dtype_option,
    add_force_option,
    add_json_option,
    add_output_option,
    add_port_option,
    add_rank_option,
    chunk_elems_of,
    flattened,
    header_field,
    int_option,
    load_npy,
    print_json,
)

__all__ = ["register", "run"]


def register(sub):
    p = sub.add_parser(
        "pack",
        help="turn a tensor (.npy) into CONTRIB frames (.pcap)",
        description="Pack a tensor into wanreduce CONTRIB packets, one per chunk, wrapped in "
        "Ethernet/IPv4/UDP and written as a pcap. Values are rounded to the wire dtype (nearest even); a "
        "finite value too large for it is an error.",
    )
    p.add_argument(
        "tensor",
        metavar="TENSOR.npy",
        help="the tensor to send (any shape, floating point; a bfloat16 array saved from "
        "ml_dtypes is read as bf16)",
    )
    add_output_option(
        p,
        "-o",
        "--output",
        metavar="OUT.pcap",
        required=True,
        help="pcap file to write, - for stdout (required)",
    )
    add_dtype_option(p)
    add_rank_option(p, "this site's rank, 0..63 (required)", required=True)
    p.add_argument("--job", type=header_field("job"), default=0, help="job id (default: 0)")
    p.add_argument(
        "--round", type=header_field("round"), default=0, help="schedule round number (default: 0)"
    )
    p.add_argument(
        "--group", type=header_field("group"), default=0, help="group id within the round (default: 0)"
    )
    add_chunk_option(p, default_help=f"default: {DEFAULT_CHUNK_BYTES}, 256 fp32 elements")
    p.add_argument(
        "--first-chunk",
        type=header_field("chunk", "--first-chunk"),
        default=0,
        help="index of the first chunk (default: 0)",
    )
    int_option(
        p,
        "--period",
        1,
        addressing.MAX_PERIOD,
        default=1,
        help="rounds in the schedule's period; picks the round's multicast group (default: 1)",
    )
    p.add_argument("--src-mac", default=None, help="source MAC (default: the rank's host MAC, PROTOCOL.md)")
    p.add_argument(
        "--dst-mac",
        default=None,
        help="destination MAC (default: the multicast MAC of the destination address)",
    )
    p.add_argument("--src-ip", default=None, help="source IPv4 (default: the rank's host address)")
    p.add_argument(
        "--dst-ip",
        default=None,
        help="destination IPv4 (default: the CONTRIB multicast group of (job, round mod period, "
        "group) in PROTOCOL.md's addressing plan; needs --group 0..255, the address's last "
        "octet; give --dst-ip and --dst-mac for larger ids)",
    )
    add_port_option(p, "UDP source and destination port")
    p.add_argument(
        "--no-udp-checksum",
        action="store_true",
        help="write 0 (not computed) in the UDP checksum (default: compute it)",
    )
    add_force_option(p, "OUT.pcap")
    add_json_option(p)
    p.set_defaults(func=run)


def run(args):
    if args.group > 0xFF and (args.dst_ip is None or args.dst_mac is None):
        # The default multicast address carries the group id in one octet; wrapping it would send two
        # groups to the same address.
        raise WanreduceError(
            f"--group {args.group} does not fit the default multicast address "
            "(group 0..255); give --dst-ip and --dst-mac"
        )
    dtype = DType.from_label(args.dtype)
    chunk_elems = chunk_elems_of(args, dtype, default=DEFAULT_CHUNK_BYTES)
    outs = Outputs(force=args.force, inputs=[args.tensor], json=args.json)
    out = outs.add(args.output, stdout="binary")
    tensor = load_npy(args.tensor, void16_as_bf16=True)
    payloads = pack_tensor(
        tensor,
        dtype=dtype,
        rank=args.rank,
        job=args.job,
        round=args.round,
        group=args.group,
        chunk_elems=chunk_elems,
        first_chunk=args.first_chunk,
    )
    dst_ip = args.dst_ip or addressing.contrib_group_ip(
        job=args.job, round=args.round, group=args.group, period=args.period
    )
    where = dict(
        src_mac=args.src_mac or addressing.host_mac(args.rank),
        dst_mac=args.dst_mac or addressing.multicast_mac(dst_ip),
        src_ip=args.src_ip or addressing.host_ip(args.rank),
        dst_ip=dst_ip,
        sport=args.port,
        dport=args.port,
        udp_checksum=not args.no_udp_checksum,
    )
    blocks = [build_frames(b, **where) for b in payloads.blocks]
    frames = (row for block in blocks for row in block)
    with outs.commit():
        write_pcap(outs.temp(out), frames)
    if args.json:
        print_json(
            {
                "output": str(out),
                "frames": len(payloads),
                "elements": int(tensor.size),
                "shape": list(tensor.shape),
                "dtype": dtype.label,
                "chunk_elems": chunk_elems,
                "rank": args.rank,
                "job": args.job,
                "round": args.round,
                "group": args.group,
                "dst_ip": dst_ip,
            }
        )
        return 0
    print(
        f"{outs.shown(out)}: {len(payloads)} CONTRIB frames, {tensor.size} {dtype.label} elements"
        f"{flattened(tensor.shape)}, "
        f"rank {args.rank}, job {args.job}, round {args.round}, group {args.group}",
        file=outs.log,
    )
    return 0
