"""Does calibration help? (issue 9 part 5): step-time error before and after `planner calibrate`.

Usage: python benchmarks/calibration.py [--data DIR] [--json FILE]

(a) vTrain single node (../shared/validation/vtrain/ground_truth_single.csv, Megatron-DeepSpeed on
    A100): calibrate on the 2- and 4-GPU rows, predict the 8-GPU rows.
(b) Published runs (published_dev.yaml, deepspeed_runs.yaml), per source with at least two runs:
    calibrate on one run, predict the rest of that source; every run of the source takes its turn as
    the calibration run and the MAPEs are averaged.
Before = the catalog's constants (benchmarks/fit.py, fitted on all sources, so (b) is in-sample
before calibration: the gain it shows is a lower bound on the gain for a new cluster); after = the
constants `planner calibrate` refits (planner/calibrate.py: compute scale, network efficiency,
per-step overhead).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner.calibrate import Run, fit, predict  # noqa: E402
from planner.validation import cases, load_records  # noqa: E402


def runs_of(records) -> list[Run]:
    return [Run(r.id, r.source, c, float(r.measured_step_s)) for r, c in zip(records, cases(records))]


def mape(pred, runs) -> float:
    measured = np.array([r.measured_step_s for r in runs])
    return float(np.mean(np.abs(np.asarray(pred) / measured - 1.0)))


def vtrain(records) -> dict:
    runs = runs_of([r for r in records if r.source == "vtrain"])
    train = [r for r in runs if r.case.layout.world in (2, 4)]
    test = [r for r in runs if r.case.layout.world == 8]
    cal = fit(train)
    return {"train_runs": len(train), "test_runs": len(test), "constants": cal.constants,
            "train_mape_before": mape(predict(train, cal.prior), train),
            "train_mape_after": mape(predict(train, cal.constants), train),
            "test_mape_before": mape(predict(test, cal.prior), test),
            "test_mape_after": mape(predict(test, cal.constants), test)}


def per_source(records) -> dict:
    out = {}
    by_source: dict[str, list] = {}
    for r in records:
        if r.source != "vtrain":
            by_source.setdefault(r.source, []).append(r)
    for source, recs in sorted(by_source.items()):
        runs = runs_of(recs)
        if len(runs) < 2:
            continue
        before, after = [], []
        for i, one in enumerate(runs):
            rest = runs[:i] + runs[i + 1:]
            cal = fit([one])
            before.append(mape(predict(rest, cal.prior), rest))
            after.append(mape(predict(rest, cal.constants), rest))
        out[source] = {"runs": len(runs), "mape_before": float(np.mean(before)), "mape_after": float(np.mean(after)),
                       "runs_improved": int(sum(a < b for a, b in zip(after, before)))}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=None)
    ap.add_argument("--json", default=None, help="also write the figures here")
    args = ap.parse_args(argv)
    records = load_records(args.data)
    a = vtrain(records)
    print("(a) vTrain single node: calibrate on the 2- and 4-GPU rows, predict the 8-GPU rows")
    print(f"    calibration rows {a['train_runs']}: MAPE {a['train_mape_before']:.1%} -> {a['train_mape_after']:.1%}")
    print(f"    8-GPU rows {a['test_runs']}:       MAPE {a['test_mape_before']:.1%} -> {a['test_mape_after']:.1%}")
    print("    constants: " + ", ".join(f"{k} {v:.4g}" for k, v in a["constants"].items()))
    b = per_source(records)
    print("(b) per published source: calibrate on one run, predict the rest (mean over the choice of run)")
    print(f"    {'source':16s} {'runs':>4s} {'before':>8s} {'after':>8s}  better")
    for s, v in b.items():
        print(f"    {s:16s} {v['runs']:4d} {v['mape_before']:8.1%} {v['mape_after']:8.1%}  "
              f"{v['runs_improved']}/{v['runs']}")
    mb = float(np.mean([v["mape_before"] for v in b.values()]))
    ma = float(np.mean([v["mape_after"] for v in b.values()]))
    within = sum(v["mape_after"] <= 0.05 for v in b.values())
    print(f"    mean of sources: {mb:.1%} -> {ma:.1%}; {within} of {len(b)} sources within 5% after")
    if args.json:
        Path(args.json).write_text(json.dumps({"vtrain": a, "per_source": b, "mean_before": mb, "mean_after": ma},
                                              indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
