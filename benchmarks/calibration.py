"""Does calibration help? (issue 9 part 5): step-time error before and after `planner calibrate`.

Usage: python benchmarks/calibration.py [--data DIR] [--json FILE] [--loso-from VALIDATE_JSON]

(a) vTrain single node (../shared/validation/vtrain/ground_truth_single.csv, Megatron-DeepSpeed on
    A100): calibrate on the 2- and 4-GPU rows, predict the 8-GPU rows.
(b) Published runs (published_dev.yaml, deepspeed_runs.yaml), per source with at least two runs:
    calibrate on one run, predict the rest of that source; every run of the source takes its turn as
    the calibration run and the MAPEs are averaged.
Before = the catalog's constants (benchmarks/fit.py, fitted on all sources, so (b) is in-sample
before calibration: the gain it shows is a lower bound on the gain for a new cluster); after = the
constants `planner calibrate` refits (planner/calibrate.py: compute scale, network efficiency,
per-step overhead; those no calibration run responds to are kept).
(c) With --loso-from (the JSON `benchmarks/validate.py --json` writes): (b) again, but each source
    starts from the constants refitted without it (its leave-one-source-out refit), which is what a
    team on a cluster the catalog was never fitted to starts from.
(d) With --loso-from: whether planner/calibrate.py's priors weight one run as the LOSO residuals say
    they should (`weighting_check`).
(e) The planner's own jobs trained on one H100 (benchmarks/data/gpu_runs.yaml): calibrate on one of them,
    predict the rest, as (b); no fit has seen these runs, so 'before' is out of sample here.
(b) and (c) are printed twice: per source as the issue words it, then with each GPU type of a source
on its own (a calibration describes one cluster; `planner calibrate` refuses runs of two GPUs).
Two more columns say what more runs, or a perfect calibration, would give: '3 runs' calibrates on 3
runs of the group and predicts the rest; 'bound' divides the uncalibrated predictions of all the
group's runs (of its most common framework) by the one factor that gives the smallest MAPE: what is
left is the model's scatter within the cluster, which a single speed scale cannot remove.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from planner.calibrate import Run, current_constants, fit, predict  # noqa: E402
from planner.validation import cases, load_records  # noqa: E402
from gpu_runs import load_gpu_runs  # noqa: E402


def runs_of(records, overrides=None) -> list[Run]:
    prepared = cases(records)
    if overrides is not None:
        prepared = [overrides(c) for c in prepared]
    return [Run(r.id, r.source, c, float(r.measured_step_s), step_excludes=r.step_excludes)
            for r, c in zip(records, prepared)]


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


def per_source(records, loso_refits=None, by_cluster=False) -> dict:
    """(b), or (c) when `loso_refits` ({source: fitted values}, validate.py's JSON) is given. With
    `by_cluster`, each source is split by GPU type (a calibration describes one cluster: planner
    calibrate refuses runs of two GPUs), and groups of one run are left out."""
    out = {}
    by_source: dict[str, list] = {}
    for r in records:
        if r.source != "vtrain":
            by_source.setdefault(r.source, []).append(r)
    for source, recs in sorted(by_source.items()):
        overrides = None
        if loso_refits is not None:
            import fit as fitmod
            overrides = fitmod.make_overrides(loso_refits[source])
        groups: dict[str, list] = {}
        for run in runs_of(recs, overrides):
            key = f"{source} {run.case.cluster.gpu.name}" if by_cluster else source
            groups.setdefault(key, []).append(run)
        for key, runs in groups.items():
            if len(runs) < 2:
                continue
            before, after = [], []
            for i, one in enumerate(runs):
                rest = runs[:i] + runs[i + 1:]
                cal = fit([one])
                before.append(mape(predict(rest, cal.prior), rest))
                after.append(mape(predict(rest, cal.constants), rest))
            out[key] = {"runs": len(runs), "mape_before": float(np.mean(before)),
                        "mape_after": float(np.mean(after)),
                        "runs_improved": int(sum(a < b for a, b in zip(after, before))),
                        "mape_scale_bound": _bound(one_framework(runs)),
                        # three runs of two GPUs are one calibration planner calibrate refuses
                        "mape_after_3": after_k(runs, 3) if by_cluster else None}
    return out


def scale_bound(pred, runs) -> float:
    """The smallest MAPE any one factor applied to every prediction reaches on these runs: what a
    calibration of a single speed scale could reach if it knew the best factor. MAPE(c) = mean
    |r_i / c - 1| with r the predicted / measured ratios is linear in 1/c between two sorted ratios, so
    its minimum lies at one of them. What remains is the model's scatter within the cluster that one
    scale cannot remove (planner calibrate also fits network and overhead constants, which can change
    the shape of the errors across runs a little: see README)."""
    ratio = np.asarray(pred) / np.array([r.measured_step_s for r in runs])
    return float(min(np.mean(np.abs(ratio / c - 1.0)) for c in ratio))


def _bound(runs) -> float:
    return scale_bound(predict(runs, current_constants(runs[0].case)), runs)


def one_framework(runs) -> list:
    """The runs of the group's most common framework: a calibration describes one framework (planner
    calibrate refuses two), and torchtitan's eager and compiled runs are two."""
    by_fw: dict[str, list] = {}
    for r in runs:
        by_fw.setdefault(r.case.framework.name, []).append(r)
    return max(by_fw.values(), key=len)


