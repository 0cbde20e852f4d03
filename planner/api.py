"""Python API: `planner.estimate(...)` and `planner.plan(...)`.

Both accept presets, file paths or mappings for the model and the cluster, exactly as the CLI.
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property

from costmodels.errors import SpecError
from costmodels.estimate import estimate as _estimate
from costmodels.types import Estimate
from costmodels.units import HOUR, parse_number

from .advice import PlanWarning
from .arguments import batch_token_range, path_text, shown
from .specs import Case, case_from_dict, load_case


@dataclass(frozen=True)
class EstimateResult:
    case: Case
    estimate: Estimate
    total_tokens: float = 0.0
    defaults: tuple[str, ...] = field(default=())
    warnings: tuple = field(default=())        # advice.PlanWarning: model notes, broken framework rules

    @property
    def hidden_comm(self) -> dict[str, float]:
        """Communication hidden behind compute, seconds per step by part (not in the step time)."""
        from .breakdown import hidden_communication

        c = self.case
        return hidden_communication(c.model, c.cluster, c.framework, c.layout, self.estimate)

    @property
    def offload_needs(self) -> dict | None:
        """Host memory / NVMe per node an offload layout needs, with the cluster's (None: no offload)."""
        from .breakdown import offload_needs

        c = self.case
        return offload_needs(c.model, c.cluster, c.framework, c.layout)

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

    @property
    def currency(self) -> str:
        """The currency of `cost` as the cluster's price states it ('' when it does not)."""
        return self.case.cluster.price_currency

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

    def __repr__(self) -> str:
        c = self.case
        return (f"EstimateResult({c.model.name} on {c.layout.world} x {c.cluster.gpu.name}, "
                f"{c.framework.name}: {self.estimate!r}; {len(self.warnings)} warnings)")

    def to_dict(self) -> dict:
        """The JSON object of `planner estimate --json` (planner.serialise)."""
        from .serialise import estimate_result_dict

        return estimate_result_dict(self)


# Argument checks at the API boundary: a wrong type or shape is a SpecError naming the argument and
# what it takes, never a TypeError / ValueError from deep inside (shared ones: planner/arguments.py).

def whole_number(value, what: str, takes: str) -> int:
    """An int (numpy's too), a float with no fraction (64.0) or its plain text ('64'); never a bool
    and never a fraction silently cut (64.5 is refused, not read as 64)."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    x = None
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        x = float(value)
    elif isinstance(value, str) and value.strip().isascii():     # plain number text: '64', '4e3'
        try:
            x = float(value.strip())
        except ValueError:
            x = None
    if x is None or not math.isfinite(x) or not x.is_integer():
        raise SpecError(f"{what} takes {takes}, got {shown(value)}")
    return int(x)


SEQ_LENS_TAKE = "a whole number of tokens or a list of them (e.g. 4096 or [2048, 4096])"


def seq_lens_arg(seq_lens) -> tuple[int, ...]:
    """`seq_lens`: one length (4096) or an iterable of lengths, each a whole number; () when None."""
    if seq_lens is None:
        return ()
    if isinstance(seq_lens, (numbers.Real, str)):
        items = [seq_lens]
    elif isinstance(seq_lens, Iterable) and not isinstance(seq_lens, (bytes, Mapping)):
        items = list(seq_lens)
    else:
        raise SpecError(f"seq_lens takes {SEQ_LENS_TAKE}, got {shown(seq_lens)}")
    return tuple(whole_number(s, "seq_lens", SEQ_LENS_TAKE) for s in items)


BATCH_TOKENS_TAKE = ("a (low, high) pair of token counts per step, e.g. (2**20, 2**22), or (n, n) for one "
                     "target; or a range string as on the command line, e.g. '1M-4M' or '16M' "
                     "(K / M / G = 2^10 / 2^20 / 2^30)")


def batch_tokens_arg(value) -> tuple[float, float]:
    """`global_batch_tokens`: a (low, high) pair of numbers, or the CLI's text ('1M-4M', '16M')."""
    if isinstance(value, str):
        try:
            return batch_token_range(value)     # the CLI's parser
        except SpecError:
            raise SpecError(f"global_batch_tokens takes {BATCH_TOKENS_TAKE}; got {shown(value)}") from None
    pair = list(value) if isinstance(value, Iterable) and not isinstance(value, (bytes, Mapping)) else None
    if pair is None or len(pair) != 2 or \
            any(isinstance(v, bool) or not isinstance(v, numbers.Real) for v in pair):
        raise SpecError(f"global_batch_tokens takes {BATCH_TOKENS_TAKE}; got {shown(value)}")
    from search_spaces.space import check_batch_tokens
    check_batch_tokens(*pair)           # finite, above 0, LOW <= HIGH, not beyond any real run
    lo, hi = (int(v) if isinstance(v, numbers.Integral) else float(v) for v in pair)
    return lo, hi


