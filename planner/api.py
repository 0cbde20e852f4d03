"""Python API: `planner.estimate(...)` and `planner.plan(...)`.

Both accept presets, file paths or mappings for the model and the cluster, exactly as the CLI.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from costmodels.estimate import estimate as _estimate
from costmodels.types import Estimate
from costmodels.units import GiB, HOUR

from .specs import Case, case_from_dict, load_case

FLOP_FORMULA = ("model FLOPs = 3 x forward: 2 FLOP per matmul weight per token (layers + output layer) "
                "plus 4 s h per layer per token for attention (Narayanan et al. 2021 eq. 3 without "
                "recompute, generalised to GQA / SwiGLU); MFU divides by the dense peak of the precision")


@dataclass(frozen=True)
class EstimateResult:
    case: Case
    estimate: Estimate
    total_tokens: float = 0.0
    defaults: tuple[str, ...] = field(default=())

    @property
    def time_to_train_s(self) -> float | None:
        return self.estimate.time_to_train_s(self.total_tokens) if self.total_tokens else None

    @property
    def gpu_hours(self) -> float | None:
        t = self.time_to_train_s
        return None if t is None else t * self.estimate.num_gpus / HOUR

    @property
    def cost(self) -> float | None:
        hours = self.gpu_hours
        price = self.case.cluster.price_per_gpu_hour
        return None if hours is None or not price else hours * price

    @cached_property
    def bands(self) -> dict:
        """80% error bands (issue 9): step_time_band_s, peak_memory_band_bytes, oom_risk, error_band."""
        from .ties import bands_dict
        c = self.case
        return bands_dict(c.model, c.cluster, c.framework, c.layout, self.estimate)

    @property
    def step_time_band_s(self) -> tuple[float, float]:
        return tuple(self.bands["step_time_band_s"])

    @property
    def peak_memory_band_bytes(self) -> tuple[float, float]:
        return tuple(self.bands["peak_memory_band_bytes"])

    @property
    def oom_risk(self) -> bool:
        return self.bands["oom_risk"]

    def to_dict(self) -> dict:
        out = estimate_dict(self.estimate, self.case.framework.name, self.case.cluster.price_per_gpu_hour,
                            self.total_tokens, self.defaults)
        out.update(self.bands)
        return out


def estimate_dict(est: Estimate, framework: str, price: float = 0.0, total_tokens: float = 0.0,
                  defaults=()) -> dict:
    """The JSON shape of `planner estimate --json` (also used inside plan.json)."""
    mem = {k: getattr(est.memory, k) for k in est.memory.__dataclass_fields__}
    mem.update(allocated=est.memory.allocated, reserved=est.memory.reserved, total=est.memory.total)
    time = {k: getattr(est.time, k) for k in est.time.__dataclass_fields__}
    time["step"] = est.time.step
    out = {
        "step_time_s": est.step_time_s,
        "tokens_per_s": est.tokens_per_s,
        "tokens_per_s_per_gpu": est.tokens_per_s_per_gpu,
        "model_tflops_per_gpu": est.model_flop_per_s_per_gpu / 1e12,
        "mfu": est.mfu,
        "hfu": est.hfu,
        "peak_memory_bytes": est.peak_memory_bytes,
        "peak_memory_gib": est.peak_memory_bytes / GiB,
        "hbm_bytes": est.hbm_bytes,
        "headroom_bytes": est.headroom_bytes,
        "fits": est.fits,
        "host_memory_fits": est.host_fits,
        "num_gpus": est.num_gpus,
        "tokens_per_step": est.tokens_per_step,
        "model_flop_per_step": est.model_flop_per_step,
        "hardware_flop_per_step": est.hardware_flop_per_step,
        "flop_formula": FLOP_FORMULA,
        "memory_breakdown_bytes": mem,
        "time_breakdown_s": time,
        "stage_layers": list(est.stage_layers),
        "framework": framework,
        "defaults_used": list(defaults),
    }
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


def estimate(case=None, *, model=None, cluster=None, parallel=None, framework=None,
             total_tokens=None) -> EstimateResult:
    """Estimate memory and step time of one layout.

    Either `case` (a path to a case YAML or a mapping with model / cluster / parallel sections), or
    `model`, `cluster` and `parallel` separately (each a preset name, a path or a mapping).
    """
    if case is None:
        data = {"model": model, "cluster": cluster, "parallel": parallel or {}}
        if framework:
            data["framework"] = framework
        case_obj = case_from_dict(data)
    elif isinstance(case, (str, Path)):
        case_obj = load_case(case)
    else:
        case_obj = case_from_dict(dict(case))
    from search_spaces.frameworks import structural_errors   # the same rules the planner enforces
    structural_errors(case_obj)
    est = _estimate(case_obj.model, case_obj.cluster, case_obj.framework, case_obj.layout)
    tokens = total_tokens if total_tokens is not None else case_obj.training.total_tokens
    from costmodels.units import parse_number
    tokens = parse_number(tokens or 0.0, what="tokens (training budget)", low=0.0, high=1e18)
    return EstimateResult(case_obj, est, float(tokens or 0.0), case_obj.defaults)


DEFAULT_BATCH_TOKENS = (2.0**20, 2.0**22)    # 1M-4M tokens per step when no global batch is given


def plan(model, cluster, *, gpus=None, gpus_per_node=None, global_batch=None, global_batch_tokens=None,
         seq_lens=None, choices=None, objective="time", top_k=5, framework="megatron-deepspeed",
         total_tokens=0.0, method="auto", storage=None, study_name=None, seed=0, trials=3000,
         progress=None):
    """Search the layouts of `model` on `cluster` and return a PlanResult (best first).

    `model` / `cluster`: preset name, file path or mapping (cluster: GPU name = nodes of 8 unless
    `gpus_per_node`). `choices` pins or restricts knobs: {"tp": [4, 8], "precision": ["bf16"]}.
    """
    from costmodels.errors import SpecError
    from costmodels.units import parse_number
    from search_spaces.frameworks import load_profile
    from search_spaces.space import SearchRequest

    from .rank import parse_objectives
    from .search import SearchSettings, search
    from .specs import load_cluster, load_model

    m = model if hasattr(model, "num_layers") else load_model(model)
    c = load_cluster(cluster, num_gpus=gpus, gpus_per_node=gpus_per_node) if not hasattr(cluster, "gpu") else cluster
    if gpus is not None and hasattr(cluster, "gpu"):
        from dataclasses import replace
        c = replace(c, num_gpus=gpus)
    profile = load_profile(framework)
    if global_batch is not None and global_batch_tokens is not None:
        raise SpecError("give either a global batch in sequences or a token range, not both")
    if global_batch is not None and (isinstance(global_batch, bool) or int(global_batch) <= 0):
        raise SpecError(f"global batch must be a positive number of sequences, got {global_batch!r}")
    if global_batch is not None and int(global_batch) > 10**9:
        raise SpecError(f"global batch {global_batch} is beyond any real run (max 10^9 sequences)")
    if global_batch is None and global_batch_tokens is None:
        global_batch_tokens = DEFAULT_BATCH_TOKENS
    seqs = tuple(int(s) for s in (seq_lens or (m.max_seq_len,)))
    if any(s <= 0 for s in seqs):
        raise SpecError("sequence lengths must be positive")
    total_tokens = parse_number(total_tokens or 0.0, what="tokens (training budget)", low=0.0, high=1e18)
    top_k = parse_number(top_k, what="top (plans to report)", low=1, high=1000, integer=True)
    seed = parse_number(seed, what="seed", low=0, high=2**32 - 1, integer=True)
    if study_name is not None and (not str(study_name).strip() or "\0" in str(study_name)
                                   or len(str(study_name)) > 200):
        raise SpecError(f"study name must be a non-empty name of at most 200 characters, got {study_name!r}")
    trials = parse_number(trials, what="trials (the Optuna study's target)", low=1, high=10**7, integer=True)
    request = SearchRequest(num_gpus=c.num_gpus, global_batch=global_batch,
                            global_batch_tokens=global_batch_tokens, seq_lens=seqs,
                            choices=dict(choices or {}), total_tokens=float(total_tokens or 0.0))
    settings = SearchSettings(objectives=parse_objectives(objective), top_k=int(top_k), method=method,
                              storage=storage, study_name=study_name, seed=int(seed), trials=int(trials),
                              progress=progress)
    return search(m, c, profile, request, settings)
