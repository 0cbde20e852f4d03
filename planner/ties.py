"""Error bands on estimates and plans, ties within model error, OOM risk (issue 9).

The band itself is made in costmodels/bands.py from catalog/error_bands.yaml. Here:

* `bands_dict(...)`: the JSON fields every estimate carries: `step_time_band_s`, `peak_memory_band_bytes`,
  `oom_risk`, and how the band was made (`error_band`).
* `annotate(data)`: for plan data (planner.serialise adds the bands), which runner-ups tie with the
  best within model error (their bands of time per token overlap the best's; of memory headroom for
  the memory objective), which layout the tie-break rule prefers, and what measurement would
  separate them.

Tie-break rule (README "Error bands"), applied in order, among the best and the runner-ups that tie
with it: 1. no OOM risk (upper memory band within the GPU's memory); 2. fewer thin constants
(fitted on fewer than 20 runs or 3 sources) behind the band; 3. a narrower step-time band (better-
validated components); 4. fewer moving parts (pipeline, context parallel, offload, each counted
once) and a lower ZeRO stage; 5. a lower upper memory band; 6. the point estimate. The planner reports the rule's preference next
to its pick, and changes its pick for rule 1 only (`safe_first`): a layout with OOM risk is not
ranked first when a layout without OOM risk ties with it; the faster one is then shown second.
"""
from __future__ import annotations

import math

import numpy as np

from costmodels import bands as B
from costmodels.units import fmt_bytes, fmt_seconds

from .text import TIME_LABELS, layout_line

TIE_LABEL = "tie within model error"
SAFE_CANDIDATES = 20      # layouts without OOM risk tried, best first, for a tie with an OOM-risk best


def bands_for(model, cluster, framework, layout, est) -> tuple[B.Band, B.Band]:
    """(step-time band, peak-memory band) of one estimate."""
    return B.step_time_band(model, cluster, framework, layout, est), B.memory_band(est)


def bands_dict(model, cluster, framework, layout, est) -> dict:
    """The band fields of an estimate's JSON (`planner estimate --json`, plan.json)."""
    step, mem = bands_for(model, cluster, framework, layout, est)
    lo_by, hi_by = step.widest
    return {
        "step_time_band_s": step.as_list(),
        "peak_memory_band_bytes": mem.as_list(),
        "oom_risk": B.oom_risk(est, mem),
        "error_band": {
            "level": step.level,
            "made_from": "leave-one-source-out residuals (costmodels/catalog/error_bands.yaml)",
            "components": B.components(framework.name, layout, cluster),
            "low_side_from": lo_by, "high_side_from": hi_by,
            "thin_constants": list(step.thin),
        },
    }


def safe_first(idx, est_cols: dict, hbm_bytes: float, plan_of, model, cluster, framework, shown: bool = True):
    """Rule 1 of the tie-break, applied to the pick (issue 9: an OOM risk is not ranked as safe).
    `idx`: rows in rank order; `est_cols`: their estimate columns; `plan_of(row)`: the row's Plan.
    When the first row is an OOM risk (upper memory band above the GPU's memory) and a row without
    OOM risk ties with it (step-time bands per token overlap; the best SAFE_CANDIDATES such rows are
    tried in rank order, the first that ties is taken), that row goes first and the
    displaced one second (`shown`: the plan lists runner-ups, so it appears as #2). Returns (idx,
    displaced row or None, text for the plan's `why`)."""
    if not len(idx):
        return idx, None, ""
    risk = B.oom_risk_rows(np.asarray(est_cols["peak_memory_bytes"])[idx], hbm_bytes)
    if not risk[0] or risk.all():
        return idx, None, ""

    def band_per_token(plan):
        band = B.step_time_band(model, cluster, framework, plan.layout, plan.estimate)
        tokens = plan.estimate.tokens_per_step
        return B.Band(band.value / tokens, band.low / tokens, band.high / tokens)

    first = int(idx[0])
    fast = plan_of(first)
    fast_band = band_per_token(fast)
    # bands differ in width, so a slower safe layout may tie where a faster one does not
    for safe in [int(j) for j in idx[~risk][:SAFE_CANDIDATES]]:
        slow = plan_of(safe)
        if fast_band.overlaps(band_per_token(slow)):
            break
    else:
        return idx, None, ""
    rest = [int(j) for j in idx if int(j) not in (first, safe)]
    per_token = [p.estimate.step_time_s / p.estimate.tokens_per_step for p in (fast, slow)]
    high = float(np.asarray(est_cols["peak_memory_bytes"])[first]) * B.memory_high_factor()
    which = "the runner-up #2" if shown else f"the layout {layout_line(fast.layout)} (not listed: --top 1)"
    why = (f"picked for memory safety: {which} takes {100 * (1 - per_token[0] / per_token[1]):.1f}% less "
           f"time per token by the point estimate, but its upper memory band ({fmt_bytes(high)}) exceeds the GPU's "
           f"{fmt_bytes(hbm_bytes)} (OOM risk); this layout ties with it within model error and has no "
           "OOM risk (README 'Error bands', tie-break rule 1)")
    return np.array([safe, first] + rest, dtype=np.int64), first, why