def choices_arg(choices) -> dict:
    """`choices`: a mapping of knob name (str) to a value or a list / tuple of values; a number must be
    whole (tp 4.5 is refused, not cut to 4)."""
    if choices is None:
        return {}
    if not isinstance(choices, Mapping):
        raise SpecError("choices takes a mapping of knob name to the values allowed, e.g. {'tp': [4, 8], "
                        f"'precision': ['bf16']}}, got {shown(choices)}")
    for name, values in choices.items():
        if not isinstance(name, str):
            raise SpecError(f"choices: knob names are strings such as 'tp' or 'zero', got {shown(name)}")
        for v in values if isinstance(values, (list, tuple)) else (values,):
            if isinstance(v, numbers.Real) and not isinstance(v, (bool, numbers.Integral)) \
                    and not (math.isfinite(float(v)) and float(v).is_integer()):
                raise SpecError(f"choices['{name}'] takes whole numbers or value names (e.g. [4, 8], "
                                f"['bf16']), got {shown(v)}")
    return dict(choices)


def callback_arg(value, what: str, signature: str):
    if value is not None and not callable(value):
        raise SpecError(f"{what} takes a function {signature} or None, got {shown(value)}")
    return value


def framework_arg(framework) -> str:
    """`framework` of plan: one of the rules profiles, by name."""
    from search_spaces.frameworks import PROFILES

    if not isinstance(framework, str):
        raise SpecError(f"framework takes a framework name ({', '.join(PROFILES)}), got {shown(framework)}")
    return framework


def token_budget(value) -> float:
    """A training budget (`total_tokens=`): a token count; 0 or None means no budget, as in a case file's
    training.total_tokens (the command line refuses an explicit `--tokens 0`: planner/arguments.py)."""
    if value is None:
        return 0.0
    try:
        tokens = parse_number(value, what="tokens (training budget)", low=0.0, high=1e18)
    except SpecError as exc:
        raise SpecError(f"{exc}; leave it out for no budget") from None
    if 0 < tokens < 1:          # 1e-300 tokens was planned as 0 us and --train-iters 1
        raise SpecError(f"tokens (training budget) is {value!r}, less than one token; give a token count "
                        "(e.g. 300e9) or leave it out for no budget")
    return tokens


def estimate(case=None, *, model=None, cluster=None, parallel=None, framework=None,
             total_tokens=None, calibration=None) -> EstimateResult:
    """Estimate memory and step time of one layout.

    Either `case` (a path to a case YAML or to a plan.json / plan directory's plan.json, or a mapping
    with model / cluster / parallel sections), or `model`, `cluster` and `parallel` separately (each a
    preset name, a path or a mapping). `calibration`: a calib.yaml path, a mapping of constants or a
    Calibration (planner.calibrate).
    """
    if case is not None and not isinstance(case, Mapping) and str(case).lower().endswith(".json"):
        return _estimate_plan_json(path_text(case, "case", "a plan.json path"), total_tokens, calibration)
    if case is None:
        data = {"model": model, "cluster": cluster, "parallel": parallel or {}}
        if framework:
            data["framework"] = framework
        case_obj = case_from_dict(data)
    elif isinstance(case, Mapping):
        case_obj = case_from_dict(dict(case))
    else:
        case_obj = load_case(path_text(case, "case", "a case YAML path (str or pathlib.Path) or a mapping "
                                       "with model, cluster and parallel sections"))
    calibrated = ()
    if calibration is not None:
        from .calibrate import apply_case, as_constants, check_scope
        constants = as_constants(calibration)
        check_scope(calibration, case_obj.cluster.gpu.name, case_obj.framework.name)
        case_obj = apply_case(case_obj, constants)
        calibrated = (calibrated_note(constants),)
    from search_spaces.frameworks import structural_errors   # the same rules the planner enforces
    preferences = structural_errors(case_obj)
    est = _estimate(case_obj.model, case_obj.cluster, case_obj.framework, case_obj.layout)
    tokens = token_budget(total_tokens if total_tokens is not None else case_obj.training.total_tokens)
    return EstimateResult(case_obj, est, float(tokens or 0.0), case_obj.defaults + calibrated,
                          tuple(PlanWarning(*w) for w in case_obj.warnings) + rule_warnings(case_obj)
                          + tuple(PlanWarning("search_rule", f"estimated anyway: {msg}; collectives that leave "
                                              "the NVLink domain run over the network",
                                              "the planner's search never proposes this layout")
                                  for msg in preferences)
                          + framework_feature_warnings(case_obj))


