"""Plan results as JSON objects and terminal text; output-directory checks."""
from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path

from costmodels.errors import SpecError
from costmodels.params import total_params
from costmodels.types import Estimate
from costmodels.units import HOUR, fmt_bytes, fmt_seconds

from .text import comm_summary, layout_line

FLOP_FORMULA = ("model FLOPs = 3 x forward: 2 FLOP per matmul weight per token (layers + output layer) "
                "plus 4 s h per layer per token for attention (Narayanan et al. 2021 eq. 3 without "
                "recompute, generalised to GQA / SwiGLU); MFU divides by the dense peak of the precision")


def estimate_dict(est: Estimate, framework: str, price: float = 0.0, total_tokens: float = 0.0,
                  defaults=(), hidden: dict | None = None, offload: dict | None = None) -> dict:
    """The JSON shape of `planner estimate --json` (also used inside plan.json). `hidden`: seconds of
    communication per step hidden behind compute (planner.breakdown), beside the exposed parts."""
    out = est.to_dict()
    out.update(flop_formula=FLOP_FORMULA, framework=framework, defaults_used=list(defaults))
    if hidden is not None:
        out["hidden_comm_s"] = dict(hidden)
    if offload is not None:
        out["offload_per_node"] = dict(offload)      # planner.breakdown.offload_needs
    if total_tokens:
        seconds = est.time_to_train_s(total_tokens)
        out["training"] = {
            "total_tokens": total_tokens,
            "time_to_train_s": seconds,
            "time_to_train_days": seconds / 86400,
            "gpu_hours": seconds * est.num_gpus / HOUR,
            "price_per_gpu_hour": price,
            "cost": seconds * est.num_gpus / HOUR * price if price else None,
        }
    return out


LAYOUT_KEYS = {"mbs": "micro_batch", "gbs": "global_batch", "zero": "zero_stage"}


def layout_dict(layout) -> dict:
    d = layout.as_dict()
    return {LAYOUT_KEYS.get(k, k): v for k, v in d.items()}


def plan_entry(p, result) -> dict:
    return {"rank": p.rank, "family": p.family, "layout": layout_dict(p.layout),
            "estimate": estimate_dict(p.estimate, result.profile.cost_profile,
                                      result.cluster.price_per_gpu_hour, result.request.total_tokens),
            "objective": list(p.objective)}


def inputs_dict(result) -> dict:
    m, c = result.model, result.cluster
    model = asdict(m)
    model["total_params"] = total_params(m)
    g = c.gpu
    cluster = {"gpu": g.name, "num_gpus": c.num_gpus, "gpus_per_node": c.gpus_per_node,
               "nvlink_domain": c.nvlink_domain, "nvlink_bandwidth_bytes_per_s": c.nvlink_bytes_per_s,
               "network_bandwidth_bytes_per_s": c.network_bytes_per_s, "hbm_bytes": g.hbm_bytes,
               "price_per_gpu_hour": c.price_per_gpu_hour, "currency": result.currency}
    req = result.request
    request = {"num_gpus": req.num_gpus, "global_batch": req.global_batch,
               "global_batch_tokens": list(req.global_batch_tokens) if req.global_batch_tokens else None,
               "seq_lens": list(req.seq_lens), "choices": {k: list(v) for k, v in req.choices.items()},
               "total_tokens": req.total_tokens, "objectives": list(result.settings.objectives),
               "seed": result.settings.seed}
    return {"model": model, "cluster": cluster, "framework": result.profile.name, "request": request}


def fmt_money(amount: float, currency: str = "") -> str:
    text = f"{amount:,.2f}" if amount < 100 else f"{amount:,.0f}"
    return f"{text} {currency}" if currency else text


def cost_dict(est, price: float, currency: str = "", total_tokens: float = 0.0) -> dict | None:
    """What the plan costs at `price` per GPU-hour: per hour of the job, per billion tokens, to train."""
    if not price:
        return None
    per_hour = price * est.num_gpus
    per_token = per_hour / 3600 / est.tokens_per_s
    out = {"price_per_gpu_hour": price, "currency": currency, "per_hour": per_hour,
           "per_billion_tokens": per_token * 1e9}
    if total_tokens:
        out["to_train"] = per_token * total_tokens
    return out


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


def best_hidden_comm(result) -> dict:
    from .breakdown import hidden_communication

    fw = result.profile.load_cost_profile()
    return hidden_communication(result.model, result.cluster, fw, result.best.layout, result.best.estimate)


def best_offload_needs(result) -> dict | None:
    from .breakdown import offload_needs

    fw = result.profile.load_cost_profile()
    return offload_needs(result.model, result.cluster, fw, result.best.layout)


