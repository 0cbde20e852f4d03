"""report.md and its PNG figures, rendered from the plan.json data alone (so `planner explain`
re-renders the same report)."""
from __future__ import annotations

import io

from .emit.shell import comment_text as one_line
from costmodels.types import ACTIVATION_PEAK_PARTS
from costmodels.units import GiB, fmt_bytes, fmt_seconds

from .breakdown import HIDDEN_LABELS
from .evidence import evidence_lines
from .text import MEMORY_LABELS, TIME_LABELS, step_peak_note

SOURCES = [
    ("Model FLOPs", "Narayanan et al. 2021 (arXiv:2104.04473) eq. 3; Korthikanti et al. 2022 (arXiv:2205.05198) eq. 7"),
    ("Activation memory", "Korthikanti et al. 2022 §4, Table 2 (sbh(34 + 5as/h), sequence parallelism, selective recompute)"),
    ("Optimizer / ZeRO memory", "Rajbhandari et al. 2020 (arXiv:1910.02054) §3.1 and Fig. 1; DeepSpeed BF16_Optimizer"),
    ("Pipeline schedule and bubble", "Narayanan et al. 2021 §2.2 (1F1B, interleaved: (p-1)/(v m))"),
    ("Collectives", "Thakur et al. 2005; Patarasuk & Yuan 2009 (ring all-reduce 2(n-1)/n); one flat ring over NVLink and the NICs, each domain crossing carrying (n-1)/n of the bytes"),
    ("ZeRO-Offload / Infinity", "Ren et al. 2021 (arXiv:2101.06840); Rajbhandari et al. 2021 (arXiv:2104.07857)"),
    ("Sequence parallel (Ulysses)", "Jacobs et al. 2023 (arXiv:2309.14509) §3.1"),
    ("FlashAttention", "Dao 2023 (arXiv:2307.08691)"),
    ("Efficiency constants", "fitted to ../shared/validation (benchmarks/fit.py); `planner validate` prints the error per run"),
]


_MARKDOWN_PUNCTUATION = set("\\`*_[]()#|!{}~")
_HTML_ENTITIES = {"<": "&lt;", ">": "&gt;", "&": "&amp;"}


def markdown_text(text) -> str:
    """A user's name (model, GPU) as literal Markdown text on one line: HTML's `<`, `>`, `&` as
    entities (a renderer that passes HTML through would run `<img onerror=...>`), Markdown's
    punctuation backslash-escaped (CommonMark 0.31 §2.4), so `[x](javascript:...)` is no link."""
    return "".join(_HTML_ENTITIES.get(c) or ("\\" + c if c in _MARKDOWN_PUNCTUATION else c)
                   for c in one_line(text))