CALIBRATED_NOTE = "calibrated constants: "


def _estimate_plan_json(path: str, total_tokens, calibration) -> EstimateResult:
    """The layout a plan.json describes, estimated again (with the catalog, or `calibration`); warns when
    the plan's own figures were made with another calibration."""
    from dataclasses import replace

    from .emit.plan_file import case_from_plan_json, defaults_used, load_plan_json
    result = estimate(case_from_plan_json(path), total_tokens=total_tokens, calibration=calibration)
    made = [d for d in defaults_used(load_plan_json(path), path) if d.startswith(CALIBRATED_NOTE)]
    applied = [d for d in result.defaults if d.startswith(CALIBRATED_NOTE)]
    if made and made[0] not in applied:   # the plan's own figures were calibrated otherwise
        uses = applied[0] if applied else "the catalog's"
        result = replace(result, warnings=result.warnings + (PlanWarning(
            "uncalibrated", f"the plan was made with {made[0]}; this estimate uses {uses}",
            "pass the same calib.yaml with --calibration to compare with the plan's figures"),))
    return result


def calibrated_note(constants: dict) -> str:
    """The line an estimate or a plan made with a calibration carries (defaults_used)."""
    return CALIBRATED_NOTE + ", ".join(f"{k} {v:.4g}" for k, v in sorted(constants.items()))


def framework_feature_warnings(case) -> tuple:
    """Megatron-DeepSpeed splits layers evenly (DeepSpeed PipelineModule, partition_method
    'type:transformer'); an uneven split is estimated but cannot be emitted for it. Likewise
    Megatron-Core's activation offload in a framework that has none."""
    out = ()
    if case.layout.first_stage_layers and case.framework.name == "megatron-deepspeed":
        out += (PlanWarning("framework_rule", "megatron-deepspeed cannot set per-stage layer counts "
                            "(its PipelineModule balances transformer layers); the uneven split is "
                            "estimated as Megatron-Core would run it",
                            "use first_stage_layers: 0 and last_stage_layers: 0 for Megatron-DeepSpeed, "
                            "or --framework megatron-core"),)
    if case.layout.cpu_offload_layers and not case.framework.cpu_offloading:
        out += (PlanWarning("framework_rule", f"{case.framework.name} has no layer activation offload "
                            "(Megatron-Core's --cpu-offloading-num-layers); it is estimated as Megatron-Core "
                            "would run it",
                            "use cpu_offload_layers: 0 (DeepSpeed offloads full recompute's checkpoints: "
                            "offload_activations: cpu), or framework: megatron-core in the case file"),)
    return out


def rule_warnings(case) -> tuple:
    """A layout that breaks its target framework's rules is still estimated; each broken rule becomes a
    `framework_rule` warning naming it. Cost-model frameworks without a rule profile (torchtitan, ...)
    have no such rules."""
    from search_spaces.frameworks import case_violations

    profile, broken = case_violations(case)
    return tuple(PlanWarning("framework_rule", f"the layout breaks the {profile.name} rule '{rule.name}': {msg}",
                             (f"{hint}; the planner never proposes this layout" if hint
                              else "the planner never proposes this layout"))
                 for rule, msg, hint in broken)


DEFAULT_BATCH_TOKENS = (2.0**20, 2.0**22)    # 1M-4M tokens per step on up to 4,096 GPUs
# On larger clusters the default range scales with the GPU count: 256-1,024 tokens per GPU per step,
# up to 16M tokens (Llama 3 405B: 16M-token batches on 16K H100, 1,024 tokens per GPU).
DEFAULT_TOKENS_PER_GPU = (256, 1024)
MAX_DEFAULT_BATCH_TOKENS = 2.0**24


def default_batch_tokens(num_gpus: int) -> tuple[float, float]:
    """The global-batch token range searched when no batch is given: 1M-4M (2^20-2^22) up to 4,096
    GPUs, then 256-1,024 tokens per GPU, at most 16M (2^24)."""
    lo_per, hi_per = DEFAULT_TOKENS_PER_GPU
    hi = min(max(DEFAULT_BATCH_TOKENS[1], num_gpus * hi_per), MAX_DEFAULT_BATCH_TOKENS)
    lo = min(max(DEFAULT_BATCH_TOKENS[0], num_gpus * lo_per), hi)
    return float(lo), float(hi)


