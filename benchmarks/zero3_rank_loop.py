"""Host time of early DeepSpeed ZeRO-3's per-rank loop, in counted kernels (the anchor of
`zero3_rank_loop.host` in costmodels/catalog/frameworks/megatron-lm.yaml).

Usage: python benchmarks/zero3_rank_loop.py [--ranks 1024] [--repeats 9]

DeepSpeed's first ZeRO-3 (v0.3.13, March 2021, the one Narayanan et al. 2021 compared against in
their Table 2) loops over every data-parallel rank in Python inside each collective: a weight
all-gather (`partition_parameters.py` `_allgather_param`, v0.3.13 lines 596-636, the path
`fetch_sub_module` takes) and every parameter's gradient reduce-scatter (`_reduce_scatter_gradient`,
lines 733-770) each build a list of one `narrow()` view per rank for torch's list collective, which
then copies each rank's piece with its own kernel (which the cost model prices at the GPU's per-kernel
time, not measured here). So each call costs time in proportion to the number of ranks: milliseconds
per call on a thousand GPUs. DeepSpeed made the gathers flat (`_all_gather_base`) in v0.5.5 (November
2021, PR #1188) and the reduce-scatters (`reduce_scatter_coalesced`) in v0.6.0 (PR #1453).

This script runs that loop on tiny CPU tensors (what remains is Python and the dispatcher) and divides
by the host time of one counted kernel of an eager Megatron layer measured the same way
(benchmarks/host_overhead.py), on the same CPU: the share is what the cost model multiplies by
`host_overhead_s`, the fitted per-kernel host time. Run on an idle machine.
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))


def measure(ranks: int = 1024, repeats: int = 9) -> dict:
    import torch

    torch.set_num_threads(1)
    part = partition_size = 16
    flat = torch.empty(ranks * part)
    grad = torch.empty(ranks * part)

    import tempfile

    import torch.distributed as dist
    if not dist.is_initialized():       # a one-process gloo group: get_rank() as in the loop below
        dist.init_process_group("gloo", init_method=f"file://{tempfile.mkdtemp()}/pg", rank=0, world_size=1)
    group = dist.new_group([0])

    def gather():
        # v0.3.13 _allgather_param (lines 623-627): one view of the flat buffer per rank, and the rank test
        partitions = []
        for i in range(ranks):
            partitions.append(flat.narrow(0, partition_size * i, partition_size))
            if i == dist.get_rank(group=group):
                partitions[i].data.copy_(flat[:partition_size], non_blocking=True)
        return partitions

    def reduce():
        # v0.3.13 _reduce_scatter_gradient: one view of the gradient per rank
        inputs = []
        for i in range(ranks):
            inputs.append(grad.view(-1).narrow(0, i * part, part))
        return inputs

    out = {}
    for name, fn in (("gather", gather), ("reduce", reduce)):
        fn()
        best = math.inf
        for _ in range(repeats):
            t0 = time.perf_counter()
            for _ in range(5):
                fn()
            best = min(best, (time.perf_counter() - t0) / 5 / ranks)
        out[f"{name}_per_rank_s"] = best
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=9)
    args = ap.parse_args(argv)
    import host_overhead

    loops = measure(args.ranks, args.repeats)
    kernel = host_overhead.measure(layers=24, repeats=7)
    per_kernel = 0.5 * (kernel["per_kernel_plain_s"] + kernel["per_kernel_recompute_s"])
    print(f"CPU {kernel['cpu']}, torch {kernel['torch']}, one thread")
    print(f"  one counted kernel of an eager Megatron layer: {per_kernel * 1e6:5.2f} us "
          f"(mean of {kernel['per_kernel_plain_s'] * 1e6:.2f} plain and "
          f"{kernel['per_kernel_recompute_s'] * 1e6:.2f} with checkpointing)")
    for name in ("gather", "reduce"):
        s = loops[f"{name}_per_rank_s"]
        print(f"  {name:6s} loop: {s * 1e6:5.2f} us per rank -> share {s / per_kernel:.2f} of a counted kernel")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
