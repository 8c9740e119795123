"""Packer and unpacker throughput: tensor bytes per second, 256 MiB fp32 in 1 KiB payload chunks, in memory.

Single-threaded numpy (the packer has no threads of its own). Reports the median of several repetitions.
"""

import statistics
import time

import numpy as np

from wanreduce.host.packet import pack_tensor, unpack_payloads
from wanreduce.spec.protocol import DType

TENSOR_BYTES = 256 << 20
CHUNK_ELEMS = 256  # 1 KiB of fp32
REPEATS = 5


def run():
    tensor = np.random.default_rng(0).standard_normal(TENSOR_BYTES // 4).astype(np.float32)
    pack_times, unpack_times = [], []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        payloads = pack_tensor(tensor, dtype=DType.FP32, rank=1, chunk_elems=CHUNK_ELEMS)
        t1 = time.perf_counter()
        values, _ = unpack_payloads(payloads, dtype=DType.FP32)
        t2 = time.perf_counter()
        pack_times.append(t1 - t0)
        unpack_times.append(t2 - t1)
        if not np.array_equal(values.view(np.uint32), tensor.view(np.uint32)):
            raise AssertionError("the unpacked tensor differs from the packed one")
        del payloads, values
    return {
        "pack_GBps": round(TENSOR_BYTES / statistics.median(pack_times) / 1e9, 3),
        "unpack_GBps": round(TENSOR_BYTES / statistics.median(unpack_times) / 1e9, 3),
    }


NOTES = {
    "pack_GBps": f"median of {REPEATS} timed repetitions on one core; the load average is in the record",
    "unpack_GBps": f"median of {REPEATS} timed repetitions on one core; the load average is in the record",
}
RUNS = {"pack_GBps": REPEATS, "unpack_GBps": REPEATS}
