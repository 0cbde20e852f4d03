"""Hard rules: each a small named object with a numpy check and a CP-SAT encoding.

`holds(ctx, cols)` takes a mapping knob -> integer array and returns a boolean array;
`encode(ctx, v, enforce)` adds the rule to a CP-SAT model, active when the literal `enforce` is
true (so a solver can name the rules that conflict). Both encodings must agree; a test checks it.
Knob values are integers: enums by their code (types.py), booleans as 0/1.
"""
from __future__ import annotations

import re
import string
from dataclasses import dataclass
from typing import Callable

import numpy as np
from ortools.sat.python import cp_model

from costmodels.types import ClusterSpec, GradComm, ModelSpec, Offload, Precision, Recompute, Sparsity, flash_attention_runs

FULL, SELECTIVE = Recompute.FULL.code, Recompute.SELECTIVE.code
FP8, FP32 = Precision.FP8.code, Precision.FP32.code


@dataclass(frozen=True)
class Ctx:
    """What the rules need besides the knobs."""

    model: ModelSpec
    cluster: ClusterSpec
    num_gpus: int

    @property
    def supported_precisions(self) -> tuple[int, ...]:
        return tuple(p.code for p in Precision if self.cluster.gpu.supports(p))


class Vars:
    """CP-SAT variables of one model: a variable per knob plus cached derived literals."""

    def __init__(self, model: cp_model.CpModel, knobs: dict, upper: dict, lower: dict):
        self.m = model
        self.x = knobs
        self.upper = dict(upper)          # largest value of each variable (knobs and derived ones)
        self.lower = dict(lower)          # smallest value
        self._cache: dict = {}

    def __getitem__(self, name):
        return self.x[name]

    def _lit(self, key, build):
        if key not in self._cache:
            self._cache[key] = build()
        return self._cache[key]

    def eq(self, name, value):
        """Literal <=> knob == value."""
        def build():
            b = self.m.new_bool_var(f"{name}=={value}")
            self.m.add(self.x[name] == value).only_enforce_if(b)
            self.m.add(self.x[name] != value).only_enforce_if(~b)
            return b
        return self._lit(("eq", name, value), build)

    def ge(self, name, value):
        """Literal <=> knob >= value."""
        def build():
            b = self.m.new_bool_var(f"{name}>={value}")
            self.m.add(self.x[name] >= value).only_enforce_if(b)
            self.m.add(self.x[name] < value).only_enforce_if(~b)
            return b
        return self._lit(("ge", name, value), build)

    def product(self, *names):
        """Integer variable equal to the product of the knobs (always holds: a definition)."""
        def build():
            hi, lo = 1, 1
            for n in names:
                hi *= max(1, self.upper[n])
                lo *= max(0, self.lower[n])
            prod = self.m.new_int_var(min(lo, hi), hi, "*".join(names))
            self.m.add_multiplication_equality(prod, [self.x[n] for n in names])
            self.upper[prod.name] = hi
            return prod
        return self._lit(("prod",) + names, build)

    def remainder(self, numerator, divisor, tag):
        """Integer variable equal to numerator % divisor (a definition)."""
        def build():
            hi = int(numerator) if isinstance(numerator, (int, np.integer)) else self.upper[numerator.name]
            r = self.m.new_int_var(0, max(hi, 0), f"rem({tag})")
            self.m.add_modulo_equality(r, numerator, divisor)
            return r
        return self._lit(("rem", tag), build)


# The fields a rule's message may name: {m.num_heads} (the model), {c.nvlink_domain} (the cluster),
# {gpu.name}, {n} (the GPU count) and {name} (the framework whose rule it is).
MESSAGE_FIELDS = frozenset({"m", "c", "gpu", "n", "name"})


@dataclass(frozen=True)
class Rule:
    """One rule, checked (`holds` in numpy, `encode` in CP-SAT) and described (`describe`) by the same
    object: the only place a rule's message is filled in."""

    name: str
    message: str                                        # str.format template over MESSAGE_FIELDS
    knobs: tuple[str, ...]
    holds: Callable[[Ctx, dict], np.ndarray]
    encode: Callable[[Ctx, Vars, object], None]

    def __post_init__(self):
        unknown = sorted({f for f in _template_fields(self.message) if f not in MESSAGE_FIELDS})
        if unknown:
            raise ValueError(f"rule {self.name}: its message names {', '.join(unknown)}; a message may name "
                             f"only {', '.join(sorted(MESSAGE_FIELDS))}")

    def describe(self, ctx: Ctx, framework: str = "any framework") -> str:
        """The message for this model, cluster and GPU count; {name} is `framework`."""
        return self.message.format(m=ctx.model, c=ctx.cluster, gpu=ctx.cluster.gpu, n=ctx.num_gpus,
                                   name=framework)


