"""Predicted vs measured step time and memory, out of sample first.

Usage: python benchmarks/validate.py [--data DIR] [--all] [--no-loso] [--json FILE]

Three figures per source, side by side:
  * LOSO (the headline): leave-one-source-out. For each source, benchmarks/fit.py refits every
    constant on the other sources only, then predicts the left-out source.
  * in-sample: the catalog's constants, fitted on all sources (the figure a fit flatters).
  * held-out: benchmarks/data/heldout_runs.yaml, published runs that no fit ever sees, predicted
    with the catalog's constants and each run's framework profile.
  * the planner's own jobs: benchmarks/data/gpu_runs.yaml, its emitted launch.sh trained on one H100
    (benchmarks/gpu_probe.py), predicted again with the catalog's constants; never fitted.
Memory: the readings that hold the allocator's cache, leave-one-source-out (benchmarks/fit.py fits the
allocator's overhead on them) beside in-sample; and every memory error where measured, published runs
predicted not to fit, same-model pair order.
"""
from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from gpu_runs import load_gpu_runs  # noqa: E402
from heldout import load_heldout  # noqa: E402
from costmodels import bands  # noqa: E402
from costmodels.estimate import estimate  # noqa: E402
from planner.validation import TARGETS, cases, evaluate, format_table, load_records, summarize  # noqa: E402

LOSO_TARGETS = {"mean_of_sources": 0.07, "per_source": 0.12}


def _loso_one(args):
    """Refit without `source` (starting from the full fit), predict `source`."""
    source, data, x0 = args
    import fit as fitmod
    records = load_records(data)
    train = [r for r in records if r.source != source]
    test = [r for r in records if r.source == source]
    values = fitmod.fit(train, x0=x0, iterations=30)
    results = evaluate(test, overrides=fitmod.make_overrides(values))
    return source, [(r.record.id, r.predicted_step_s, r.record.measured_step_s) for r in results], values.tolist()


def leave_one_source_out(records, data=None, workers=2):
    """{source: [(id, predicted, measured)]} and the refitted constants per left-out source."""
    import fit as fitmod
    from planner.validation import cases
    x0 = fitmod.current_values(cases(records)).tolist()
    sources = sorted({r.source for r in records})
    with ProcessPoolExecutor(max_workers=workers) as pool:
        out = list(pool.map(_loso_one, [(s, data, x0) for s in sources]))
    return {s: rows for s, rows, _ in out}, {s: v for s, _, v in out}


def memory_out_of_sample(records, report):
    """Peak memory with the allocator's cache (max reserved / nvidia-smi readings), leave-one-source-out:
    benchmarks/fit.py's memory constants refitted without each source, beside in sample. Seconds."""
    import fit as fitmod
    mem = fitmod.memory_out_of_sample(records)
    if not mem:
        return
    report.update({"memory_loso": mem["loso"], "memory_in_sample": mem["in_sample"],
                   "memory_loso_refits": mem["refits"], "memory_loso_predictions": mem["predictions"]})
    print()
    print("peak memory with the allocator's cache (max reserved / nvidia-smi), the allocator overhead refitted "
          "without each source:")
    print(f"{'source':16s} {'runs':>5s} {'LOSO':>7s} {'in-sample':>10s}")
    for s, n in mem["runs"].items():
        print(f"{s:16s} {n:5d} {mem['loso'][s] * 100:6.1f}% {mem['in_sample'][s] * 100:9.1f}%")