def band_text(lo: float, hi: float, fmt) -> str:
    return f"80% band {fmt(lo)} - {fmt(hi)}"


def _moving_parts(layout: dict) -> int:
    parts = (layout["pp"] > 1) + (layout["cp"] > 1) + (layout.get("offload_optimizer", "none") != "none") \
        + (layout.get("offload_params", "none") != "none") + (layout.get("offload_activations", "none") != "none")
    return int(parts)


def _per_token(entry: dict) -> tuple[float, float, float]:
    e = entry["estimate"]
    tok = e["tokens_per_step"]
    lo, hi = e["step_time_band_s"]
    return lo / tok, e["step_time_s"] / tok, hi / tok


def _overlap(a: dict, b: dict, objective: str) -> bool:
    if objective == "memory":
        ea, eb = a["estimate"], b["estimate"]
        la, ha = ea["peak_memory_band_bytes"]
        lb, hb = eb["peak_memory_band_bytes"]
        return la <= hb and lb <= ha
    la, _, ha = _per_token(a)
    lb, _, hb = _per_token(b)
    return la <= hb and lb <= ha


def _preference_key(entry: dict):
    e, layout = entry["estimate"], entry["layout"]
    lo, hi = e["step_time_band_s"]
    return (bool(e.get("oom_risk")), len(e["error_band"]["thin_constants"]), round(math.log(hi / lo), 2),
            _moving_parts(layout), layout["zero_stage"], e["peak_memory_band_bytes"][1],
            entry.get("rank", 0))


def _separating_measurement(best: dict, other: dict) -> str:
    """Where the two estimates differ most (time breakdown per token), and the constants behind it."""
    eb, eo = best["estimate"], other["estimate"]
    tb, to = eb["tokens_per_step"], eo["tokens_per_step"]
    diffs = {k: eo["time_breakdown_s"].get(k, 0.0) / to - eb["time_breakdown_s"].get(k, 0.0) / tb
             for k in TIME_LABELS}
    key = max(diffs, key=lambda k: abs(diffs[k]))
    # thin constants behind one band and not the other (those behind both are said once, for the best)
    thin = sorted(set(eb["error_band"]["thin_constants"]) ^ set(eo["error_band"]["thin_constants"]))
    if abs(diffs[key]) < 0.005 * eb["step_time_s"] / tb:
        text = ("the model predicts the same time: run both for a few iterations and compare the elapsed "
                "time per iteration and the memory report (max reserved)")
    else:
        text = (f"run both for a few iterations and compare the elapsed time per iteration; the model puts "
                f"most of the difference in {TIME_LABELS[key]}")
    if thin:
        text += f", and the band rests on {', '.join(thin)}"
    return text


def annotate(data: dict, objective: str = "time") -> dict:
    """Mark ties in plan data (plan_to_dict's shape, every estimate with its bands) in place and
    return the `ties` summary."""
    best = {"rank": 1, "layout": data["layout"], "estimate": data["estimate"]}
    tied = []
    for r in data.get("runner_ups", []):
        r["tie"] = _overlap(best, r, objective)
        if r["tie"]:
            tied.append(r)
    group = [best] + tied
    preferred = min(group, key=_preference_key)
    separate = {str(r["rank"]): _separating_measurement(best, r) for r in tied}
    thin_best = data["estimate"]["error_band"]["thin_constants"]
    return {
        "label": TIE_LABEL,
        "basis": "memory bands" if objective == "memory" else "step-time bands per token",
        "tied_with_best": [r["rank"] for r in tied],
        "preferred_rank": preferred["rank"],
        "rule": ("among ties: no OOM risk, fewer thin constants, narrower band, fewer moving parts and lower "
                 "ZeRO stage, lower upper memory band, then the point estimate (README 'Error bands'); "
                 "the plan applies the first of these itself and otherwise keeps the fastest"),
        "separate_by": separate,
        "best_rests_on_thin_constants": list(thin_best),
        "oom_risk_ranks": [e["rank"] for e in group + [r for r in data.get("runner_ups", []) if not r.get("tie")]
                           if e["estimate"].get("oom_risk")],
    }


