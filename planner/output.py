"""Plan results as terminal text: `planner plan`'s summary, warnings, cost and error bands."""
from __future__ import annotations

from .emit.shell import comment_text as one_line
from costmodels import bands as B
from costmodels.units import fmt_bytes, fmt_seconds

from .serialise import best_hidden_comm, best_offload_needs, cost_dict, error_bands
from .text import comm_summary, layout_line
from .ties import summary_lines


def fmt_money(amount: float, currency: str = "") -> str:
    text = f"{amount:,.2f}" if amount < 100 else f"{amount:,.0f}"
    return f"{text} {currency}" if currency else text


def cost_text(cost: dict) -> str:
    cur = cost.get("currency", "")
    text = (f"cost {fmt_money(cost['per_hour'], cur)} per hour ({fmt_money(cost['price_per_gpu_hour'], cur)} "
            f"per GPU-hour), {fmt_money(cost['per_billion_tokens'], cur)} per billion tokens")
    if cost.get("to_train") is not None:
        text += f", {fmt_money(cost['to_train'], cur)} to train"
    return text


def warning_lines(warnings) -> list[str]:
    """Each warning as '! message' and '  -> suggestion' (terminal and report)."""
    out = []
    for w in warnings:
        w = w if isinstance(w, dict) else w.to_dict()
        out.append(f"! {w['kind']}: {w['message']}")
        if w.get("suggestion"):
            out.append(f"  -> {w['suggestion']}")
    return out


def plan_text(result) -> str:
    best = result.best
    e = best.estimate
    # "satisfy the rules" counts the same layouts for both methods (an Optuna search counts them
    # without estimating them, or estimates the count from a sample on very large lattices).
    counts = f"{result.lattice:,} satisfy the rules, {result.considered:,} in the space; {result.method}"
    if result.method == "optuna":
        study = result.study or {}
        if study.get("layouts_satisfying_rules_exact") is False:
            counts = "about " + counts
        counts += f", {study.get('completed', result.scored):,} trials"
    lines = [f"{one_line(result.model.name)} on {result.cluster.num_gpus} x "
             f"{one_line(result.cluster.gpu.name)} "
             f"({result.profile.name}): best of {result.fitting:,} fitting layouts "
             f"({counts}, {result.seconds:.2f} s)", "",
             "  " + layout_line(best.layout),
             f"  step {fmt_seconds(e.step_time_s)}  {e.tokens_per_s_per_gpu:,.0f} tokens/s/GPU  "
             f"MFU {e.mfu * 100:.1f}%  memory {fmt_bytes(e.memory.total)} of {fmt_bytes(e.hbm_bytes)}",
             "  time: " + comm_summary(e, best_hidden_comm(result))]
    needs = best_offload_needs(result)
    if needs:
        from .breakdown import offload_text
        lines.append("  " + offload_text(needs))
    if result.request.total_tokens:
        t = e.time_to_train_s(result.request.total_tokens)
        lines.append(f"  {result.request.total_tokens:.3g} tokens: {fmt_seconds(t)}, "
                     f"{t * e.num_gpus / 3600:,.0f} GPU-hours")
    cost = cost_dict(e, result.cluster.price_per_gpu_hour, result.currency, result.request.total_tokens)
    if cost:
        lines.append("  " + cost_text(cost))
    if result.notes:
        lines += ["", "defaults used:"] + [f"  {n}" for n in result.notes]
    if result.warnings:
        lines += ["", "warnings:"] + [f"  {w}" for w in warning_lines(result.warnings)]
    if result.runner_ups:
        lines += ["", "runner-ups (the best of each other family of layouts, then other structures):"]
        for p in result.runner_ups:
            lines.append(f"  {p.rank}. [{p.family}] {layout_line(p.layout)}  {fmt_seconds(p.estimate.step_time_s)}  "
                         f"{p.estimate.step_time_s / p.estimate.tokens_per_step / (e.step_time_s / e.tokens_per_step) * 100 - 100:+.1f}%  "
                         f"{fmt_bytes(p.estimate.memory.total)}")
    lines += error_band_lines(result)     # bands, ties within model error, OOM risk (issue 9)
    if result.why:
        lines += ["", "why this layout (one knob changed at a time):"]
        lines += [f"  {w}" for w in result.why]
    if result.pareto:
        lines += ["", f"Pareto front ({' vs '.join(result.settings.objectives)}): {len(result.pareto)} layouts"]
        for p in result.pareto[:10]:
            risk = "  OOM risk" if B.oom_risk(p.estimate, B.memory_band(p.estimate)) else ""
            lines.append(f"  {layout_line(p.layout)}  {fmt_seconds(p.estimate.step_time_s)}  "
                         f"{fmt_bytes(p.estimate.memory.total)}{risk}")
    return "\n".join(lines)


def error_band_lines(result) -> list[str]:
    """The 'model error' block of `planner plan`'s text output."""
    data = error_bands(result)
    lines = ["", "model error (80% bands from leave-one-source-out residuals):"]
    lines += summary_lines(data, data["ties"])
    return lines