def after_k(runs, k: int, subsets: int = 10):
    """MAPE on the other runs after calibrating on k of them (mean over up to `subsets` choices: runs
    i, i+s, i+2s with s = len // k, for i = 0, 1, ...); None where fewer than k + 1 runs exist. A
    calibration describes one framework too, so only the runs of the group's most common framework
    take part (`one_framework`)."""
    runs = one_framework(runs)
    if len(runs) <= k:
        return None
    stride = len(runs) // k
    out = []
    for i in range(min(subsets, stride)):
        pick = {i + j * stride for j in range(k)}
        cal = fit([runs[j] for j in sorted(pick)])
        rest = [r for j, r in enumerate(runs) if j not in pick]
        out.append(mape(predict(rest, cal.constants), rest))
    return float(np.mean(out))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=None)
    ap.add_argument("--json", default=None, help="also write the figures here")
    ap.add_argument("--loso-from", default=None,
                    help="validate.py --json output: also run (c), starting each source from its LOSO refit")
    args = ap.parse_args(argv)
    records = load_records(args.data)
    a = vtrain(records)
    print("(a) vTrain single node: calibrate on the 2- and 4-GPU rows, predict the 8-GPU rows")
    print(f"    calibration rows {a['train_runs']}: MAPE {a['train_mape_before']:.1%} -> {a['train_mape_after']:.1%}")
    print(f"    8-GPU rows {a['test_runs']}:       MAPE {a['test_mape_before']:.1%} -> {a['test_mape_after']:.1%}")
    print("    constants: " + ", ".join(f"{k} {v:.4g}" for k, v in a["constants"].items()))
    report = {"vtrain": a}
    loso = json.loads(Path(args.loso_from).read_text())["loso_refits"] if args.loso_from else None
    for label, title, refits in (("per_source", "(b) per published source, from the catalog (in-sample; a "
                                                "source may mix GPU types, which planner calibrate refuses)", None),
                                 ("per_source_loso", "(c) per published source, from its leave-one-source-out "
                                                     "refit (a cluster the catalog never saw; GPU types mixed)", loso)):
        if label == "per_source_loso" and refits is None:
            continue
        report[label] = section(title, per_source(records, refits))
        report[label + "_by_gpu"] = section(title + ", each GPU type of the source on its own (one cluster)",
                                            per_source(records, refits, by_cluster=True), unit="clusters")
    # (e) the planner's own jobs on one H100 (benchmarks/data/gpu_runs.yaml): a cluster no fit has seen
    report["gpu_runs"] = section("(e) the planner's own jobs trained on one H100 (benchmarks/data/gpu_runs.yaml, "
                                 "never fitted)", per_source(load_gpu_runs(), by_cluster=True),
                                 unit="clusters")
    if args.loso_from:
        w = weighting_check(json.loads(Path(args.loso_from).read_text())["loso_predictions"], records)
        report["weighting"] = w
        print(f"(d) calibrate.py's weighting against the LOSO residuals (per source and GPU, {w['clusters']} "
              f"clusters): spread of the clusters' mean log errors {w['tau']:.3f}, scatter inside a cluster "
              f"{w['sigma']:.3f} (median {w['sigma_median']:.3f}); one run moves the compute scale "
              f"{w['weight_data']:.2f} of the gap by these, {w['weight_priors']:.2f} by calibrate.py's priors")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    return 0