def _fig_bytes(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    import matplotlib.pyplot as plt

    plt.close(fig)
    return buf.getvalue()


def render_figures(data: dict, result=None) -> dict[str, bytes]:
    """memory.png, time.png, layouts.png, tradeoff.png (deterministic PNGs, Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.hashsalt": "planner", "font.size": 9})
    est = data["estimate"]
    figs = {}

    mem = est["memory_breakdown_bytes"]
    keys = [k for k in MEMORY_LABELS if mem.get(k, 0) > 0]
    fig, ax = plt.subplots(figsize=(6, 3.2))
    left = 0.0
    for i, k in enumerate(keys):
        v = mem[k] / GiB
        ax.barh([0], [v], left=left, color=plt.cm.tab10(i % 10), label=MEMORY_LABELS[k])
        left += v
    ax.axvline(est["hbm_bytes"] / GiB, color="black", linestyle="--", label="HBM")
    if "peak_memory_band_bytes" in est:       # the 80% band of the peak (issue 9)
        lo, hi = (v / GiB for v in est["peak_memory_band_bytes"])
        peak = est["peak_memory_bytes"] / GiB
        ax.errorbar([peak], [0], xerr=[[max(peak - lo, 0.0)], [max(hi - peak, 0.0)]], fmt="none", ecolor="black",
                    capsize=4, linewidth=1, label="80% band")
    ax.set_yticks([])
    ax.set_xlabel("GiB per GPU (peak pipeline stage)")
    ax.set_title("Memory per GPU")
    ax.legend(fontsize=7, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.25))
    fig.tight_layout()
    figs["memory.png"] = _fig_bytes(fig)

    t = est["time_breakdown_s"]
    hidden = est.get("hidden_comm_s") or {}
    keys = [k for k in TIME_LABELS if t.get(k, 0) > 1e-9]
    labels = [TIME_LABELS[k] for k in keys] + [HIDDEN_LABELS[k] for k in hidden]
    values = [t[k] for k in keys] + list(hidden.values())
    fig, ax = plt.subplots(figsize=(6, 3.2 + 0.2 * len(hidden)))
    bars = ax.barh(labels, values, color=["tab:blue"] * len(keys) + ["white"] * len(hidden),
                   edgecolor=["tab:blue"] * len(keys) + ["tab:orange"] * len(hidden))
    for bar in list(bars)[len(keys):]:
        bar.set_hatch("//")
    for i, (bar, v) in enumerate(zip(bars, values)):
        share = f" ({v / est['step_time_s'] * 100:.1f}%)" if i < len(keys) else " (hidden)"
        ax.annotate(fmt_seconds(v) + share, (bar.get_width(), bar.get_y() + bar.get_height() / 2),
                    va="center", fontsize=7, xytext=(2, 0), textcoords="offset points")
    ax.invert_yaxis()
    ax.set_xlim(0, max(values) * 1.35)
    ax.set_xlabel("seconds per step (hatched: hidden behind compute, not in the step)")
    ax.set_title(f"Step time {fmt_seconds(est['step_time_s'])}")
    fig.tight_layout()
    figs["time.png"] = _fig_bytes(fig)

    rows = [("best\n" + _short_layout(data["layout"]), est)] + \
        [(f"#{r['rank']} {r.get('family', '')}\n{_short_layout(r['layout'])}", r["estimate"])
         for r in data.get("runner_ups", [])]
    fig, ax = plt.subplots(figsize=(7, 3.8))
    values = [r[1]["tokens_per_s_per_gpu"] for r in rows]
    bars = ax.bar(range(len(rows)), values, color=["tab:blue"] + ["tab:green"] * (len(rows) - 1))
    for bar, r in zip(bars, rows):
        ax.annotate(f"{r[1]['tokens_per_s_per_gpu']:,.0f}\nMFU {r[1]['mfu'] * 100:.1f}%",
                    (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(rows)), [r[0] for r in rows], fontsize=6)
    from .ties import figure_error_bars
    figure_error_bars(ax, rows)          # 80% bands (issue 9)
    ax.set_ylim(0, max(ax.get_ylim()[1], max(values) * 1.25))
    ax.set_ylabel("tokens/s per GPU")
    ax.set_title("Best layout and the best of other families")
    fig.tight_layout()
    figs["layouts.png"] = _fig_bytes(fig)

    cand = data.get("candidates", [])
    if cand:
        fig, ax = plt.subplots(figsize=(6, 3.6))
        xs = [c[1] for c in cand]
        ys = [c[0] for c in cand]
        ax.scatter(xs, ys, s=8, color="tab:gray", alpha=0.6, label="scored layouts that fit")
        front = _front(cand)
        ax.plot([c[1] for c in front], [c[0] for c in front], color="tab:red", marker="o", ms=3,
                label="Pareto front")
        ax.scatter([est["peak_memory_bytes"] / GiB], [est["tokens_per_s_per_gpu"]], color="tab:blue", s=40,
                   zorder=5, label="chosen")
        if "peak_memory_band_bytes" in est and "step_time_band_s" in est:   # its 80% bands (issue 9)
            m, t = est["peak_memory_bytes"] / GiB, est["tokens_per_s_per_gpu"]
            mlo, mhi = (v / GiB for v in est["peak_memory_band_bytes"])
            slo, shi = est["step_time_band_s"]
            tlo, thi = t * est["step_time_s"] / shi, t * est["step_time_s"] / slo
            ax.errorbar([m], [t], xerr=[[max(m - mlo, 0.0)], [max(mhi - m, 0.0)]],
                        yerr=[[max(t - tlo, 0.0)], [max(thi - t, 0.0)]], fmt="none", ecolor="tab:blue",
                        capsize=3, linewidth=1, zorder=4, label="chosen: 80% bands")
        ax.axvline(est["hbm_bytes"] / GiB, color="black", linestyle="--", linewidth=0.8)
        ax.set_xlabel("GiB per GPU")
        ax.set_ylabel("tokens/s per GPU")
        ax.set_title("Throughput / memory trade-off")
        ax.legend(fontsize=7)
        fig.tight_layout()
        figs["tradeoff.png"] = _fig_bytes(fig)
    return figs


def _front(cand):
    """Highest throughput for at most this memory (sorted by memory)."""
    out, best = [], -1.0
    for tps, mem in sorted(cand, key=lambda c: (c[1], -c[0])):
        if tps > best:
            out.append((tps, mem))
            best = tps
    return out


def _short_layout(l: dict) -> str:
    """What distinguishes layouts, in a few words (figure labels)."""
    parts = [f"tp{l['tp']} pp{l['pp']} dp{l['dp']}" + (f" cp{l['cp']}" if l["cp"] > 1 else ""),
             f"mb{l['micro_batch']} Z{l['zero_stage']}"]
    if l["recompute"] != "none":
        parts[-1] += f" rc-{l['recompute']}"
    if any(l.get(k, "none") != "none" for k in ("offload_optimizer", "offload_params", "offload_activations")):
        parts.append("offload")
    return "\n".join(parts)


def _layout_text(l: dict) -> str:
    parts = [f"tp {l['tp']}", f"pp {l['pp']}", f"dp {l['dp']}"]
    if l["cp"] > 1:
        parts.append(f"cp {l['cp']} (DeepSpeed-Ulysses)")
    if l["vpp"] > 1:
        parts.append(f"vpp {l['vpp']}")
    parts += [f"micro batch {l['micro_batch']}", f"global batch {l['global_batch']}", f"seq {l['seq_len']}",
              f"ZeRO-{l['zero_stage']}", f"recompute {l['recompute']}" + (f" ({l['recompute_layers']} layer{'s' if l['recompute_layers'] != 1 else ''} per stage)" if l.get("recompute_layers") else ""), l["precision"]]
    if l["sequence_parallel"]:
        parts.append("sequence parallel")
    if l.get("tp_comm_overlap"):
        parts.append("TP communication overlapped with GEMMs")
    if l["flash_attention"]:
        parts.append("FlashAttention-2")
    if l["offload_optimizer"] != "none":
        parts.append(f"optimizer offload to {l['offload_optimizer']}")
    if l["offload_params"] != "none":
        parts.append(f"parameter offload to {l['offload_params']}")
    if l.get("offload_activations", "none") != "none":
        parts.append(f"activation checkpoints offloaded to {l['offload_activations']}")
    if l["grad_comm"] != "fp32":
        parts.append(f"gradient communication {l['grad_comm']}")
    return ", ".join(parts)


def render_report(data: dict, figures: dict) -> str:
    inp = data["inputs"]
    m, c, est, l = inp["model"], inp["cluster"], data["estimate"], data["layout"]
    lines = [f"# Training plan: {markdown_text(m['name'])} on {c['num_gpus']} x {markdown_text(c['gpu'])}", ""]
    lines.append(f"Framework: **{inp['framework']}**. Model: {m['total_params'] / 1e9:.2f}B parameters, "
                 f"{m['num_layers']} layers, hidden {m['hidden']}, {m['num_heads']} heads "
                 f"({m['num_kv_heads']} key/value), vocabulary {m['vocab']}.")
    lines += ["", "## The plan", "", _layout_text(l), ""]
    lines.append(f"- **Step time** {fmt_seconds(est['step_time_s'])} for {est['tokens_per_step']:,.0f} tokens: "
                 f"{est['tokens_per_s_per_gpu']:,.0f} tokens/s per GPU, {est['model_tflops_per_gpu']:.0f} "
                 f"model TFLOP/s per GPU, **MFU {est['mfu'] * 100:.1f}%**.")
    lines.append(f"- **Memory** {fmt_bytes(est['peak_memory_bytes'])} of {fmt_bytes(est['hbm_bytes'])} per GPU "
                 f"(headroom {fmt_bytes(est['headroom_bytes'])}).")
    if est.get("offload_per_node"):
        from .breakdown import offload_text
        lines.append(f"- **Offload**: {offload_text(est['offload_per_node'])[len('offload '):]}.")
    if est.get("training"):
        tr = est["training"]
        lines.append(f"- **Training** {tr['total_tokens']:.3g} tokens: {tr['time_to_train_days']:.1f} days, "
                     f"{tr['gpu_hours']:,.0f} GPU-hours.")
    if data.get("cost"):
        from .output import cost_text
        text = cost_text(data["cost"])
        lines.append(f"- **Cost** {text[len('cost '):]}.")
    s = data["search"]
    lines.append(f"- **Search**: {s['layouts_in_space']:,} layouts in the space, {s['layouts_satisfying_rules']:,} "
                 f"satisfy the framework's rules, {s['layouts_scored']:,} scored, {s['layouts_fitting']:,} fit "
                 f"({s['method']}).")
    if data.get("defaults_used"):
        lines += ["", "Defaults used: " + "; ".join(data["defaults_used"]) + "."]
    lines += ["", "## Is this a good use of the cluster?", ""]
    if data.get("warnings"):
        lines += ["Each warning names what limits the plan and a fix; where a number is given the fix was "
                  "planned (or re-estimated) with the change applied.", ""]
        for w in data["warnings"]:
            lines.append(f"- **{w['kind']}**: {w['message']}." + (f" Suggestion: {w['suggestion']}." if w.get("suggestion") else ""))
    elif "warnings" not in data:
        lines.append("This plan.json was written before the planner checked its plans: run `planner plan` again "
                     "to see whether this one is a good use of the cluster.")
    else:
        lines.append("No warning: MFU, micro-batches per pipeline stage, tokens per GPU, exposed communication "
                     "and the time spent to fit in memory are all within the planner's thresholds.")
    if data.get("why"):
        lines += ["", "## Why this layout", "", "Each line changes one knob of the plan and re-estimates:", ""]
        lines += [f"- {w}" for w in data["why"]]
    if data.get("runner_ups"):
        lines += ["", "## Alternatives", "",
                  "The best layout of each other family (a tp / pp split, ZeRO-3, offload, context parallel), "
                  "then the next best with another structure; ties within 0.01% go to the simpler layout "
                  "(fewer moving parts, then the lower ZeRO stage, then less memory).", "",
                  "| # | family | layout | step | tokens/s/GPU | MFU | vs best | memory |",
                  "|---|---|---|---|---|---|---|---|"]
        best_tpg = est["tokens_per_s_per_gpu"]
        for r in data["runner_ups"]:
            e = r["estimate"]
            lines.append(f"| {r['rank']} | {r.get('family', '')} | {_layout_text(r['layout'])} | "
                         f"{fmt_seconds(e['step_time_s'])} | {e['tokens_per_s_per_gpu']:,.0f} | "
                         f"{e['mfu'] * 100:.1f}% | {(e['tokens_per_s_per_gpu'] / best_tpg - 1) * 100:+.1f}% | "
                         f"{fmt_bytes(e['peak_memory_bytes'])} |")
    from .ties import report_lines
    lines += report_lines(data)          # bands, ties within model error, OOM risk (issue 9)
    lines += ["", "## Memory per GPU", "", "| part | GiB |", "|---|---|"]
    mem = est["memory_breakdown_bytes"]
    for k, label in MEMORY_LABELS.items():
        v = mem.get(k, 0)
        if v:
            lines.append(f"| {label} | {v / GiB:.2f} |")
    activation_peak = sum(mem.get(k, 0) for k in ACTIVATION_PEAK_PARTS)
    note = step_peak_note(mem.get("step_peak", 0.0), activation_peak)
    if note:
        lines += ["", note[0].upper() + note[1:] + "."]
    if "memory.png" in figures:
        lines += ["", "![memory](memory.png)"]
    lines += ["", "## Time per step", "", "| part | time per step | share |", "|---|---|---|"]
    step = est["step_time_s"]
    for k, label in TIME_LABELS.items():
        v = est["time_breakdown_s"].get(k, 0)
        if v > 1e-9:
            lines.append(f"| {label} | {fmt_seconds(v)} | {v / step * 100:.1f}% |")
    for k, v in (est.get("hidden_comm_s") or {}).items():
        lines.append(f"| {HIDDEN_LABELS[k]} | {fmt_seconds(v)} | overlapped with compute, not in the step |")
    if "time.png" in figures:
        lines += ["", "![time](time.png)"]
    if "layouts.png" in figures:
        lines += ["", "![layouts](layouts.png)"]
    if "tradeoff.png" in figures:
        lines += ["", "## Trade-off", "", "![tradeoff](tradeoff.png)"]
    if data.get("megatron_args"):
        req = data["requires"]
        lines += ["", "## Running it", "",
                  f"`launch.sh` starts Megatron-DeepSpeed's `pretrain_gpt.py` with the `{data['launcher']}` launcher "
                  f"(`LAUNCHER=torchrun` for torchrun) and `ds_config.json`. It needs DeepSpeed `{req['deepspeed']}` "
                  f"(tested {req['deepspeed_tested']}; 0.19 dropped `deepspeed.compression`, which Megatron-DeepSpeed "
                  f"imports) and Megatron-DeepSpeed at commit `{req['megatron_deepspeed_commit'][:8]}`. "
                  "(later commits break grouped-query attention and rotary embeddings). "
                  "Fill in the data, checkpoint and tokenizer paths at the top of the script."]
        sch = data.get("schedule")
        if sch:
            if sch["from_tokens"]:
                iters = (f"`--train-iters {sch['train_iters']:,}`: the token budget over "
                         f"{sch['tokens_per_step']:,} tokens per step, rounded up")
            else:
                iters = (f"`--train-iters {sch['train_iters']:,}` is a placeholder (no token budget was given: "
                         "`--tokens` sets it)")
            lines += ["", f"Training length and learning rate: {iters}. The learning-rate schedule written is "
                      f"a **default to review**, not tuned for this model: {sch['decay_style']} decay from "
                      f"{sch['lr']} to {sch['min_lr']} over the training iterations after "
                      f"{sch['warmup_iters']:,} warm-up iterations, weight decay {sch['weight_decay']}, Adam "
                      f"betas {sch['adam_beta1']} / {sch['adam_beta2']}."]
        if data.get("env"):
            from .emit.megatron_ds import ENV_REASONS
            lines.append("Environment for every rank (also in `.deepspeed_env` for multi-node runs, which the "
                         "deepspeed launcher exports to every node): "
                         + "; ".join(f"`{k}={v}`" + (f" ({ENV_REASONS[k]})" if k in ENV_REASONS else "")
                                     for k, v in sorted(data["env"].items())) + ".")
    trust = evidence_lines(data)
    if trust:
        lines += ["", "## How far to trust these numbers", ""] + [f"- {t}" for t in trust]
    lines += ["", "## Where the numbers come from", "", est["flop_formula"] + ".", ""]
    lines += [f"- {a}: {b}" for a, b in SOURCES]
    lines.append("")
    return "\n".join(lines)