def fmt_tokens(t: float) -> str:
    """Tokens in the unit convention of --global-batch-tokens (K / M = 2^10 / 2^20)."""
    for unit, size in (("M", 2**20), ("K", 2**10)):
        if t >= size and (t / size) == int(t / size):
            return f"{int(t / size)}{unit}"
    return f"{t:,.0f}"


def _batch_note(lo, hi, seqs, default: bool, num_gpus: int) -> str:
    from search_spaces.space import batch_sequences

    head = f"global batch {fmt_tokens(lo)}-{fmt_tokens(hi)} tokens" if lo != hi else f"global batch {fmt_tokens(lo)} tokens"
    if default:
        head += f" (the default for {num_gpus:,} GPUs)"
    parts = []
    for s in seqs:
        values, rounded = batch_sequences(lo, hi, s)
        if rounded:
            parts.append(f"{values[0]:,} sequences of {s} = {values[0] * s:,} tokens (rounded to the nearest "
                         "whole number of sequences)")
        else:
            parts.append(f"{values[0]:,}-{values[-1]:,} sequences of {s}" if len(values) > 1
                         else f"{values[0]:,} sequences of {s}")
    return head + ": " + "; ".join(parts)


def parse_price(value) -> tuple[float, str]:
    """--price-per-gpu-hour: '2.5', '2.5 USD', 'EUR 2.1', '$2.5' -> (2.5, 'USD') (costmodels.units.parse_price,
    the rule a cluster file's price_per_gpu_hour follows too)."""
    from costmodels.units import parse_price as parse

    return parse(value, "--price-per-gpu-hour")


