"""Is this plan a good use of the cluster, and what would make it better?

Each check looks at the best plan's estimate; when the plan is poor it says what limits it and
names a fix with its predicted effect, obtained by planning (or, for Optuna searches, re-estimating
the same layout) with that change applied. Thresholds, all documented in the README:

- `low_mfu`: MFU below LOW_MFU (25%).
- `batch_too_small`: fewer than MIN_TOKENS_PER_GPU (1,024) tokens per GPU per step (Llama 3 405B
  trained with 16M-token batches on 16K H100, 1,024 tokens per GPU).
- `pipeline_bubble`: the pipeline bubble takes more than MAX_BUBBLE_SHARE (15%) of the step
  (too few micro-batches per pipeline stage; Narayanan et al. 2021 aim for m >= 4 p).
- `communication_bound`: exposed communication takes more than MAX_COMM_SHARE (30%) of the step.
- `memory_bound`: recomputation and offload traffic take more than MAX_MEMORY_SHARE (10%) of the
  step (the plan spends time to fit in memory).
- `fewer_gpus`: with MFU below LOW_MFU, a quarter or half of the GPUs give a larger share of the
  speed than of the cost.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from costmodels.errors import PlannerError
from costmodels.units import fmt_seconds

LOW_MFU = 0.25
MIN_TOKENS_PER_GPU = 1024
MAX_BUBBLE_SHARE = 0.15
MAX_COMM_SHARE = 0.30
MAX_MEMORY_SHARE = 0.10
MAX_SUGGESTED_BATCH_TOKENS = 2**24        # 16M tokens: the largest published dense-LLM batches
MIN_SPEEDUP = 1.02                         # a suggestion must predict at least 2% more throughput

COMM_PARTS = ("tp_comm", "cp_comm", "pp_comm", "dp_comm", "zero_comm")


@dataclass(frozen=True)
class PlanWarning:
    """One piece of advice: what is wrong (`message`), what to do (`suggestion`) and, where the fix
    was re-estimated, its predicted effect (`predicted`: before / after numbers)."""

    kind: str
    message: str
    suggestion: str = ""
    predicted: dict | None = field(default=None, compare=False)

    def to_dict(self) -> dict:
        d = {"kind": self.kind, "message": self.message, "suggestion": self.suggestion}
        if self.predicted is not None:
            d["predicted"] = dict(self.predicted)
        return d

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}" + (f"; {self.suggestion}" if self.suggestion else "")


def _share(est, *parts) -> float:
    return sum(getattr(est.time, p) for p in parts) / est.step_time_s


def _limiting(est) -> tuple[str, float]:
    """The largest part of the step other than compute, and its share."""
    from .text import TIME_LABELS

    parts = {k: getattr(est.time, k) for k in TIME_LABELS if k != "compute"}
    key = max(parts, key=parts.get)
    return TIME_LABELS[key], parts[key] / est.step_time_s


def _effect(before, after) -> str:
    return (f"MFU {before.mfu * 100:.1f}% -> {after.mfu * 100:.1f}%, "
            f"{before.tokens_per_s_per_gpu:,.0f} -> {after.tokens_per_s_per_gpu:,.0f} tokens/s/GPU")


def _predicted(change: str, before, after, layout=None) -> dict:
    from .text import layout_line

    out = {"change": change, "fits": bool(after.fits), "tight": bool(after.tight), "mfu": [before.mfu, after.mfu],
           "tokens_per_s_per_gpu": [before.tokens_per_s_per_gpu, after.tokens_per_s_per_gpu],
           "step_time_s": [before.step_time_s, after.step_time_s]}
    if layout is not None:
        out["layout"] = layout_line(layout)
    return out


class _Replanner:
    """Plans the problem again with one change (a lattice search, quiet), or re-estimates the same
    layout where the original search was an Optuna study (too large to search again)."""

    def __init__(self, result):
        self.result = result
        self.cache = {}

    def __call__(self, global_batch=None, num_gpus=None):
        key = (global_batch, num_gpus)
        if key not in self.cache:
            self.cache[key] = self._run(global_batch, num_gpus)
        return self.cache[key]

    def _run(self, global_batch, num_gpus):
        from .search import search
        from .settings import SearchSettings

        r = self.result
        if r.method != "lattice":
            if num_gpus is not None:
                return None
            return self._same_layout(global_batch)
        req = r.request
        if global_batch is not None:
            req = replace(req, global_batch=int(global_batch), global_batch_tokens=None)
        cluster = r.cluster
        if num_gpus is not None:
            req = replace(req, num_gpus=int(num_gpus))
            cluster = replace(cluster, num_gpus=int(num_gpus))
        settings = SearchSettings(objectives=r.settings.objectives[:1], top_k=1, method="lattice",
                                  seed=r.settings.seed)
        try:
            return search(r.model, cluster, r.profile, req, settings).best
        except PlannerError:
            return None

    def _same_layout(self, global_batch):
        from costmodels.estimate import estimate

        from .result import Plan

        r = self.result
        layout = r.best.layout
        try:
            layout = layout.replace(gbs=int(global_batch))
            fw = r.profile.load_cost_profile()
            est = estimate(r.model, r.cluster, fw, layout)
        except (PlannerError, ValueError):
            return None
        return Plan(rank=1, layout=layout, estimate=est, objective=())


def _bigger_batch(result) -> int | None:
    """Global batch (sequences) to suggest: doubled until every GPU gets MIN_TOKENS_PER_GPU tokens and
    every pipeline stage at least 4 micro-batches, capped at 16M tokens."""
    l = result.best.layout
    n = result.request.num_gpus
    gbs = l.gbs
    while True:
        tokens = gbs * l.seq_len
        enough = tokens / n >= MIN_TOKENS_PER_GPU and (l.pp == 1 or gbs // (l.mbs * l.dp) >= 4 * l.pp)
        if enough and gbs > l.gbs:
            break
        if tokens * 2 > MAX_SUGGESTED_BATCH_TOKENS or gbs >= 16 * l.gbs:
            break
        gbs *= 2
    return gbs if gbs > l.gbs else None


def advise(result, replan=None) -> list[PlanWarning]:
    """Warnings for the best plan of `result` (a SearchResult: planner.search), each with its fix and predicted effect."""
    best = result.best
    e, l = best.estimate, best.layout
    n = result.request.num_gpus
    replan = replan or _Replanner(result)
    out: list[PlanWarning] = []

    batch_fix = None          # (text, predicted) of a larger global batch, computed once if needed
    def bigger_batch():
        nonlocal batch_fix
        if batch_fix is None:
            batch_fix = ("", None)
            g2 = _bigger_batch(result)
            if g2:
                p = replan(global_batch=g2)
                if p is not None and p.estimate.tokens_per_s_per_gpu > e.tokens_per_s_per_gpu * MIN_SPEEDUP:
                    change = f"global batch {g2:,} sequences ({g2 * l.seq_len / 2**20:,.0f}M tokens)"
                    how = "re-planned" if result.method == "lattice" else "same layout re-estimated"
                    batch_fix = (f"{change}: {_effect(e, p.estimate)} ({how}: {_short(p.layout)}); "
                                 "a larger batch also changes the optimisation: check it against your "
                                 "learning-rate schedule",
                                 _predicted(change, e, p.estimate, p.layout))
        return batch_fix

    tokens_per_gpu = l.gbs * l.seq_len / n
    if tokens_per_gpu < MIN_TOKENS_PER_GPU:
        text, pred = bigger_batch()
        out.append(PlanWarning(
            "batch_too_small",
            f"global batch {l.gbs:,} x {l.seq_len} = {l.gbs * l.seq_len:,} tokens is {tokens_per_gpu:,.0f} tokens "
            f"per GPU on {n:,} GPUs (below {MIN_TOKENS_PER_GPU:,})",
            text or "raise --global-batch or --global-batch-tokens, or use fewer GPUs", pred))

    bubble = _share(e, "bubble")
    if l.pp > 1 and bubble > MAX_BUBBLE_SHARE:
        text, pred = bigger_batch()
        out.append(PlanWarning(
            "pipeline_bubble",
            f"{l.num_microbatches} micro-batch{'es' if l.num_microbatches != 1 else ''} through {l.pp} pipeline "
            f"stages: the pipeline bubble is "
            f"{bubble * 100:.0f}% of the step ({fmt_seconds(e.time.bubble)})",
            text or f"more micro-batches per stage (at least {4 * l.pp}): a larger global batch or fewer stages",
            pred))

    comm = _share(e, *COMM_PARTS)
    if comm > MAX_COMM_SHARE:
        from .text import TIME_LABELS
        worst = max(COMM_PARTS, key=lambda k: getattr(e.time, k))
        text, pred = ("", None)
        if worst in ("dp_comm", "zero_comm"):
            text, pred = bigger_batch()
        out.append(PlanWarning(
            "communication_bound",
            f"exposed communication is {comm * 100:.0f}% of the step (largest: {TIME_LABELS[worst]} "
            f"{fmt_seconds(getattr(e.time, worst))})",
            text or {"tp_comm": "a smaller tp, keeping TP inside the NVLink domain",
                     "cp_comm": "a smaller cp", "pp_comm": "fewer pipeline stages",
                     "dp_comm": "a larger global batch (fewer gradient reductions per token) or bf16 gradients",
                     "zero_comm": "a lower ZeRO stage or a larger micro batch"}[worst], pred))

    mem_share = _share(e, "recompute", "offload")
    if mem_share > MAX_MEMORY_SHARE:
        out.append(_memory_warning(result, mem_share))

    if e.mfu < LOW_MFU:
        label, share = _limiting(e)
        fewer = _fewer_gpus(result, replan)
        fixes = [w for w in out + ([fewer] if fewer else [])
                 if w.predicted and w.predicted["fits"] and not w.predicted["tight"]]
        if fixes:
            top = max(fixes, key=lambda w: w.predicted["mfu"][1])
            text, pred = top.suggestion, top.predicted
        else:
            text, pred = "see the one-knob changes in the why section", None
        out.append(PlanWarning("low_mfu", f"MFU {e.mfu * 100:.1f}% is below {LOW_MFU * 100:.0f}%; the largest "
                               f"cost besides compute is {label} ({share * 100:.0f}% of the step)", text, pred))
        if fewer:
            out.append(fewer)
    return out


def _short(layout) -> str:
    return (f"tp {layout.tp} pp {layout.pp} dp {layout.dp}" + (f" cp {layout.cp}" if layout.cp > 1 else "")
            + f", micro batch {layout.mbs}, {layout.num_microbatches} micro-batches, ZeRO-{layout.zero}, "
            f"recompute {layout.recompute.value}")


def _memory_warning(result, share) -> PlanWarning:
    from costmodels.estimate import estimate
    from costmodels.types import Offload, Recompute
    from costmodels.units import fmt_bytes

    e, l = result.best.estimate, result.best.layout
    what = []
    if l.recompute is not Recompute.NONE:
        what.append(f"recompute {l.recompute.value}")
    if l.offload_optimizer is not Offload.NONE:
        what.append(f"optimizer offload to {l.offload_optimizer.value}")
    if l.offload_params is not Offload.NONE:
        what.append(f"parameter offload to {l.offload_params.value}")
    if l.offload_activations is not Offload.NONE:
        what.append(f"activation checkpoint offload to {l.offload_activations.value}")
    lean = l.replace(recompute=Recompute.NONE, recompute_layers=0, offload_optimizer=Offload.NONE,
                     offload_params=Offload.NONE, offload_activations=Offload.NONE)
    pred, text = None, "more GPUs, or a GPU with more memory"
    try:
        fw = result.profile.load_cost_profile()
        e2 = estimate(result.model, result.cluster, fw, lean)
        change = "the same layout without " + " and ".join(what or ["recompute / offload"])
        has = f"the {result.cluster.gpu.name} has {fmt_bytes(e.hbm_bytes)}"
        need = (f"would be tight ({fmt_bytes(e2.memory.total)} per GPU with the allocator's cache, "
                f"{fmt_bytes(e2.required_memory_bytes)} without; {has})" if e2.tight
                else f"would need {fmt_bytes(e2.memory.total)} per GPU ({has})")
        text = f"{change} {need} and give {_effect(e, e2)}: more GPUs or a GPU with more memory"
        pred = _predicted(change, e, e2, lean)
    except (PlannerError, ValueError):
        pass
    return PlanWarning("memory_bound", f"{' and '.join(what) or 'recompute and offload'}: "
                       f"{share * 100:.0f}% of the step, spent to fit in {fmt_bytes(e.hbm_bytes)} per GPU", text, pred)


def _fewer_gpus(result, replan) -> PlanWarning | None:
    """A quarter or half of the GPUs: what share of the speed, at what share of the cost."""
    e = result.best.estimate
    n = result.request.num_gpus
    gpn = result.cluster.gpus_per_node
    for frac in (4, 2):
        n2 = n // frac
        if n % frac or n2 < gpn or n2 % gpn:
            continue
        p = replan(num_gpus=n2)
        if p is None:
            continue
        speed = p.estimate.tokens_per_s / e.tokens_per_s
        cost = n2 / n
        if speed > cost * 1.2:
            change = f"{n2:,} GPUs"
            return PlanWarning(
                "fewer_gpus",
                f"{n2:,} GPUs give {speed * 100:.0f}% of this speed at {cost * 100:.0f}% of the cost per hour "
                f"({cost / speed * 100:.0f}% of the cost per token)",
                f"{change}: {_effect(e, p.estimate)} (re-planned: {_short(p.layout)})",
                _predicted(change, e, p.estimate, p.layout))
    return None