def gpu_runs_section(report):
    """The planner's own jobs trained on a GPU: measured beside predicted, step time and allocated memory."""
    runs = evaluate(load_gpu_runs())
    print()
    print("the planner's own jobs trained on one H100 (benchmarks/data/gpu_runs.yaml; never fitted):")
    print(f"{'run':34s} {'measured s':>10s} {'predicted s':>11s} {'error':>7s}   allocated GiB (measured / predicted)")
    for r in runs:
        print(f"{r.record.id[:34]:34s} {r.record.measured_step_s:10.4g} {r.predicted_step_s:11.4g} "
              f"{r.step_error * 100:+6.1f}%   {r.record.measured_memory_gib:5.1f} / {r.predicted_memory_gib:5.1f} "
              f"{r.memory_error * 100:+6.1f}%")
    step = [abs(r.step_error) for r in runs]
    mem = [r.memory_error for r in runs]
    table = bands.load_bands()
    inside = 0
    for r in runs:
        case = cases([r.record])[0]
        band = bands.step_time_band(case.model, case.cluster, case.framework, case.layout,
                                    estimate(case.model, case.cluster, case.framework, case.layout), table)
        inside += band.low <= r.record.measured_step_s <= band.high
    report["gpu_runs"] = {r.record.id: {"step_error": r.step_error, "memory_error": r.memory_error} for r in runs}
    report["gpu_runs_in_band"] = [inside, len(runs)]
    order = summarize(runs)
    report["gpu_runs_pair_order"] = [order["pair_order_right"], order["pairs"]]
    by_measured = sorted(runs, key=lambda r: r.record.measured_step_s)
    first, second = sorted(runs, key=lambda r: r.predicted_step_s)[:2]
    report["gpu_runs_pick_measured_rank"] = by_measured.index(first) + 1
    print(f"  {len(runs)} runs: step time MAPE {np.mean(step) * 100:.1f}% (worst {max(step) * 100:.1f}%), "
          f"80% band held for {inside} of {len(runs)}; "
          f"allocated memory MAPE {np.mean(np.abs(mem)) * 100:.1f}% (worst {max(mem, key=abs) * 100:+.1f}%)")
    print(f"  ranking: {order['pair_order_right'] * 100:.0f}% of {order['pairs']} pairs (measured gap > 5%) "
          f"in the measured order; the predicted fastest, {first.record.id}, is measured "
          f"#{report['gpu_runs_pick_measured_rank']} of {len(runs)}; the predicted #2, {second.record.id}, "
          f"is measured #{by_measured.index(second) + 1}")