def plan(model, cluster, *, gpus=None, gpus_per_node=None, global_batch=None, global_batch_tokens=None,
         seq_lens=None, choices=None, objective="time", top_k=5, framework="megatron-deepspeed",
         total_tokens=None, method="auto", storage=None, study_name=None, seed=0, trials=3000,
         progress=None, price_per_gpu_hour=None, advice=True, calibration=None, notify=None):
    """Search the layouts of `model` on `cluster` and return a PlanResult (best first).

    `model` / `cluster`: preset name, file path or mapping (cluster: GPU name = nodes of 8 unless
    `gpus_per_node`). `choices` pins or restricts knobs: {"tp": [4, 8], "precision": ["bf16"]}.
    `global_batch_tokens`: (low, high) tokens per step; without it or `global_batch` the range is
    `default_batch_tokens(gpus)`. `price_per_gpu_hour`: a number or '2.5 USD' (replaces the
    cluster's price and its currency). `advice`: add `warnings` saying what limits a poor plan and what would help.
    `calibration`: a calib.yaml path, a mapping of constants or a Calibration (planner.calibrate).
    `progress(done, total, best)` follows the search; `notify(line)` gets one-line notices (a resumed
    Optuna study).
    """
    from search_spaces.frameworks import load_profile
    from search_spaces.space import SearchRequest

    from .advice import PlanWarning, advise
    from .objectives import parse_objectives
    from .result import PlanResult
    from .search import search
    from .settings import SearchSettings
    from .specs import default_seq_len, load_cluster, load_model

    choices = choices_arg(choices)
    callback_arg(progress, "progress", "progress(done, total, best)")
    callback_arg(notify, "notify", "notify(line)")
    model_warns: list = []
    m = model if hasattr(model, "num_layers") else load_model(model, model_warns)
    c = load_cluster(cluster, num_gpus=gpus, gpus_per_node=gpus_per_node) if not hasattr(cluster, "gpu") else cluster
    if gpus is not None and hasattr(cluster, "gpu"):
        from dataclasses import replace
        c = replace(c, num_gpus=gpus)
    if price_per_gpu_hour is not None:      # the price and its currency replace the cluster's
        from dataclasses import replace
        price, currency = parse_price(price_per_gpu_hour)
        c = replace(c, price_per_gpu_hour=price, price_currency=currency)
    profile = load_profile(framework_arg(framework))
    if calibration is not None:
        from dataclasses import replace
        from .calibrate import apply_cluster, as_constants, check_scope, framework_overrides
        consts = as_constants(calibration)
        check_scope(calibration, c.gpu.name, profile.cost_profile, profile.name)
        base_cluster = c
        c = apply_cluster(c, consts)
        overrides = framework_overrides(consts)
        if overrides:
            profile = replace(profile, cost_overrides=tuple(sorted(overrides.items())))
    if global_batch is not None and global_batch_tokens is not None:
        raise SpecError("give either a global batch in sequences or a token range, not both")
    if global_batch is not None:
        global_batch = whole_number(global_batch, "global_batch", "a positive whole number of sequences "
                                    "per step (e.g. 512)")
    if global_batch is not None and global_batch <= 0:
        raise SpecError(f"global batch must be a positive number of sequences, got {global_batch!r}")
    if global_batch is not None and global_batch > 10**9:
        raise SpecError(f"global batch {global_batch} is beyond any real run (max 10^9 sequences)")
    from .specs import alias_note

    notes = [n for n in (alias_note("gpu", cluster), alias_note("model", model)) if n]
    if calibration is not None:
        notes.append(calibrated_note(consts))
    seqs = seq_lens_arg(seq_lens)
    if not seqs:
        seq, why = default_seq_len(m)
        seqs = (seq,)
        notes.append(f"sequence length {seq} ({why}); --seq-len to change it")
    if any(s <= 0 for s in seqs):
        raise SpecError("sequence lengths must be positive")
    if global_batch is None:
        default = global_batch_tokens is None
        if default:
            global_batch_tokens = default_batch_tokens(c.num_gpus)
        global_batch_tokens = batch_tokens_arg(global_batch_tokens)
        lo, hi = (float(x) for x in global_batch_tokens)
        if 0 < lo <= hi:
            notes.append(_batch_note(lo, hi, sorted(set(seqs)), default, c.num_gpus))
    total_tokens = token_budget(total_tokens)
    top_k = parse_number(top_k, what="top (plans to report)", low=1, high=1000, integer=True)
    seed = parse_number(seed, what="seed", low=0, high=2**32 - 1, integer=True)
    if study_name is not None and (not str(study_name).strip() or not str(study_name).isprintable()
                                   or len(str(study_name)) > 200):
        raise SpecError(f"study name must be a non-empty name of at most 200 printable characters (no "
                        f"newline or escape sequence), got {study_name!r}")
    trials = parse_number(trials, what="trials (the Optuna study's target)", low=1, high=10**7, integer=True)
    if method in ("lattice", "exhaustive") and (storage is not None or study_name is not None):
        raise SpecError("storage and study_name set up an Optuna study, and method='lattice' runs none (it "
                        "scores every layout); leave them out, or use method='optuna'")
    request = SearchRequest(num_gpus=c.num_gpus, global_batch=global_batch,
                            global_batch_tokens=global_batch_tokens, seq_lens=seqs,
                            choices=choices, total_tokens=float(total_tokens or 0.0))
    objectives = parse_objectives(objective)
    measured = None
    if calibration is not None:     # the layouts the calibration's runs measured re-rank those candidates
        from .calibrate import calibration_runs
        from .measured import measured_layouts
        measured = measured_layouts(calibration_runs(calibration), m.name, c.num_gpus)
    settings = SearchSettings(objectives=objectives, top_k=int(top_k), method=method,
                              storage=storage, study_name=study_name, seed=int(seed), trials=int(trials),
                              progress=progress, notify=notify, measured=measured or None)
    found = search(m, c, profile, request, settings)
    warnings = [PlanWarning(*w) for w in model_warns]
    if "cost" in objectives and not c.price_per_gpu_hour:
        warnings.append(PlanWarning("cost", "--objective cost without a price: the cluster has no "
                                    "price_per_gpu_hour, so plans are ranked by GPU-hours",
                                    "give --price-per-gpu-hour (e.g. '2.5 USD') or price_per_gpu_hour in the "
                                    "cluster YAML to see the cost"))
    if "time-to-train" in objectives and not total_tokens:
        warnings.append(PlanWarning("time-to-train", "--objective time-to-train without a token budget: plans "
                                    "are ranked for 1e12 tokens, which orders them as time per token does, and no "
                                    "training time is shown",
                                    "give --tokens (e.g. 2e12) or training.total_tokens in the case file"))
    if advice and objectives[0] != "memory":     # a plan chosen for memory headroom is slow by request
        warnings += advise(found)
    return PlanResult.from_search(found, notes=notes, warnings=warnings,
                                  base_cluster=base_cluster if calibration is not None else None)