def summary_lines(data: dict, ties: dict, markdown: bool = False) -> list[str]:
    """Text (or markdown list items) saying what is tied, the preference and what would separate them."""
    bullet = "- " if markdown else "  "
    e = data["estimate"]
    lo, hi = e["step_time_band_s"]
    mlo, mhi = e["peak_memory_band_bytes"]
    lines = [f"{bullet}best: step {fmt_seconds(e['step_time_s'])} ({band_text(lo, hi, fmt_seconds)}), "
             f"memory {fmt_bytes(e['peak_memory_bytes'])} ({band_text(mlo, mhi, fmt_bytes)})"]
    if ties["tied_with_best"]:
        ranks = ", ".join(f"#{r}" for r in ties["tied_with_best"])
        lines.append(f"{bullet}{ranks}: {TIE_LABEL} with the best (their {ties['basis']} overlap); the ranking "
                     "among them is not established by the model")
        if ties["preferred_rank"] != 1:
            lines.append(f"{bullet}tie-break rule prefers #{ties['preferred_rank']} ({ties['rule']})")
        else:
            lines.append(f"{bullet}tie-break rule also prefers the best (#1)")
        for rank, how in ties["separate_by"].items():
            lines.append(f"{bullet}to separate #1 and #{rank}: {how}")
    else:
        lines.append(f"{bullet}no runner-up ties with the best within model error")
    for rank, text in ties.get("advantage_from_thin_constants", {}).items():
        lines.append(f"{bullet}{text}")
    if ties["best_rests_on_thin_constants"]:
        lines.append(f"{bullet}the best's estimate rests on constants fitted on few runs: "
                     + ", ".join(ties["best_rests_on_thin_constants"]))
    if ties["oom_risk_ranks"]:
        which = ", ".join("the best" if rank == 1 else f"#{rank}" for rank in ties["oom_risk_ranks"])
        lines.append(f"{bullet}OOM RISK: {which}: the upper memory band exceeds the GPU's memory "
                     "(fits by the point estimate only)")
    return lines


def advantage_notes(result, cost_fw) -> dict:
    """{rank: text} for runner-ups that the best beats only while a thin constant stays near its
    catalog value: varied over its LOSO range (costmodels/bands.py), the order flips."""
    best = result.best
    tb = best.estimate.tokens_per_step
    base_best = best.estimate.step_time_s / tb
    best_var = {p["field"]: (p, lo / tb, hi / tb) for p, lo, hi in
                B.vary_thin_constants(result.model, result.cluster, cost_fw, best.layout)}
    notes = {}
    for plan in result.runner_ups:
        to = plan.estimate.tokens_per_step
        base_other = plan.estimate.step_time_s / to
        other_var = {p["field"]: (p, lo / to, hi / to) for p, lo, hi in
                     B.vary_thin_constants(result.model, result.cluster, cost_fw, plan.layout)}
        for name in sorted(set(best_var) | set(other_var)):
            p = (best_var.get(name) or other_var[name])[0]
            b = best_var.get(name, (p, base_best, base_best))
            o = other_var.get(name, (p, base_other, base_other))
            for k, value in ((1, p["low"]), (2, p["high"])):
                if o[k] < b[k] and base_other >= base_best:
                    notes[str(plan.rank)] = (f"#{plan.rank} would be faster with {p['field']} at {value:.3g} "
                                             f"(catalog {p['catalog']:.3g}); the best's advantage rests on "
                                             f"{B.thin_constant_name(p)}")
                    break
            if str(plan.rank) in notes:
                break
    return notes


def report_lines(data: dict) -> list[str]:
    """The 'Model error' section of report.md (empty for a plan.json written before bands)."""
    if "ties" not in data or "step_time_band_s" not in data["estimate"]:
        return []
    lines = ["", "## Model error", "",
             "Every estimate carries an 80% band made from the cost model's leave-one-source-out residuals "
             "(README, 'Error bands'). Runner-ups whose band overlaps the best's are ties within model error.", ""]
    lines += summary_lines(data, data["ties"], markdown=True)
    ups = data.get("runner_ups", [])
    if ups:
        lines += ["", "| # | step | 80% band | memory 80% band | tie | OOM risk |", "|---|---|---|---|---|---|"]
        for r in [{"rank": 1, "estimate": data["estimate"], "tie": None}] + ups:
            e = r["estimate"]
            lo, hi = e["step_time_band_s"]
            mlo, mhi = e["peak_memory_band_bytes"]
            tie = "best" if r["tie"] is None else ("yes" if r.get("tie") else "no")
            lines.append(f"| {r['rank']} | {fmt_seconds(e['step_time_s'])} | {fmt_seconds(lo)} - {fmt_seconds(hi)} | "
                         f"{fmt_bytes(mlo)} - {fmt_bytes(mhi)} | {tie} | {'yes' if e.get('oom_risk') else 'no'} |")
    return lines


def figure_error_bars(ax, rows) -> None:
    """80% bands as error bars on the tokens/s-per-GPU bars of layouts.png (rows: (label, estimate dict))."""
    if not rows or any("step_time_band_s" not in e for _, e in rows):
        return
    labels = list(range(len(rows)))        # bar positions (layouts.png labels them with ticks)
    tps = [e["tokens_per_s_per_gpu"] for _, e in rows]
    down = [t - t * e["step_time_s"] / e["step_time_band_s"][1] for t, (_, e) in zip(tps, rows)]
    up = [t * e["step_time_s"] / e["step_time_band_s"][0] - t for t, (_, e) in zip(tps, rows)]
    ax.errorbar(labels, tps, yerr=[down, up], fmt="none", ecolor="black", capsize=3, linewidth=1,
                label="80% band")
    ax.legend(fontsize=7)