def plan_to_dict(result) -> dict:
    """Keys in reading order (inputs, layout, estimate, warnings, alternatives, then bulk data);
    `planner plan --json` keeps this order, plan.json is written with sorted keys. planner.ties adds
    the error bands, ties and OOM risk (issue 9)."""
    from .ties import plan_hook
    best = result.best
    return plan_hook(result, {
        "inputs": inputs_dict(result),
        "defaults_used": list(result.notes),
        "layout": layout_dict(best.layout),
        "estimate": estimate_dict(best.estimate, result.profile.cost_profile,
                                  result.cluster.price_per_gpu_hour, result.request.total_tokens,
                                  hidden=best_hidden_comm(result), offload=best_offload_needs(result)),
        "cost": cost_dict(best.estimate, result.cluster.price_per_gpu_hour, result.currency,
                          result.request.total_tokens),
        "warnings": [w.to_dict() for w in result.warnings],
        "why": result.why,
        "runner_ups": [plan_entry(p, result) for p in result.runner_ups],
        "pareto": [plan_entry(p, result) for p in result.pareto],
        "search": {"method": result.method, "layouts_in_space": result.considered,
                   "layouts_checked": result.checked,
                   "layouts_satisfying_rules": result.lattice, "layouts_scored": result.scored,
                   "layouts_fitting": result.fitting, "study": result.study},
        "candidates_columns": ["tokens_per_s_per_gpu", "peak_memory_gib"],
        "candidates": result.candidates,
    })


def plan_text(result) -> str:
    best = result.best
    e = best.estimate
    if result.method == "optuna":
        # The study samples the layouts CP-SAT's sub-lattices combine to; it never counts how many of
        # those satisfy every rule, so the header says what it knows.
        study = result.study or {}
        counts = (f"{result.checked:,} combined from the rules' sub-lattices, {result.considered:,} in the "
                  f"space; optuna, {study.get('completed', result.scored):,} trials")
    else:
        counts = f"{result.lattice:,} satisfy the rules, {result.considered:,} in the space; {result.method}"
    lines = [f"{result.model.name} on {result.cluster.num_gpus} x {result.cluster.gpu.name} "
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
    from .ties import plan_text_lines
    lines += plan_text_lines(result)     # bands, ties within model error, OOM risk (issue 9)
    if result.why:
        lines += ["", "why this layout (one knob changed at a time):"]
        lines += [f"  {w}" for w in result.why]
    if result.pareto:
        lines += ["", f"Pareto front ({' vs '.join(result.settings.objectives)}): {len(result.pareto)} layouts"]
        for p in result.pareto[:10]:
            lines.append(f"  {layout_line(p.layout)}  {fmt_seconds(p.estimate.step_time_s)}  "
                         f"{fmt_bytes(p.estimate.memory.total)}")
    return "\n".join(lines)


def check_out_dir(out, force: bool, inputs=()) -> None:
    """Refuse an existing output without --force, a location that cannot be written, and any output
    whose replacement would destroy something else: the working directory or one of its parents,
    the root, or a directory holding one of the inputs (`inputs`: paths read by this run)."""
    if out is None or not str(out).strip():
        raise SpecError("--out needs a directory name, got an empty string")
    if "\0" in str(out):
        raise SpecError("--out contains a NUL character")
    p = Path(out)
    if p.name in ("", ".", "..") or str(out).rstrip("/").endswith(("/.", "/..")):
        raise SpecError(f"--out {out} names the current or a parent directory; give a new directory name")
    if len(os.fsencode(p.name)) > 240:
        raise SpecError(f"--out: the name {p.name[:40]}... is {len(os.fsencode(p.name))} bytes long; "
                        "use at most 240 (file names are limited to 255 bytes)")
    try:
        resolved = p.resolve()
        cwd = Path.cwd().resolve()
    except (OSError, RuntimeError) as exc:
        raise SpecError(f"--out {out}: cannot resolve the path ({exc.__class__.__name__})") from None
    if resolved == cwd or resolved in cwd.parents or resolved == Path(resolved.anchor):
        raise SpecError(f"--out {out} is the working directory or one of its parents; give a new directory name")
    for ref in inputs:
        try:
            src = Path(ref).resolve()
        except (OSError, RuntimeError, TypeError, ValueError):
            continue
        if src == resolved or resolved in src.parents:
            raise SpecError(f"--out {out} holds the input '{ref}'; write the output somewhere else")
    if p.is_symlink() and not p.exists():
        raise SpecError(f"--out {out} is a dangling symbolic link")
    if p.exists() and not p.is_dir():
        raise SpecError(f"--out {out} exists and is not a directory")
    if p.exists() and not force:
        raise SpecError(f"--out {out} already exists; pass --force to replace it")
    parent = resolved.parent
    if not parent.exists():
        raise SpecError(f"--out {out}: parent directory {parent} does not exist")
    if not parent.is_dir():
        raise SpecError(f"--out {out}: {parent} is not a directory")
    if not os.access(parent, os.W_OK) or str(parent).startswith(("/proc", "/sys")):
        raise SpecError(f"--out {out}: cannot write in {parent}")


def default_storage(out) -> str:
    """SQLite file next to the output directory (not inside: the directory is replaced atomically)."""
    p = Path(out).resolve()
    return f"sqlite:///{p.parent / (p.name + '.optuna.db')}"


def cache_storage() -> str:
    """SQLite file in the user's cache directory, for searches without --out (so they resume too)."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "llm-train-planner"
    try:
        base.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpecError(f"cannot create the study cache {base} ({exc.strerror or exc}); set XDG_CACHE_HOME to a "
                        "writable directory, or give --storage or --out") from None
    return f"sqlite:///{base / 'studies.db'}"