def mape(rows):
    return float(np.mean([abs(p / m - 1.0) for _, p, m in rows]))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=None)
    ap.add_argument("--all", action="store_true", help="list every vTrain row too")
    ap.add_argument("--no-loso", action="store_true", help="skip the leave-one-source-out refits (fast)")
    ap.add_argument("--json", default=None, help="also write every figure to this JSON file")
    args = ap.parse_args(argv)
    records = load_records(args.data)
    results = evaluate(records)
    summary = summarize(results)
    print(format_table(results, summary, per_record_vtrain=args.all))
    print()
    report = {"in_sample": {s: v for s, v in summary["mape_by_source"].items()}}

    loso = None
    if not args.no_loso:
        print("leave-one-source-out: refitting without each source (about a minute per source) ...",
              flush=True)
        loso, refits = leave_one_source_out(records, args.data)
        report["loso"] = {s: mape(rows) for s, rows in loso.items()}
        report["loso_refits"] = refits
        report["loso_predictions"] = loso     # {source: [[id, predicted s, measured s]]}: benchmarks/bands.py
        worst = max(((i, p / m - 1.0, s) for s, rows in loso.items() for i, p, m in rows),
                    key=lambda t: abs(t[1]))
        report["loso_worst"] = worst

    print(f"{'source':16s} {'runs':>5s} {'LOSO':>7s} {'in-sample':>10s}")
    for s, v in summary["mape_by_source"].items():
        lo = f"{report['loso'][s] * 100:6.1f}%" if loso else "      -"
        print(f"{s:16s} {summary['count_by_source'][s]:5d} {lo} {v * 100:9.1f}%")
    in_mean = summary["mape_mean_of_sources"]
    if loso:
        lo_mean = float(np.mean(list(report["loso"].values())))
        lo_all = float(np.mean([abs(p / m - 1) for rows in loso.values() for _, p, m in rows]))
        report["loso_mean_of_sources"], report["loso_overall"] = lo_mean, lo_all
        print(f"{'mean of sources':16s} {'':5s} {lo_mean * 100:6.1f}% {in_mean * 100:9.1f}%")
        print(f"{'all runs':16s} {summary['records']:5d} {lo_all * 100:6.1f}% {summary['mape_overall'] * 100:9.1f}%")
        wid, werr, wsrc = report["loso_worst"]
        print(f"worst run out of sample: {wid} ({wsrc}) {werr * 100:+.1f}%")
    else:
        print(f"{'mean of sources':16s} {'':5s} {'-':>7s} {in_mean * 100:9.1f}%")
    memory_out_of_sample(records, report)

    heldout = evaluate(load_heldout())
    by: dict[str, list] = {}
    for r in heldout:
        by.setdefault(r.record.source, []).append(r)
    print()
    print("held-out published runs (never fitted; catalog constants):")
    print(f"{'run':48s} {'measured s':>10s} {'predicted s':>11s} {'error':>7s}   memory (measured / predicted GiB)")
    for r in heldout:
        flag = ("   predicted tight (fits without the allocator's cache)" if r.tight else "") if r.fits \
            else "   predicted not to fit"
        mem = ""
        if r.memory_error is not None:
            mem = (f"   {r.record.measured_memory_gib:5.1f} / {r.predicted_memory_gib:5.1f} "
                   f"{r.memory_error * 100:+6.1f}% ({r.record.memory_method})")
        print(f"{r.record.id[:48]:48s} {r.record.measured_step_s:10.4g} {r.predicted_step_s:11.4g} "
              f"{r.step_error * 100:+6.1f}%{mem}{flag}")
    h_src = {s: float(np.mean([abs(r.step_error) for r in rs])) for s, rs in by.items()}
    report["heldout"] = h_src
    report["heldout_not_fitting"] = [r.record.id for r in heldout if not r.fits]
    report["heldout_tight"] = [r.record.id for r in heldout if r.tight]
    report["heldout_memory"] = {r.record.id: r.memory_error for r in heldout if r.memory_error is not None}
    for s, v in h_src.items():
        print(f"  {s:22s} {len(by[s]):3d} runs  MAPE {v * 100:5.1f}%")
    h_all = float(np.mean([abs(r.step_error) for r in heldout]))
    report["heldout_overall"] = h_all
    print(f"  {'all held-out':22s} {len(heldout):3d} runs  MAPE {h_all * 100:5.1f}%  "
          f"(mean of sources {np.mean(list(h_src.values())) * 100:.1f}%); "
          f"{len(report['heldout_not_fitting'])} predicted not to fit, {len(report['heldout_tight'])} tight")
    hm = list(report["heldout_memory"].values())
    if hm:
        print(f"  held-out memory: {len(hm)} runs, MAPE {np.mean(np.abs(hm)) * 100:.1f}%, "
              f"worst {max(hm, key=abs) * 100:+.1f}%")

    gpu_runs_section(report)

    print()
    checks = {}
    if loso:
        checks["LOSO mean of sources <= 7%"] = report["loso_mean_of_sources"] <= LOSO_TARGETS["mean_of_sources"]
        checks["no source above 12% out of sample"] = max(report["loso"].values()) <= LOSO_TARGETS["per_source"]
    checks.update({
        "memory within 10% where measured": not summary["memory_over_10pct"],
        "every published run predicted to fit": not summary["not_fitting"],
        "every held-out run predicted to fit": not report["heldout_not_fitting"],
        "pair order >= 90%": summary["pair_order_right"] >= TARGETS["pair_order"],
    })
    for name, ok in checks.items():
        print(f"  [{'x' if ok else ' '}] {name}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1, default=float))


if __name__ == "__main__":
    main()
