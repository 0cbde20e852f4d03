"""Estimator speed: one scalar estimate, and layouts per second of the vectorised estimator.

Usage: python benchmarks/speed.py [--rows 1000000]
"""
import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from costmodels import Layout, LayoutBatch, catalog, estimate, estimate_batch  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    args = ap.parse_args(argv)
    model = catalog.load_model("llama3.1-70b")
    cluster = catalog.load_cluster("H100-SXM", num_gpus=1024)
    fw = catalog.load_framework("megatron-deepspeed")
    layout = Layout(tp=8, pp=8, dp=16, mbs=1, gbs=1024, seq_len=8192, zero=1, sequence_parallel=True)
    for _ in range(50):
        estimate(model, cluster, fw, layout)
    n = 2000
    t = time.perf_counter()
    for _ in range(n):
        estimate(model, cluster, fw, layout)
    one = (time.perf_counter() - t) / n
    print(f"one estimate: {one * 1e3:.3f} ms (mean of {n})")

    rng = np.random.default_rng(0)
    N = args.rows
    tp = rng.choice([1, 2, 4, 8], N)
    pp = rng.choice([1, 2, 4, 8, 16], N)
    cp = rng.choice([1, 2], N)
    batch = LayoutBatch.from_columns(
        tp=tp, pp=pp, cp=cp, dp=1024 // (tp * pp * cp), mbs=rng.choice([1, 2, 4], N), gbs=np.full(N, 4096),
        seq_len=np.full(N, 8192), zero=rng.integers(0, 4, N), recompute=rng.integers(0, 3, N),
        sequence_parallel=rng.integers(0, 2, N).astype(bool), precision=rng.choice([1, 2, 3], N),
        grad_comm=rng.integers(0, 3, N), offload_optimizer=rng.integers(0, 2, N))
    estimate_batch(model, cluster, fw, batch)       # warm-up: page in the output arrays
    best = 0.0
    for _ in range(3):
        t = time.perf_counter()
        estimate_batch(model, cluster, fw, batch)
        best = max(best, N / (time.perf_counter() - t))
    print(f"vectorised: {best:,.0f} layouts/s ({N:,} layouts, best of 3)")
    print(f"targets: one estimate < 1 ms: {'yes' if one < 1e-3 else 'NO'}; "
          f">= 1,000,000 layouts/s: {'yes' if best >= 1e6 else 'NO'}")


if __name__ == "__main__":
    main()
