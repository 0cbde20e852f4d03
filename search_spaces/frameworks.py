"""Rules profiles: the rules of the software a plan is for, kept in one place.

"Framework" means two things in the planner, named apart in code:

- a *rules profile* (RulesProfile, here; `planner plan --framework NAME`): what the software allows,
  so what the search may propose (the structural rules, constraints.STRUCTURAL, + its own), and the
  target whose job files planner.emit writes;
- a *cost profile* (costmodels.types.Framework, catalog `frameworks/*.yaml`): how the software's
  implementation costs time and memory (overlap, fused kernels, optimizer state).

A rules profile names the cost profile it is scored with in `cost_profile`, and the two names need not
agree: `--framework megatron-lm` (today's Megatron-LM / Megatron-Core rules) is scored with
`megatron-core.yaml`, while the cost profiles `megatron-lm-2021.yaml` and `megatron-lm.yaml` describe
the Megatron-LM of 2021 and of 2022-23 (validation runs). `planner estimate` takes a cost profile by name (a case's `framework:`).

The default target is microsoft/Megatron-DeepSpeed; its rules and silent no-ops are those of
../shared/megatron_deepspeed.md §3-4 (source lines there). `megatron-lm` is the second profile: NVIDIA
Megatron-LM / Megatron-Core with interleaving, ring context parallelism, the distributed optimizer and
fp8 with GQA.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from costmodels import catalog
from costmodels.errors import UnknownPresetError
from costmodels.types import Framework, Precision, GradComm, Offload, Recompute, Sparsity

from .constraints import FP8, SELECTIVE, STRUCTURAL, Rule, _implies
from .knobs import BY_NAME
from .layouts import layout_columns


@dataclass(frozen=True)
class RulesProfile:
    """What `--framework` selects for a search: the software's rules and job target, and the name of the
    cost profile its layouts are scored with (see the module docstring for the two notions)."""

    name: str
    cost_profile: str            # costmodels catalog frameworks/<cost_profile>.yaml
    rules: tuple[Rule, ...]      # framework rules (structural ones are added by `all_rules`)
    description: str
    cost_overrides: tuple = ()   # (field, value) pairs replaced on the cost profile (a calibration)
    emitter: str = ""            # the target whose job files planner.emit writes ("" = plan.json and report only)

    @property
    def all_rules(self) -> tuple[Rule, ...]:
        return STRUCTURAL + self.rules

    def load_cost_profile(self) -> Framework:
        """The cost profile's constants, with the calibration's overrides: what every estimate of a plan
        made with this profile uses."""
        cost = catalog.load_framework(self.cost_profile)
        return replace(cost, **dict(self.cost_overrides)) if self.cost_overrides else cost


def _ulysses_ok(ctx, c):
    m = ctx.model
    return (c["cp"] == 1) | ((c["pp"] == 1) & (c["tp"] == 1) & (c["flash_attention"] == 1)
                             & (m.num_heads == m.num_kv_heads) & (m.position != "rope")
                             & (m.num_heads % c["cp"] == 0))


def _ulysses(ctx, v, e):
    m = ctx.model
    cond = [v.ge("cp", 2)]
    if m.num_heads != m.num_kv_heads or m.position == "rope":
        _implies(v, e, cond, v.m.add(v["cp"] < 0))      # impossible: cp must stay 1
        return
    _implies(v, e, cond, v.m.add(v["pp"] == 1))
    _implies(v, e, cond, v.m.add(v["tp"] == 1))
    _implies(v, e, cond, v.m.add(v["flash_attention"] == 1))
    v.m.add(v.remainder(m.num_heads, v["cp"], "heads%cp") == 0).only_enforce_if(e)


def _fp8_ok_model(m) -> bool:
    """Transformer Engine's TransformerLayer in Megatron-DeepSpeed is built with its defaults:
    LayerNorm, GeLU, biases, no GQA (transformer.py:1772-1800)."""
    return (m.num_kv_heads == m.num_heads and m.norm == "layernorm" and not m.gated_mlp and m.bias)


def _zeropp(ctx, v, e):
    multi_node = ctx.num_gpus > ctx.cluster.gpus_per_node
    cond = [v.eq("grad_comm", GradComm.ZEROPP.code)]
    if not multi_node:
        _implies(v, e, cond, v.m.add(v["tp"] < 0))
        return
    _implies(v, e, cond, v.m.add(v["tp"] == 1))
    _implies(v, e, cond, v.m.add(v["cp"] == 1))


_DENSE_ONLY = Rule(
    "dense-weights", "{name} has no 2:4 sparse training path; sparsity must be dense", ("sparsity",),
    lambda ctx, c: c["sparsity"] == Sparsity.DENSE.code,
    lambda ctx, v, e: v.m.add(v["sparsity"] == Sparsity.DENSE.code).only_enforce_if(e))

MEGATRON_DEEPSPEED_RULES = (
    Rule("mds-zero-needs-no-pipeline",
         "ZeRO-2/3 need --no-pipeline-parallel, so pp = 1 (DeepSpeed PipelineEngine asserts ZeRO < 2)",
         ("zero", "pp"), lambda ctx, c: (c["zero"] < 2) | (c["pp"] == 1),
         lambda ctx, v, e: _implies(v, e, [v.ge("zero", 2)], v.m.add(v["pp"] == 1))),
    Rule("mds-no-interleaving",
         "Megatron-DeepSpeed has no interleaved pipeline under --deepspeed (vpp must be 1)",
         ("vpp",), lambda ctx, c: c["vpp"] == 1,
         lambda ctx, v, e: v.m.add(v["vpp"] == 1).only_enforce_if(e)),
    Rule("mds-no-sequence-parallel",
         "--sequence-parallel under --deepspeed never all-reduces the norm gradients over TP "
         "(training.py skips reduce_model_grads), so the replicas drift; it is not used",
         ("sequence_parallel",), lambda ctx, c: c["sequence_parallel"] == 0,
         lambda ctx, v, e: v.m.add(v["sequence_parallel"] == 0).only_enforce_if(e)),
    Rule("mds-no-tp-comm-overlap",
         "Megatron-DeepSpeed has no --tp-comm-overlap (TP collectives pipelined with GEMMs are Megatron-Core's)",
         ("tp_comm_overlap",), lambda ctx, c: c["tp_comm_overlap"] == 0,
         lambda ctx, v, e: v.m.add(v["tp_comm_overlap"] == 0).only_enforce_if(e)),
    Rule("mds-fp8-transformer-engine",
         "fp8 needs Transformer Engine, which Megatron-DeepSpeed builds only without pipeline parallelism and "
         "with TE's defaults (LayerNorm, GeLU, biases, no GQA)", ("precision", "pp"),
         lambda ctx, c: (c["precision"] != FP8) | ((c["pp"] == 1) & _fp8_ok_model(ctx.model)),
         lambda ctx, v, e: _implies(v, e, [v.eq("precision", FP8)], v.m.add(
             v["pp"] == 1 if _fp8_ok_model(ctx.model) else v["pp"] < 0))),
    Rule("mds-no-1bit", "1-bit Adam is not reachable: Megatron-DeepSpeed passes its own optimizer",
         ("grad_comm",), lambda ctx, c: c["grad_comm"] != GradComm.ONEBIT.code,
         lambda ctx, v, e: v.m.add(v["grad_comm"] != GradComm.ONEBIT.code).only_enforce_if(e)),
    Rule("mds-ulysses", "DeepSpeed sequence parallelism (cp > 1) works in Megatron-DeepSpeed only with tp = 1, "
         "pp = 1, FlashAttention, no GQA, no RoPE, and cp dividing the {m.num_heads} heads",
         ("cp", "tp", "pp", "flash_attention"), _ulysses_ok, _ulysses),
    Rule("mds-selective-with-flash",
         "selective recompute does nothing with FlashAttention in Megatron-DeepSpeed", ("recompute", "flash_attention"),
         lambda ctx, c: (c["recompute"] != SELECTIVE) | (c["flash_attention"] == 0),
         lambda ctx, v, e: _implies(v, e, [v.eq("recompute", SELECTIVE)], v.m.add(v["flash_attention"] == 0))),
    Rule("mds-partial-recompute-needs-no-pipeline",
         "recomputing only some layers (--recompute-method block) does nothing under the DeepSpeed pipeline; "
         "use pp = 1 or recompute all layers", ("recompute_layers", "pp"),
         lambda ctx, c: (c["recompute_layers"] == 0) | (c["pp"] == 1),
         lambda ctx, v, e: _implies(v, e, [v.ge("recompute_layers", 1)], v.m.add(v["pp"] == 1))),
    Rule("mds-zeropp", "ZeRO++ quantised gradients need tp = 1, cp = 1 and more than one node (DeepSpeed builds "
         "their all-to-all groups over the whole world and skips them on one node)", ("grad_comm", "tp", "cp"),
         lambda ctx, c: (c["grad_comm"] != GradComm.ZEROPP.code)
         | ((c["tp"] == 1) & (c["cp"] == 1) & (ctx.num_gpus > ctx.cluster.gpus_per_node)),
         _zeropp),
    Rule("mds-zeropp-fp16-only",
         "ZeRO++ quantised weights and gradients read their input as fp16 in DeepSpeed 0.16.2 "
         "(csrc/quantization/pt_binding.cpp: quantize / swizzle_quant cast to __half), so bf16 training "
         "would be silently wrong; use grad_comm bf16 or fp32, or fp16 precision", ("grad_comm", "precision"),
         lambda ctx, c: (c["grad_comm"] != GradComm.ZEROPP.code) | (c["precision"] == Precision.FP16.code),
         lambda ctx, v, e: _implies(v, e, [v.eq("grad_comm", GradComm.ZEROPP.code)],
                                    v.m.add(v["precision"] == Precision.FP16.code))),
    Rule("mds-nvme-optimizer-needs-zero3",
         "NVMe optimizer offload needs ZeRO-3 (ZeRO-1/2 silently offload to CPU instead)",
         ("offload_optimizer", "zero"),
         lambda ctx, c: (c["offload_optimizer"] != Offload.NVME.code) | (c["zero"] == 3),
         lambda ctx, v, e: _implies(v, e, [v.eq("offload_optimizer", Offload.NVME.code)], v.m.add(v["zero"] == 3))),
    Rule("mds-position-embeddings",
         "Megatron-DeepSpeed has learned or rotary positions only; this ALiBi model needs another framework",
         (), lambda ctx, c: np.asarray(ctx.model.position != "alibi"),
         # never satisfiable for an ALiBi model: the rule's literal is forced false (it names no knob,
         # so it may sit in a sub-lattice without tp)
         lambda ctx, v, e: None if ctx.model.position != "alibi" else v.m.add(e == 0)),
    _DENSE_ONLY,
)

MEGATRON_LM_RULES = (
    Rule("mlm-layers-divide", "Megatron-LM needs the {m.num_layers} layers divisible by pp", ("pp",),
         lambda ctx, c: ctx.model.num_layers % c["pp"] == 0,
         lambda ctx, v, e: v.m.add(v.remainder(ctx.model.num_layers, v["pp"], "L%pp") == 0).only_enforce_if(e)),
    Rule("mlm-sharding", "Megatron-LM shards the optimizer (--use-distributed-optimizer, ZeRO-1) or everything "
         "(--use-torch-fsdp2, ZeRO-3); there is no ZeRO-2", ("zero",), lambda ctx, c: c["zero"] != 2,
         lambda ctx, v, e: v.m.add(v["zero"] != 2).only_enforce_if(e)),
    Rule("mlm-no-offload", "this Megatron-LM profile does not offload to CPU or NVMe",
         ("offload_optimizer", "offload_params", "offload_activations"),
         lambda ctx, c: ((c["offload_optimizer"] == Offload.NONE.code) & (c["offload_params"] == Offload.NONE.code)
                         & (c["offload_activations"] == Offload.NONE.code)),
         lambda ctx, v, e: (v.m.add(v["offload_optimizer"] == 0).only_enforce_if(e),
                            v.m.add(v["offload_params"] == 0).only_enforce_if(e),
                            v.m.add(v["offload_activations"] == 0).only_enforce_if(e))),
    Rule("mlm-grad-comm", "Megatron-LM reduces gradients in fp32 or bf16 only", ("grad_comm",),
         lambda ctx, c: c["grad_comm"] <= GradComm.BF16.code,
         lambda ctx, v, e: v.m.add(v["grad_comm"] <= GradComm.BF16.code).only_enforce_if(e)),
    _DENSE_ONLY,
)

PROFILES = {
    "megatron-deepspeed": RulesProfile(
        "megatron-deepspeed", "megatron-deepspeed", MEGATRON_DEEPSPEED_RULES,
        "microsoft/Megatron-DeepSpeed pretrain_gpt.py with DeepSpeed (launch.sh + ds_config.json)",
        emitter="megatron-deepspeed"),
    "megatron-lm": RulesProfile(
        "megatron-lm", "megatron-core", MEGATRON_LM_RULES,
        "NVIDIA Megatron-LM / Megatron-Core (interleaving, ring context parallel, distributed optimizer)"),
}


def case_violations(case) -> tuple:
    """(profile, [(rule, message, hint), ...]) of the rules a case's layout breaks under its framework's
    rules profile; (None, []) for a cost profile without one (torchtitan, ...)."""
    if case.framework.name not in PROFILES:
        return None, []
    profile = PROFILES[case.framework.name]
    return profile, list(framework_violations(case.model, case.cluster, case.layout, profile))


def load_profile(name: str) -> RulesProfile:
    if name not in PROFILES:
        err = UnknownPresetError("framework", name, list(PROFILES))
        # a search needs a framework's rules, which only these profiles have: no file path here
        err.args = (str(err).replace(" (or pass a YAML file path)", " (plan searches under these two "
                                                                      "frameworks' rules only)"),)
        raise err
    return PROFILES[name]


def _registry(*groups) -> dict[str, Rule]:
    """Every rule by name, each once (profiles may share one); two rules under one name are refused."""
    rules: dict[str, Rule] = {}
    for rule in (r for group in groups for r in group):
        if rules.setdefault(rule.name, rule) is not rule:
            raise ValueError(f"two rules are named {rule.name}")
    return rules


# The one registry of rules: each checks a layout (holds / encode) and describes itself (Rule.describe).
RULES = _registry(STRUCTURAL, *(p.rules for p in PROFILES.values()))


def check_columns(rules, ctx, cols) -> np.ndarray:
    """Boolean mask: every rule holds (numpy, vectorised over the columns)."""
    n = len(next(iter(cols.values())))
    ok = np.ones(n, dtype=bool)
    for rule in rules:
        ok &= np.broadcast_to(rule.holds(ctx, cols), (n,))
    return ok


def violated(rules, ctx, layout) -> list[Rule]:
    cols = layout_columns(layout)
    return [r for r in rules if not bool(np.asarray(r.holds(ctx, cols)).reshape(-1)[0])]


def _fix_hint(rule: Rule, ctx, layout, rules) -> str:
    """Values of the rule's first knob that would satisfy it, others unchanged ("" for a rule on the
    model alone, which names no knob: no layout value fixes it)."""
    from .space import build_space, SearchRequest

    if not rule.knobs:
        return ""
    knob = rule.knobs[0]
    try:
        space = build_space(ctx.model, ctx.cluster, SearchRequest(num_gpus=ctx.num_gpus,
                                                                  global_batch=layout.gbs,
                                                                  seq_lens=(layout.seq_len,)))
    except Exception:   # noqa: BLE001 - a hint is optional
        return ""
    good = []
    for value in space.domain(knob):
        trial = dict(layout_columns(layout))
        trial[knob] = np.array([value])
        if bool(np.asarray(rule.holds(ctx, trial)).reshape(-1)[0]):
            shown = BY_NAME[knob].decode(value)
            good.append(str(shown).lower() if isinstance(shown, bool) else shown)
    if not good:
        return ""
    shown = ", ".join(str(v) for v in good[:8]) + (" ..." if len(good) > 8 else "")
    return f"; {knob} could be {shown}"


def check_layout(model, cluster, layout, profile: RulesProfile | None = None, skip=()) -> None:
    """Raise SpecError naming the first rule the layout breaks (structural, plus the profile's);
    rules named in `skip` are not checked."""
    from costmodels.errors import SpecError
    from .constraints import Ctx

    ctx = Ctx(model, cluster, layout.world)
    rules = [r for r in (profile.all_rules if profile else STRUCTURAL) if r.name not in skip]
    bad = violated(rules, ctx, layout)
    if bad:
        rule = bad[0]
        name = profile.name if profile else "any framework"
        raise SpecError(f"layout breaks a rule: {rule.describe(ctx, name)}{_fix_hint(rule, ctx, layout, rules)}")


def uneven_pipeline_error(model, layout) -> str | None:
    """Megatron-Core's uneven split (--decoder-first/last-pipeline-num-layers): both counts given, at
    least one layer per stage, the rest split evenly over the middle stages. None when it holds."""
    first, last, pp, n = layout.first_stage_layers, layout.last_stage_layers, layout.pp, model.num_layers
    if not first and not last:
        return None
    if not (first and last):
        return (f"first_stage_layers {first} and last_stage_layers {last}: give both, each 1 or more (0 means "
                "an even split), or neither")
    if pp < 2:
        return "first_stage_layers / last_stage_layers need pp >= 2"
    rest = n - first - last
    middle = pp - 2
    if middle == 0 and rest != 0:
        return (f"with pp 2 the first and last stages hold all {n} layers: first_stage_layers {first} + "
                f"last_stage_layers {last} must be {n}")
    stages = f"{middle} middle stage{'s' if middle != 1 else ''}"
    if rest < 0:
        return (f"first_stage_layers {first} + last_stage_layers {last} are more than the model's {n} layers")
    if rest < middle:
        return (f"first_stage_layers {first} + last_stage_layers {last} leave {rest} of the {n} layers "
                f"for the {stages}, which need at least one each")
    if middle > 0 and rest % middle:
        return (f"first_stage_layers {first} + last_stage_layers {last} leave {rest} of the {n} layers, which "
                f"do not split evenly over the {stages}")
    vpp = layout.vpp
    if vpp > 1:
        # Interleaving splits each stage into vpp chunks. Megatron-Core takes an uneven split with
        # vpp in two ways: --decoder-first/last-pipeline-num-layers, each divisible by vpp (NVIDIA/
        # Megatron-LM d98e8a64dd megatron/core/transformer/transformer_config.py:2306-2335), or
        # --account-for-embedding/loss-in-pipeline-split, where the embedding and the loss count as
        # one layer each, so the first and last stages hold one layer fewer than the others and every
        # stage's count is divisible by vpp (transformer_block.py:150-160).
        per_mid = rest // middle if middle else None
        flags = first % vpp == 0 and last % vpp == 0 and (per_mid is None or per_mid % vpp == 0)
        account = (first == last and (n + 2) % pp == 0 and first == (n + 2) // pp - 1
                   and ((n + 2) // pp) % vpp == 0)
        if not (flags or account):
            return (f"with vpp {vpp}, first_stage_layers {first} and last_stage_layers {last} must each be "
                    f"divisible by vpp (--decoder-first/last-pipeline-num-layers), or be one layer fewer "
                    f"than the {(n + 2) // pp if (n + 2) % pp == 0 else 'other'} of every other stage with "
                    f"that count divisible by vpp (--account-for-embedding/loss-in-pipeline-split)")
    return None


def cpu_offload_error(model, layout) -> str | None:
    """Megatron-Core's activation offload (--cpu-offloading-num-layers N) as Megatron-Core accepts it
    (Megatron-LM d98e8a64dd megatron/core/transformer/transformer_config.py:1884-1900): N below the
    model's layers, no pipeline parallelism, no activation recomputation; and not together with
    DeepSpeed's checkpoint offload. None when it holds."""
    n = layout.cpu_offload_layers
    if not n:
        return None
    if n >= model.num_layers:
        return (f"cpu_offload_layers {n} must be below the model's {model.num_layers} "
                f"layer{'s' if model.num_layers != 1 else ''} "
                "(Megatron-Core offloads fewer layers than the model has)")
    if layout.pp > 1:
        return "cpu_offload_layers needs pp = 1 (Megatron-Core has no activation offload with pipeline parallelism)"
    if layout.recompute is not Recompute.NONE:
        return ("cpu_offload_layers needs recompute none (Megatron-Core's activation offload does not work "
                "with activation recomputation); DeepSpeed's checkpoint offload is offload_activations: cpu")
    if layout.offload_activations is not Offload.NONE:
        return "cpu_offload_layers and offload_activations are two kinds of activation offload: use one"
    return None


def framework_violations(model, cluster, layout, profile: RulesProfile) -> list[tuple[Rule, str, str]]:
    """The profile's own rules (not the structural ones) that a layout breaks: (rule, message, fix)."""
    from .constraints import Ctx

    ctx = Ctx(model, cluster, layout.world)
    out = []
    for rule in violated(profile.rules, ctx, layout):
        hint = _fix_hint(rule, ctx, layout, profile.all_rules).lstrip("; ")
        out.append((rule, rule.describe(ctx, profile.name), hint))
    return out


# Structural rules the search keeps because the layouts they exclude are slow, not impossible: people
# do run them (vTrain measured tp 16 over two 8-GPU nodes), so `planner estimate` prices such a
# layout and says which preference it leaves.
SEARCH_PREFERENCES = ("tp-in-nvlink-domain",)


def structural_errors(case) -> list[str]:
    """Structural rules for a case (any framework): physics and model shape. Raises SpecError on the
    first one broken; returns the messages of the search preferences (SEARCH_PREFERENCES) it leaves."""
    from costmodels.errors import SpecError
    from .constraints import Ctx

    problem = uneven_pipeline_error(case.model, case.layout) or cpu_offload_error(case.model, case.layout)
    if problem:
        raise SpecError(f"layout: {problem}")
    check_layout(case.model, case.cluster, case.layout, skip=SEARCH_PREFERENCES)
    ctx = Ctx(case.model, case.cluster, case.layout.world)
    return [rule.describe(ctx) for rule in violated([r for r in STRUCTURAL if r.name in SEARCH_PREFERENCES],
                                                    ctx, case.layout)]
