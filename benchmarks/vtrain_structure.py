"""How vTrain's single-node iteration times are built: exactly linear in layers and micro-batches.

Usage: python benchmarks/vtrain_structure.py [--csv PATH]

Within each (hidden, tp, micro-batch, pp, dp) group of ../shared/validation/vtrain/ground_truth_single.csv
the rows vary the layers L (12-24) and the micro-batches per step n (global batch / (micro-batch x dp)).
Wall-clock step times of real runs scatter by a millisecond or more; these fit

    t = c0 + c_mb n + x n L + c_L L

to a few microseconds, so they were assembled from per-layer and per-micro-batch costs. The intercept c0
is the per-step constant the figures carry: 0.2-11 ms, far below the 20-30 ms per-step overhead
(grad-norm, loss-scale check, logging) that benchmarks/fit.py finds across the other sources. That is
why planner/validation.py compares these rows with the model's step less Framework.iteration_overhead_s.
"""
from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner.validation import validation_dir  # noqa: E402


def group_fits(path=None) -> list[dict]:
    """One dict per group with more rows than the 4 coefficients: its key, rows, the largest absolute
    residual of the linear fit (seconds) and the intercept c0 (seconds)."""
    path = path or validation_dir() / "vtrain" / "ground_truth_single.csv"
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))[1:]
    groups: dict[tuple, list] = {}
    for gpus, gbs, mbs, h, _heads, layers, _s, tp, dp, pp, ms in (r for r in rows if r):
        n = int(gbs) // (int(mbs) * int(dp))
        groups.setdefault((int(h), int(tp), int(mbs), int(pp), int(dp)), []).append(
            (int(layers), n, float(ms) / 1e3))
    out = []
    for key, members in sorted(groups.items()):
        a = np.array([[1.0, n, n * layers, layers] for layers, n, _ in members])
        t = np.array([ms for _, _, ms in members])
        if len(members) <= a.shape[1] or np.linalg.matrix_rank(a) < a.shape[1]:
            continue                      # as many unknowns as rows: any numbers would fit exactly
        coef = np.linalg.lstsq(a, t, rcond=None)[0]
        out.append({"group": key, "rows": len(members), "max_residual_s": float(np.max(np.abs(a @ coef - t))),
                    "c0_s": float(coef[0])})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", default=None, help="default: ../shared/validation/vtrain/ground_truth_single.csv")
    args = ap.parse_args(argv)
    fits = group_fits(args.csv)
    res = np.array([f["max_residual_s"] for f in fits]) * 1e3
    c0 = np.array([f["c0_s"] for f in fits]) * 1e3
    print(f"{len(fits)} groups of 8-16 rows (hidden, tp, micro-batch, pp, dp), {sum(f['rows'] for f in fits)} rows")
    print(f"largest residual of t = c0 + c_mb n + x n L + c_L L per group: median {np.median(res) * 1e3:.1f} us, "
          f"90th percentile {np.percentile(res, 90) * 1e3:.1f} us, max {res.max():.2f} ms")
    print(f"per-step constant c0: min {c0.min():.2f} ms, median {np.median(c0):.2f} ms, max {c0.max():.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
