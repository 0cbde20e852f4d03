"""Error bands from the cross-validated residuals: write costmodels/catalog/error_bands.yaml, print coverage.

Usage:
  python benchmarks/validate.py --json /tmp/val.json            # the LOSO refits (about 15 minutes)
  python benchmarks/bands.py --from /tmp/val.json --write       # the band file, from that report
  python benchmarks/bands.py --from /tmp/val.json --coverage    # how often the 80% band held

The report of benchmarks/validate.py --json holds the constants refitted without each source
(`loso_refits`) and, when written by this version, every run's out-of-sample prediction
(`loso_predictions`); with only the refits, the predictions are recomputed from them (seconds).
Without --from the refits are run here (about 15 minutes on 2 cores).

Step time: residual r = log(predicted / measured) of each run predicted by the constants fitted
without its source; 10th / 90th percentiles over the runs of each component (costmodels/bands.py),
each source weighted equally. Memory: log(predicted / measured) of the runs with a measured peak:
published runs whose reading holds the allocator's cache predicted with the memory constants refitted
without their source (benchmarks/fit.py fit_memory: the allocator's overhead, torch.compile's saved
activations), the other published readings (max allocated, which neither enters) and the held-out runs
with the catalog's constants.
Coverage: the share of runs whose measured value lies in the band, per source. The headline is
nested: the band applied to a source's runs is made from the other sources' residuals only (the
thin constants' ranges and the memory band stay those of the full file).
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from costmodels import bands as B  # noqa: E402
from costmodels.estimate import estimate  # noqa: E402
from heldout import load_heldout  # noqa: E402
from planner.validation import cases, comparable_step_s, evaluate, load_records  # noqa: E402

BAND_FILE = ROOT / "costmodels" / "catalog" / "error_bands.yaml"
THIN_RUNS, THIN_SOURCES = 20, 3     # a fitted constant below either is "thin" (rule 2)
Q_LOW, Q_HIGH = 0.10, 0.90


def weighted_quantile(values, weights, q):
    v = np.asarray(values, float)
    w = np.asarray(weights, float)
    order = np.argsort(v)
    v, w = v[order], w[order]
    cw = (np.cumsum(w) - 0.5 * w) / w.sum()
    return float(np.interp(q, cw, v))


def loso_predictions(report, records, prepared):
    """{record id: (source, LOSO predicted s, measured s)} from the report."""
    import fit as fitmod

    if report.get("loso_predictions"):
        return {i: (s, p, m) for s, rows in report["loso_predictions"].items() for i, p, m in rows}
    out = {}
    for s, vals in report["loso_refits"].items():
        idx = [k for k, r in enumerate(records) if r.source == s]
        res = evaluate([records[k] for k in idx], overrides=fitmod.make_overrides(np.array(vals)),
                       prepared=[prepared[k] for k in idx])
        for r in res:
            out[r.record.id] = (s, r.predicted_step_s, r.record.measured_step_s)
    return out


def residual_rows(report, records, prepared):
    """One row per run: id, source, residual, components."""
    preds = loso_predictions(report, records, prepared)
    rows = []
    for rec, case in zip(records, prepared):
        if rec.id not in preds:
            continue
        s, p, m = preds[rec.id]
        rows.append({"id": rec.id, "source": s, "r": math.log(p / m), "predicted": p, "measured": m,
                     "components": B.components(case.framework.name, case.layout, case.cluster)})
    return rows


def component_table(rows):
    """{component: {q10, q90, runs, sources}}, sources weighted equally."""
    names = sorted({c for row in rows for c in row["components"]}, key=lambda c: (c != "all", c))
    table = {}
    for name in names:
        sel = [row for row in rows if name in row["components"]]
        count = {}
        for row in sel:
            count[row["source"]] = count.get(row["source"], 0) + 1
        w = [1.0 / count[row["source"]] for row in sel]
        r = [row["r"] for row in sel]
        table[name] = {"q10": round(weighted_quantile(r, w, Q_LOW), 4),
                       "q90": round(weighted_quantile(r, w, Q_HIGH), 4),
                       "runs": len(sel), "sources": len(count)}
    return table


def thin_constants(report, records):
    """Fitted constants constrained by fewer than THIN_RUNS runs or THIN_SOURCES sources (runs whose
    step time responds to the constant: fit.provenance), with the range their LOSO refits took (and
    the catalog value); for a constant of the machine (`varies_by_machine`: the host time per kernel,
    whose prior is measured on one CPU) also its prior's spread, prior x e^(+-sigma), since a user's
    host is not the hosts the sources ran on."""
    import fit as fitmod

    prepared = cases(records)
    current = fitmod.current_values(prepared)
    out = []
    for k, (p, (runs, sources, _)) in enumerate(zip(fitmod.PARAMETERS, fitmod.provenance(records))):
        if runs >= THIN_RUNS and len(sources) >= THIN_SOURCES:
            continue
        values = [v[k] for v in report["loso_refits"].values()] + [float(current[k])]
        if p.varies_by_machine:
            values += [p.prior * math.exp(-p.sigma), p.prior * math.exp(p.sigma)]
        out.append({"kind": p.kind, "groups": list(p.groups), "field": p.field,
                    "low": float(f"{min(values):.4g}"), "high": float(f"{max(values):.4g}"),
                    "catalog": float(f"{float(current[k]):.4g}"), "runs": runs, "sources": len(sources),
                    "fitted_on": sources})
    return out


def memory_rows(records, report=None):
    """(id, source, log(predicted / measured)) of every run with a measured peak: the readings that hold
    the allocator's cache predicted with the memory constants refitted without their source
    (report['memory_loso_predictions'], benchmarks/fit.py loso_memory), the other readings (allocated,
    which no fitted memory constant enters) and the held-out runs with the catalog's constants."""
    loso = {i: (s, p, m) for s, rows in (report or {}).get("memory_loso_predictions", {}).items()
            for i, p, m in rows}
    rows = []
    for r in evaluate([x for x in records if x.measured_memory_gib is not None]):
        if r.record.id in loso:
            s, p, m = loso[r.record.id]
            rows.append((r.record.id, s, math.log(p / m)))
        elif r.memory_error is not None:
            rows.append((r.record.id, r.record.source, math.log(r.predicted_memory_gib / r.record.measured_memory_gib)))
    for r in evaluate(load_heldout()):
        if r.memory_error is not None:
            rows.append((r.record.id, r.record.source, math.log(r.predicted_memory_gib / r.record.measured_memory_gib)))
    return rows