def weighting_check(loso_predictions: dict, records) -> dict:
    """Empirical-Bayes check of planner/calibrate.py's weighting: tau, the spread of the mean log error
    of the clusters (source x GPU) beyond what their own scatter explains, and sigma, the scatter of
    runs around their cluster's mean (clusters weighted equally), from the leave-one-source-out
    predictions; one run moves a log scale by tau^2 / (tau^2 + sigma^2) of its gap, against
    prior^2 / (prior^2 + RUN_SIGMA^2) for the compute scale's prior in calibrate.py."""
    from planner.calibrate import CONSTANTS, RUN_SIGMA
    gpu = {r.id: r.case["cluster"]["gpu"] for r in records}
    groups: dict = {}
    for source, rows in loso_predictions.items():
        for rid, pred, measured in rows:
            groups.setdefault((source, gpu.get(rid, "?")), []).append(np.log(pred / measured))
    multi = [np.array(v) for v in groups.values() if len(v) >= 2]
    means = np.array([v.mean() for v in multi])
    within = np.array([v.var(ddof=1) for v in multi])
    sizes = np.array([len(v) for v in multi])
    sigma2 = float(within.mean())
    tau2 = max(float(np.var(means, ddof=1) - np.mean(within / sizes)), 0.0)
    prior = next(c.sigma for c in CONSTANTS if c.name == "compute_scale")
    return {"clusters": len(multi), "tau": tau2 ** 0.5, "sigma": sigma2 ** 0.5,
            "sigma_median": float(np.median(within)) ** 0.5, "weight_data": tau2 / (tau2 + sigma2),
            "weight_priors": prior ** 2 / (prior ** 2 + RUN_SIGMA ** 2)}


def mean_within(groups: dict, key: str) -> tuple[float, int]:
    """Mean of `key` over the groups, and how many groups have it at 5% or less."""
    values = [v[key] for v in groups.values()]
    return float(np.mean(values)), sum(x <= 0.05 for x in values)


def section(title, b, unit="sources") -> dict:
    print(title + ": calibrate on one run, predict the rest (mean over the choice of run)")
    print("    ('3 runs': calibrated on 3 of its runs; 'bound': the error left with the best single speed factor"
          " for all its runs (one framework), the model's own scatter in that cluster that one scale cannot remove)")
    print(f"    {'source':28s} {'runs':>4s} {'before':>8s} {'after':>8s}  better  {'3 runs':>7s} {'bound':>7s}")
    for s, v in b.items():
        three = "-" if v["mape_after_3"] is None else f"{v['mape_after_3']:.1%}"
        print(f"    {s:28s} {v['runs']:4d} {v['mape_before']:8.1%} {v['mape_after']:8.1%}  "
              f"{v['runs_improved']:>3d}/{v['runs']:<3d} {three:>7s} {v['mape_scale_bound']:7.1%}")
    mb, _ = mean_within(b, "mape_before")
    ma, within = mean_within(b, "mape_after")
    mbound, within_bound = mean_within(b, "mape_scale_bound")
    print(f"    mean of {unit}: {mb:.1%} -> {ma:.1%}; {within} of {len(b)} {unit} within 5% after; "
          f"bound {mbound:.1%}, {within_bound} of {len(b)} within 5% even with the exact factor")
    out = {unit: b, "mean_before": mb, "mean_after": ma, f"{unit}_within_5pct": within,
           "mean_scale_bound": mbound, f"{unit}_within_5pct_at_bound": within_bound}
    three = {s: v for s, v in b.items() if v["mape_after_3"] is not None}
    if three:
        one3, w1 = mean_within(three, "mape_after")
        m3, w3 = mean_within(three, "mape_after_3")
        print(f"    the {len(three)} {unit} with at least 4 runs: one calibration run {one3:.1%} ({w1} within 5%), "
              f"three {m3:.1%} ({w3} within 5%)")
        out.update({"groups_with_3": len(three), "mean_after_1_same_groups": one3, "mean_after_3": m3,
                    "within_5pct_after_3": w3})
    return out


if __name__ == "__main__":
    sys.exit(main())
