"""Why the best plan beats its neighbours: change one knob at a time and say what it costs.

e.g. "tp 4 -> 8: +9.1% time per token (TP collectives +0.80 s/step)"; a neighbour that breaks a
rule or does not fit says so.
"""
from __future__ import annotations

import numpy as np

from costmodels.bands import oom_risk_rows
from costmodels.estimate import TIME_FIELDS, estimate_batch
from costmodels.units import fmt_bytes
from search_spaces.knobs import BY_NAME, EXPLAINED, KNOBS
from search_spaces.layouts import columns_to_batch, data_parallel, layout_values

from .text import TIME_LABELS


def _label(knob, value):
    value = BY_NAME[knob].decode(value)
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def neighbours(values: dict, space) -> list[tuple[str, int, dict]]:
    out = []
    n = space.request.num_gpus
    for k in EXPLAINED:
        knob = k.name
        domain = list(space.domain(knob))
        if len(domain) < 2 or values[knob] not in domain:
            continue
        i = domain.index(values[knob])
        if k.ordered:
            options = [domain[j] for j in (i - 1, i + 1) if 0 <= j < len(domain)]
        else:
            options = [v for v in domain if v != values[knob]]
        for new in options:
            changed = dict(values)
            changed[knob] = new
            changed["dp"] = data_parallel(n, changed["tp"], changed["pp"], changed["cp"])
            if not changed["dp"]:
                continue
            out.append((knob, new, changed))
    return out


def why_best(best, profile, space, ctx, cost_fw) -> list[str]:
    """One line per neighbour of the best plan (`best`, a Plan): what changing that knob costs, or
    which rule forbids it, or that it does not fit."""
    values = layout_values(best.layout)
    cand = neighbours(values, space)
    if not cand:
        return []
    # The framework's own rules first: where a change breaks both kinds, its reason is the one that
    # says the framework cannot do it at all.
    rules = profile.rules + tuple(r for r in profile.all_rules if r not in profile.rules)
    cols = {k: np.array([c[2][k] for c in cand], dtype=np.int64) for k in KNOBS}
    broken = {}
    ok = np.ones(len(cand), dtype=bool)
    for rule in rules:
        holds = np.broadcast_to(rule.holds(ctx, cols), ok.shape)
        for i in np.flatnonzero(~holds & ok):
            broken[i] = rule
        ok &= holds
    batch = estimate_batch(ctx.model, ctx.cluster, cost_fw, columns_to_batch(cols))
    base_per_token = best.estimate.step_time_s / best.estimate.tokens_per_step
    oom = oom_risk_rows(batch.peak_memory_bytes, ctx.cluster.gpu.hbm_bytes)   # upper memory band above the GPU
    lines = []
    for i, (knob, new, changed) in enumerate(cand):
        head = f"{BY_NAME[knob].label} {_label(knob, values[knob])} -> {_label(knob, new)}"
        if i in broken:
            r = broken[i]
            lines.append(f"{head}: not allowed ({r.describe(ctx, profile.name)})")
            continue
        if not batch.fits[i]:
            lines.append(f"{head}: does not fit ({fmt_bytes(batch.peak_memory_bytes[i])} per GPU, "
                         f"{fmt_bytes(batch.required_memory_bytes[i])} without the allocator's cache; "
                         f"{fmt_bytes(ctx.cluster.gpu.hbm_bytes)} available)")
            continue
        per_token = batch.step_time_s[i] / batch.tokens_per_step[i]
        delta = per_token / base_per_token - 1.0
        # The time component that moved most, per token so differing batches compare.
        scale = best.estimate.tokens_per_step / batch.tokens_per_step[i]
        moves = {f: batch.columns[f"time_{f}"][i] * scale - getattr(best.estimate.time, f) for f in TIME_FIELDS}
        key = max(moves, key=lambda f: abs(moves[f]))
        sign = "+" if moves[key] >= 0 else "-"
        mem = batch.peak_memory_bytes[i] - best.estimate.memory.total
        risk = ("; tight: runs only if the caching allocator gives its cache back, OOM risk" if batch.tight[i]
                else "; OOM risk" if oom[i] else "")
        lines.append(f"{head}: {delta * 100:+.1f}% time per token ({TIME_LABELS[key]} {sign}{abs(moves[key]):.3g} s/step; "
                     f"memory {'+' if mem >= 0 else '-'}{fmt_bytes(abs(mem))}{risk})")
    return lines