def memory_table(rows):
    r = [x[2] for x in rows]
    w = [1.0] * len(r)
    return {"q10": round(weighted_quantile(r, w, Q_LOW), 4), "q90": round(weighted_quantile(r, w, Q_HIGH), 4),
            "runs": len(r), "sources": len({x[1] for x in rows}), "floor": B.MEMORY_FLOOR}


def build_table(report, records, prepared, rows=None):
    rows = rows if rows is not None else residual_rows(report, records, prepared)
    mem = memory_rows(records, report)
    return {
        "level": B.LEVEL,
        "step_time": {"residual": "log(predicted / measured), leave-one-source-out",
                      "components": component_table(rows), "thin_constants": thin_constants(report, records)},
        "memory": memory_table(mem),
    }, rows


def _git(*args):
    try:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def write_file(table, rows, source_json, path=BAND_FILE):
    sources = sorted({row["source"] for row in rows})
    m = table["memory"]
    header = [
        "# Error bands of the cost model: 80% intervals (10th-90th percentile of log(predicted/measured)).",
        "# WRITTEN BY: python benchmarks/bands.py --from REPORT --write; do not edit by hand.",
        f"# made from: {Path(str(source_json)).name} (benchmarks/validate.py --json: leave-one-source-out refits)",
        f"# commit: {_git('rev-parse', '--short', 'HEAD')}; date: {datetime.date.today().isoformat()}",
        f"# step time: {len(rows)} runs from {len(sources)} sources ({', '.join(sources)}), each predicted",
        "#   by constants fitted without its source; quantiles weight each source equally.",
        f"# memory: {m['runs']} measured runs from {m['sources']} sources (published runs, the memory constants",
        "#   refitted without each run's source (benchmarks/fit.py fit_memory); plus held-out runs): few, so at",
        "#   least +-10% (floor).",
        "# thin_constants: fitted constants that fewer than 20 runs or 3 sources constrain; the band varies",
        "#   each over the range its LOSO refits took (low..high; a constant of the machine, the host time per kernel,",
        "#   also over its measured prior's spread) and widens by the change (costmodels/bands.py).",
        "# How the band is combined: costmodels/bands.py (widest applicable component, thin constants, floor).",
        f"# width_scale {table['step_time']['width_scale']}: FITTED here, so that each source's band, made from the",
        "#   other sources' residuals only, holds for 80% of the runs (mean of sources), and at least",
        f"#   {WIDTH_SCALE_FLOOR} (ASSUMED: never narrower than the widest-of rule; benchmarks/bands.py WIDTH_SCALE_FLOOR).",
    ]
    body = yaml.safe_dump({"provenance": {"source_report": Path(str(source_json)).name,
                                          "commit": _git("rev-parse", "HEAD"),
                                          "date": datetime.date.today().isoformat(),
                                          "step_time_runs": len(rows), "step_time_sources": sources,
                                          "memory_runs": m["runs"]},
                           **table}, sort_keys=False, width=110)
    path.write_text("\n".join(header) + "\n" + body)