def _template_fields(message: str) -> set[str]:
    """The root names a str.format template uses ('m' of '{m.num_heads}')."""
    roots = set()
    for _, field_name, _, _ in string.Formatter().parse(message):
        if field_name is not None:
            roots.add(re.split(r"[.\[]", field_name, maxsplit=1)[0])
    return roots


def _implies(v: Vars, enforce, conditions, constraint):
    """constraint holds when `enforce` and every condition literal hold."""
    constraint.only_enforce_if([enforce] + list(conditions))


# ---- structural rules: physics and model shape, true for every framework ------------------------

def _offload_activations(ctx, v, e):
    on = v.ge("offload_activations", 1)
    for constraint in (v["offload_activations"] == Offload.CPU.code, v["recompute"] == FULL,
                       v["recompute_layers"] == 0):
        _implies(v, e, [on], v.m.add(constraint))


def _world(ctx, v, e):
    v.m.add(v.product("tp", "pp", "dp", "cp") == ctx.num_gpus).only_enforce_if(e)


def _tp_heads(ctx, v, e):
    v.m.add(v.remainder(ctx.model.num_heads, v["tp"], "heads%tp") == 0).only_enforce_if(e)
    v.m.add(v.remainder(ctx.model.num_kv_heads, v["tp"], "kv%tp") == 0).only_enforce_if(e)


def _tp_ffn(ctx, v, e):
    v.m.add(v.remainder(ctx.model.ffn_hidden, v["tp"], "ffn%tp") == 0).only_enforce_if(e)


def _batch(ctx, v, e):
    v.m.add(v.remainder(v["gbs"], v.product("mbs", "dp"), "gbs%(mbs*dp)") == 0).only_enforce_if(e)


def _sp_seq(ctx, v, e):
    r = v.remainder(v["seq_len"], v["tp"], "seq%tp")
    _implies(v, e, [v.eq("sequence_parallel", 1)], v.m.add(r == 0))


def _cp_seq(ctx, v, e):
    two_cp = v._lit(("2cp",), lambda: _scaled(v, "cp", 2))
    r = v.remainder(v["seq_len"], two_cp, "seq%2cp")
    _implies(v, e, [v.ge("cp", 2)], v.m.add(r == 0))


def _fp8_widths_ok(m: ModelSpec, tp):
    """Transformer Engine's fp8 GEMMs need each weight's input width divisible by 16 and its output width
    and the tokens by 8 (transformer_engine/pytorch/utils.py assert_dim_for_fp8_exec, called by Linear,
    LayerNormLinear and LayerNormMLP; torch._scaled_mm, which torchao's float8 calls, asks the same): per
    TP rank the hidden size and the FFN width / tp (inputs) and the QKV width / tp (output)."""
    qkv = m.hidden + 2 * m.num_kv_heads * m.head_dim
    return (m.hidden % (16 * tp) == 0) & (m.ffn_hidden % (16 * tp) == 0) & (qkv % (8 * tp) == 0)


def _fp8_shapes(ctx, v, e):
    fp8 = [v.eq("precision", FP8)]
    ok_tp = [int(t) for t in range(1, v.upper["tp"] + 1) if _fp8_widths_ok(ctx.model, t)]
    _implies(v, e, fp8, v.m.add_linear_expression_in_domain(v["tp"], cp_model.Domain.from_values(ok_tp or [-1])))
    eight_cp = v._lit(("8cp",), lambda: _scaled(v, "cp", 8))
    r = v.remainder(v.product("mbs", "seq_len"), eight_cp, "(mbs*seq)%8cp")
    _implies(v, e, fp8, v.m.add(r == 0))


def _scaled(v, name, k):
    hi = v.upper[name] * k
    out = v.m.new_int_var(k, max(hi, k), f"{k}*{name}")
    v.m.add(out == k * v.x[name])
    v.upper[out.name] = hi
    return out


def _vpp(ctx, v, e):
    _implies(v, e, [v.ge("vpp", 2)], v.m.add(v["pp"] >= 3))
    r = v.remainder(ctx.model.num_layers, v.product("pp", "vpp"), "L%(pp*vpp)")
    _implies(v, e, [v.ge("vpp", 2)], v.m.add(r == 0))


def _recompute_layers(ctx, v, e):
    _implies(v, e, [v.ge("recompute_layers", 1)], v.m.add(v["recompute"] == FULL))
    _implies(v, e, [v.ge("recompute_layers", 1)],
             v.m.add(v.product("recompute_layers", "pp") <= ctx.model.num_layers - 1))


STRUCTURAL = (
    Rule("world", "tp x pp x dp x cp must equal the {n} GPUs", ("tp", "pp", "dp", "cp"),
         lambda ctx, c: c["tp"] * c["pp"] * c["dp"] * c["cp"] == ctx.num_gpus, _world),
    Rule("tp-divides-heads", "tp must divide the {m.num_heads} attention heads and {m.num_kv_heads} "
         "key/value heads", ("tp",),
         lambda ctx, c: (ctx.model.num_heads % c["tp"] == 0) & (ctx.model.num_kv_heads % c["tp"] == 0),
         _tp_heads),
    Rule("tp-divides-ffn", "tp must divide the FFN width {m.ffn_hidden}", ("tp",),
         lambda ctx, c: ctx.model.ffn_hidden % c["tp"] == 0, _tp_ffn),
    Rule("tp-in-nvlink-domain", "tp must stay inside one NVLink domain ({c.nvlink_domain} GPUs)", ("tp",),
         lambda ctx, c: c["tp"] <= ctx.cluster.nvlink_domain,
         lambda ctx, v, e: v.m.add(v["tp"] <= ctx.cluster.nvlink_domain).only_enforce_if(e)),
    Rule("pp-at-most-layers", "pp cannot exceed the {m.num_layers} layers", ("pp",),
         lambda ctx, c: c["pp"] <= ctx.model.num_layers,
         lambda ctx, v, e: v.m.add(v["pp"] <= ctx.model.num_layers).only_enforce_if(e)),
    Rule("every-stage-has-layers", "pp must leave at least one of the {m.num_layers} layers on every stage "
         "((pp - 1) x ceil(layers / pp) < layers)", ("pp",),
         lambda ctx, c: (c["pp"] - 1) * -(-ctx.model.num_layers // c["pp"]) < ctx.model.num_layers,
         lambda ctx, v, e: v.m.add_linear_expression_in_domain(v["pp"], cp_model.Domain.from_values(
             [p for p in range(1, ctx.model.num_layers + 1)
              if (p - 1) * -(-ctx.model.num_layers // p) < ctx.model.num_layers])).only_enforce_if(e)),
    Rule("batch-divisible", "the global batch must be a multiple of micro batch x dp", ("gbs", "mbs", "dp"),
         lambda ctx, c: c["gbs"] % (c["mbs"] * c["dp"]) == 0, _batch),
    Rule("sp-needs-tp", "sequence parallelism needs tp > 1", ("sequence_parallel", "tp"),
         lambda ctx, c: (c["sequence_parallel"] == 0) | (c["tp"] > 1),
         lambda ctx, v, e: _implies(v, e, [v.eq("sequence_parallel", 1)], v.m.add(v["tp"] >= 2))),
    Rule("tp-comm-overlap-needs-sp",
         "--tp-comm-overlap needs sequence parallelism (Megatron-LM core_r0.8.0 arguments.py:199 asserts it)",
         ("tp_comm_overlap", "sequence_parallel"),
         lambda ctx, c: (c["tp_comm_overlap"] == 0) | (c["sequence_parallel"] == 1),
         lambda ctx, v, e: _implies(v, e, [v.eq("tp_comm_overlap", 1)], v.m.add(v["sequence_parallel"] == 1))),
    Rule("sp-divides-seq", "with sequence parallelism tp must divide the sequence length",
         ("sequence_parallel", "tp", "seq_len"),
         lambda ctx, c: (c["sequence_parallel"] == 0) | (c["seq_len"] % c["tp"] == 0), _sp_seq),
    Rule("precision-supported", "the {gpu.name} does not support this precision", ("precision",),
         lambda ctx, c: np.isin(c["precision"], ctx.supported_precisions),
         lambda ctx, v, e: v.m.add_linear_expression_in_domain(
             v["precision"], cp_model.Domain.from_values(ctx.supported_precisions)).only_enforce_if(e)),
    Rule("flash-supported", "FlashAttention needs an Ampere-or-newer GPU, 16-bit precision and a head dim of at "
         "most 256 (this model's: {m.head_dim})",
         ("flash_attention", "precision"),
         lambda ctx, c: (c["flash_attention"] == 0) | (flash_attention_runs(ctx.model, ctx.cluster.gpu)
                                                       & (c["precision"] != FP32)),
         lambda ctx, v, e: _implies(v, e, [v.eq("flash_attention", 1)], v.m.add(
             v["precision"] != FP32 if flash_attention_runs(ctx.model, ctx.cluster.gpu) else v["precision"] < 0))),
    Rule("cp-divides-seq", "context parallelism needs a sequence length divisible by 2 x cp", ("cp", "seq_len"),
         lambda ctx, c: (c["cp"] == 1) | (c["seq_len"] % (2 * c["cp"]) == 0), _cp_seq),
    Rule("offload-optimizer-needs-zero", "optimizer offload needs ZeRO stage >= 1", ("offload_optimizer", "zero"),
         lambda ctx, c: (c["offload_optimizer"] == Offload.NONE.code) | (c["zero"] >= 1),
         lambda ctx, v, e: _implies(v, e, [v.ge("offload_optimizer", 1)], v.m.add(v["zero"] >= 1))),
    Rule("offload-params-needs-zero3", "parameter offload needs ZeRO stage 3", ("offload_params", "zero"),
         lambda ctx, c: (c["offload_params"] == Offload.NONE.code) | (c["zero"] == 3),
         lambda ctx, v, e: _implies(v, e, [v.ge("offload_params", 1)], v.m.add(v["zero"] == 3))),
    Rule("offload-activations-needs-full-recompute", "activation offload moves full recompute's checkpoints "
         "(one per layer) to host memory: it needs recompute full over all layers (recompute_layers 0) and "
         "offload_activations cpu", ("offload_activations", "recompute", "recompute_layers"),
         lambda ctx, c: (c["offload_activations"] == Offload.NONE.code)
         | ((c["offload_activations"] == Offload.CPU.code) & (c["recompute"] == FULL) & (c["recompute_layers"] == 0)),
         _offload_activations),
    Rule("nvme-present", "NVMe offload needs NVMe in the cluster spec (nvme: ...)",
         ("offload_optimizer", "offload_params"),
         lambda ctx, c: (ctx.cluster.nvme_bytes > 0) | ((c["offload_optimizer"] != Offload.NVME.code)
                                                       & (c["offload_params"] != Offload.NVME.code)),
         lambda ctx, v, e: None if ctx.cluster.nvme_bytes > 0 else (
             v.m.add(v["offload_optimizer"] != Offload.NVME.code).only_enforce_if(e),
             v.m.add(v["offload_params"] != Offload.NVME.code).only_enforce_if(e))),
    Rule("zeropp-needs-zero3", "ZeRO++ quantised communication needs ZeRO stage 3", ("grad_comm", "zero"),
         lambda ctx, c: (c["grad_comm"] != GradComm.ZEROPP.code) | (c["zero"] == 3),
         lambda ctx, v, e: _implies(v, e, [v.eq("grad_comm", GradComm.ZEROPP.code)], v.m.add(v["zero"] == 3))),
    Rule("sparsity-supported", "the {gpu.name} has no 2:4 sparse tensor cores", ("sparsity",),
         lambda ctx, c: (c["sparsity"] != Sparsity.TWO_FOUR.code) | ctx.cluster.gpu.sparse_2to4,
         lambda ctx, v, e: None if ctx.cluster.gpu.sparse_2to4 else
         v.m.add(v["sparsity"] != Sparsity.TWO_FOUR.code).only_enforce_if(e)),
    Rule("recompute-layers", "a number of recomputed layers needs full recompute and fewer layers than a "
         "pipeline stage holds", ("recompute_layers", "recompute", "pp"),
         lambda ctx, c: (c["recompute_layers"] == 0) | ((c["recompute"] == FULL)
                                                        & (c["recompute_layers"] * c["pp"] < ctx.model.num_layers)),
         _recompute_layers),
    # An uneven split (first_stage_layers, not searched) has its own divisibility rules with vpp
    # (frameworks.uneven_pipeline_error).
    Rule("interleaving-shape", "interleaved stages need pp > 2 and layers divisible by pp x vpp",
         ("vpp", "pp"),
         lambda ctx, c: (c["vpp"] == 1) | ((c["pp"] > 2) & ((ctx.model.num_layers % (c["pp"] * c["vpp"]) == 0)
                                                          | (c.get("first_stage_layers", 0) > 0))),
         _vpp),
    Rule("fp8-shapes", "fp8 GEMMs (Transformer Engine) need the hidden size {m.hidden} and the FFN width "
         "{m.ffn_hidden} divisible by 16 x tp, and micro batch x sequence / cp divisible by 8",
         ("precision", "tp", "mbs", "seq_len", "cp"),
         lambda ctx, c: (c["precision"] != FP8) | (_fp8_widths_ok(ctx.model, c["tp"])
                                                   & ((c["mbs"] * c["seq_len"]) % (8 * c["cp"]) == 0)),
         _fp8_shapes),
    Rule("learned-positions", "the sequence cannot exceed the {m.max_seq_len} learned position embeddings",
         ("seq_len",),
         lambda ctx, c: (ctx.model.position != "learned") | (c["seq_len"] <= ctx.model.max_seq_len),
         lambda ctx, v, e: None if ctx.model.position != "learned" else
         v.m.add(v["seq_len"] <= ctx.model.max_seq_len).only_enforce_if(e)),
)