def band_terms(table_fn, rows, records, prepared, report):
    """Per run, what its band is made of at width_scale 1: (source, predicted, measured, r_low, r_high,
    thin-constant down, up), with `table_fn(source)` the table used for that source's runs."""
    import fit as fitmod

    by_id = {r.id: k for k, r in enumerate(records)}
    out = []
    for source in sorted({row["source"] for row in rows}):
        table = dict(table_fn(source))
        table["step_time"] = {**table["step_time"], "width_scale": 1.0}
        over = fitmod.make_overrides(np.array(report["loso_refits"][source]))
        for row in rows:
            if row["source"] != source:
                continue
            case = over(prepared[by_id[row["id"]]])
            est = estimate(case.model, case.cluster, case.framework, case.layout)
            comps = B.components(case.framework.name, case.layout, case.cluster)
            r_lo, r_hi, _, _ = B.residual_offsets(comps, table)
            # the case carries the source's LOSO refit, not the catalog's values: vary them all the same
            down, up, _ = B.thin_constant_offsets(case.model, case.cluster, case.framework, case.layout,
                                                  est.step_time_s, table, only_catalog=False)
            step = comparable_step_s(records[by_id[row["id"]]], case, est.step_time_s)
            out.append((source, step, row["measured"], r_lo, r_hi, down, up))
    return out


def coverage_at(terms, scale) -> dict:
    """{source: (held, runs)} of the bands at `width_scale` = scale (costmodels/bands.step_time_band)."""
    out = {}
    for source, step, measured, r_lo, r_hi, down, up in terms:
        low = min(step * math.exp(-scale * r_hi + down), step * (1.0 - B.STEP_FLOOR))
        high = max(step * math.exp(-scale * r_lo + up), step * (1.0 + B.STEP_FLOOR))
        h, n = out.get(source, (0, 0))
        out[source] = (h + (low <= measured <= high), n + 1)
    return out


# ASSUMED (2026-12-06): the band is widened to the stated level where the nested LOSO bands fall
# short, never narrowed below the widest-of rule. The LOSO runs understate a new layout's error: with
# vTrain's host floor measured (its LOSO error 23% -> 9%) the residuals' overall 10th percentile went
# from -14.9% to -10.8%, the fitted scale was 0.656, and the 50 held-out runs no fit sees were then
# inside for 34 (68%); the planner's own H100 jobs are outside either way (0 of 13).
WIDTH_SCALE_FLOOR = 1.0


def fit_width_scale(terms, target=B.LEVEL, floor=WIDTH_SCALE_FLOOR) -> float:
    """The width_scale at which the nested bands hold for `target` of the runs, mean of sources
    (bisection: coverage grows with the scale), and at least `floor`."""
    mean = lambda s: float(np.mean([h / n for h, n in coverage_at(terms, s).values()]))  # noqa: E731
    if mean(floor) >= target:
        return floor
    lo, hi = floor, 3.0
    if mean(hi) < target:
        return hi
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if mean(mid) < target else (lo, mid)
    return round(hi, 3)


def coverage_width_scale_out_of_sample(terms) -> dict:
    """{source: (held, runs)} with the width_scale itself refitted without the source: the coverage
    figure that no fitted number of the band has seen."""
    out = {}
    for source in sorted({t[0] for t in terms}):
        scale = fit_width_scale([t for t in terms if t[0] != source])
        out.update(coverage_at([t for t in terms if t[0] == source], scale))
    return out


def coverage(table_fn, rows, records, prepared, report):
    """{source: (held, runs)}: is each run's measured step time inside its band? `table_fn(source)` gives
    the band table used for that source's runs."""
    import fit as fitmod

    by_id = {r.id: k for k, r in enumerate(records)}
    out = {}
    for source in sorted({row["source"] for row in rows}):
        table = table_fn(source)
        over = fitmod.make_overrides(np.array(report["loso_refits"][source]))
        held = n = 0
        for row in rows:
            if row["source"] != source:
                continue
            case = over(prepared[by_id[row["id"]]])
            est = estimate(case.model, case.cluster, case.framework, case.layout)
            band = B.step_time_band(case.model, case.cluster, case.framework, case.layout, est, table)
            # the band read the way the run was measured (vTrain's rows hold no per-step overhead)
            shift = comparable_step_s(records[by_id[row["id"]]], case, est.step_time_s) / est.step_time_s
            held += band.low * shift <= row["measured"] <= band.high * shift
            n += 1
        out[source] = (held, n)
    return out


def heldout_coverage(table):
    held = {}
    for r in evaluate(load_heldout()):
        case = cases([r.record])[0]
        est = estimate(case.model, case.cluster, case.framework, case.layout)
        band = B.step_time_band(case.model, case.cluster, case.framework, case.layout, est, table)
        h, n = held.get(r.record.source, (0, 0))
        held[r.record.source] = (h + (band.low <= r.record.measured_step_s <= band.high), n + 1)
    return held


def memory_coverage(table, records, report=None):
    rows = memory_rows(records, report)
    inside = 0
    for _, _, r in rows:
        lo = min(-float(table["memory"]["q90"]), math.log(1 - B.MEMORY_FLOOR))
        hi = max(-float(table["memory"]["q10"]), math.log(1 + B.MEMORY_FLOOR))
        inside += lo <= -r <= hi          # measured / predicted = exp(-r)
    return inside, len(rows)


def _print_cov(title, cov):
    print(title)
    for s, (h, n) in cov.items():
        print(f"  {s:22s} {h:5d} / {n:5d}  {h / n * 100:5.1f}%")
    mean = np.mean([h / n for h, n in cov.values()])
    total = sum(h for h, _ in cov.values()) / sum(n for _, n in cov.values())
    print(f"  {'mean of sources':22s} {'':13s} {mean * 100:5.1f}%   (all runs {total * 100:.1f}%)")
    return float(mean), float(total)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--from", dest="source", default=None, help="a benchmarks/validate.py --json report")
    ap.add_argument("--data", default=None)
    ap.add_argument("--write", action="store_true", help="write costmodels/catalog/error_bands.yaml")
    ap.add_argument("--coverage", action="store_true", help="print how often the 80%% band held")
    args = ap.parse_args(argv)
    records = load_records(args.data)
    prepared = cases(records)
    if args.source:
        report = json.loads(Path(args.source).read_text())
        if "loso_refits" not in report:
            raise SystemExit(f"{args.source}: no loso_refits (run benchmarks/validate.py without --no-loso)")
    else:
        import validate
        print("no --from: running the leave-one-source-out refits (about 15 minutes) ...", flush=True)
        loso, refits = validate.leave_one_source_out(records, args.data)
        report = {"loso_refits": refits, "loso_predictions": loso}
    if "memory_loso_predictions" not in report:      # a report of an older validate.py: seconds to redo
        import fit as fitmod
        report["memory_loso_predictions"] = fitmod.memory_out_of_sample(records).get("predictions", {})
    table, rows = build_table(report, records, prepared)

    def nested(source):
        t, _ = build_table(report, records, prepared, [r for r in rows if r["source"] != source])
        return t

    terms = band_terms(nested, rows, records, prepared, report)
    table["step_time"]["width_scale"] = fit_width_scale(terms)
    print(f"width_scale {table['step_time']['width_scale']} (fitted, at least {WIDTH_SCALE_FLOOR}); "
          f"fitted without the floor {fit_width_scale(terms, floor=0.05)}; at 1 (widest-of rule alone) the nested "
          f"80% bands held for "
          f"{np.mean([h / n for h, n in coverage_at(terms, 1.0).values()]) * 100:.1f}%")
    print(f"step time: {len(rows)} runs; 80% band of log(predicted/measured) by component:")
    for name, e in table["step_time"]["components"].items():
        print(f"  {name:32s} q10 {e['q10']:+.3f}  q90 {e['q90']:+.3f}  ({e['runs']} runs, {e['sources']} sources)")
    for p in table["step_time"]["thin_constants"]:
        print(f"  thin constant {p['field']} ({'/'.join(p['groups'])}): {p['low']:.4g}..{p['high']:.4g} "
              f"({p['runs']} runs, {p['sources']} sources)")
    m = table["memory"]
    print(f"memory: q10 {m['q10']:+.3f} q90 {m['q90']:+.3f} ({m['runs']} runs, {m['sources']} sources; floor +-10%)")
    if args.write:
        write_file(table, rows, args.source or "benchmarks/validate.py (run here)")
        print(f"wrote {BAND_FILE.relative_to(ROOT)}")
    if args.coverage:
        print()
        _print_cov("coverage of the 80% step-time band on the LOSO runs, out of sample twice (band and "
                   "width_scale both made without the source):", coverage_width_scale_out_of_sample(terms))
        print()
        cov = coverage_at(terms, table["step_time"]["width_scale"])
        _print_cov("coverage of the 80% step-time band on the LOSO runs (nested: band made without the source; "
                   "width_scale fitted on all of them: 80% by construction, more where the width_scale floor "
                   f"of {WIDTH_SCALE_FLOOR} binds):", cov)
        print()
        cov_in = coverage(lambda s: table, rows, records, prepared, report)
        _print_cov("coverage with the band file's own table (residuals of every source, incl. this one):", cov_in)
        print()
        _print_cov("coverage on the held-out runs (never fitted; catalog constants):", heldout_coverage(table))
        h, n = memory_coverage(table, records, report)
        print(f"\nmemory band: {h} of {n} measured runs inside ({h / n * 100:.1f}%; the band is made from these "
              "residuals, the memory constants refitted without each run's source)")


if __name__ == "__main__":
    main()
