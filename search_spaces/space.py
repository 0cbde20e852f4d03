"""The decision space: one declarative knob per Layout field, with its domain.

`build_space` is the single source of the domains for both encodings (CP-SAT enumerates, Optuna
samples); the hard rules live in `constraints.py` and the framework profiles in `frameworks.py`.
Domains are deliberately wide (every divisor, every mode): the rules decide what is feasible, so
that a pinned value a rule forbids is explained by that rule rather than silently dropped.
"""
from __future__ import annotations

import math

import numpy as np

from dataclasses import dataclass, field
from typing import Mapping

from costmodels.errors import SpecError
from costmodels.types import (ClusterSpec, GradComm, ModelSpec, Offload, Precision, Recompute, Sparsity, ZeroStage,
                             flash_attention_runs)

# The knob lists come from the knob table (knobs.py); CORE_KNOBS are the integer knobs whose rules
# CP-SAT enumerates together, CATEGORICAL_KNOBS the rest.
from .knobs import BOOLS, BY_NAME, CATEGORICAL_KNOBS, CORE_KNOBS, ENUMS, KNOBS, flag  # noqa: F401

MAX_MICRO_BATCH = 64
MAX_BATCH_TOKENS = 1e12     # tokens per step: 10^5 x the largest published (Llama 3 405B, 16M)
MAX_CONTEXT_PARALLEL = 64


@dataclass(frozen=True)
class Knob:
    name: str
    domain: tuple           # integer values (enum knobs hold their integer codes, bools 0/1)
    doc: str

    def labels(self) -> tuple:
        """Domain as people write it (enum names, true/false)."""
        return tuple(BY_NAME[self.name].decode(v) for v in self.domain)


@dataclass(frozen=True)
class SearchRequest:
    """What the user asks for: GPUs, batch, sequence lengths, and pinned / restricted knobs.

    `global_batch` in sequences, or `global_batch_tokens` = (low, high) tokens per step;
    `choices` maps a knob to the values the user allows (a pin is a one-value choice).
    """

    num_gpus: int
    global_batch: int | None = None
    global_batch_tokens: tuple[float, float] | None = None
    seq_lens: tuple[int, ...] = ()
    choices: Mapping[str, tuple] = field(default_factory=dict)
    total_tokens: float = 0.0


@dataclass(frozen=True)
class Space:
    model: ModelSpec
    cluster: ClusterSpec
    request: SearchRequest
    knobs: Mapping[str, Knob]

    def domain(self, name: str) -> tuple:
        return self.knobs[name].domain

    def size(self) -> int:
        n = 1
        for k in self.knobs.values():
            n *= len(k.domain)
        return n


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(n ** 0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def _powers_of_two(limit: int) -> list[int]:
    out, v = [], 1
    while v <= limit:
        out.append(v)
        v *= 2
    return out


def check_batch_tokens(lo, hi) -> None:
    """A token range per step that a run can have: finite, above 0, LOW <= HIGH, at most MAX_BATCH_TOKENS
    (the one check of the range: the API, the request and the batch candidates all call it)."""
    try:
        lo, hi = float(lo), float(hi)
    except (TypeError, ValueError, OverflowError):
        raise SpecError(f"global batch token range {str(lo)[:30]}-{str(hi)[:30]}: give finite token counts "
                        "per step") from None
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise SpecError(f"global batch token range {lo:g}-{hi:g}: give finite token counts per step")
    if not 0 < lo <= hi:
        raise SpecError(f"global batch token range {lo:g}-{hi:g} is empty; give LOW <= HIGH, both above 0")
    if hi > MAX_BATCH_TOKENS:
        raise SpecError(f"global batch token range {lo:g}-{hi:g} is beyond any real run: give at most "
                        f"{MAX_BATCH_TOKENS:g} tokens per step")


def batch_sequences(lo: float, hi: float, seq_len: int) -> tuple[list[int], bool]:
    """Global batches (in sequences of `seq_len`) for a token range, and whether it was rounded.

    Every 2^k and 3 x 2^k sequences whose tokens lie in [lo, hi]; when none does (a single target
    such as 4e6 tokens, or a narrow range), the whole number of sequences nearest to the middle of
    the range (at least one): the rounding is reported, never silent.
    """
    check_batch_tokens(lo, hi)
    out = []
    for base in (1, 3):
        v = base
        while v * seq_len <= hi:
            if v * seq_len >= lo:
                out.append(v)
            v *= 2
    if out:
        return sorted(set(out)), False
    return [max(1, int(round((lo / 2 + hi / 2) / seq_len)))], True


def _batch_candidates(request: SearchRequest, seq_lens: tuple[int, ...]) -> tuple[int, ...]:
    """Global batches in sequences: the fixed one, or those of `batch_sequences` for each length."""
    if request.global_batch is not None:
        return (int(request.global_batch),)
    if request.global_batch_tokens is None:
        raise SpecError("give a global batch (--global-batch N sequences) or a token range "
                        "(--global-batch-tokens LOW-HIGH)")
    lo, hi = request.global_batch_tokens
    check_batch_tokens(lo, hi)
    out = set()
    for s in seq_lens:
        out.update(batch_sequences(lo, hi, s)[0])
    return tuple(sorted(out))


def _natural_domains(model: ModelSpec, cluster: ClusterSpec, request: SearchRequest) -> dict:
    n = request.num_gpus
    divs = divisors(n)
    seq_lens = tuple(sorted(set(request.seq_lens or (model.max_seq_len,))))
    layers = model.num_layers
    supported = [p.code for p in Precision if p is not Precision.FP32 and cluster.gpu.supports(p)]
    if Precision.BF16.code in supported and Precision.FP16.code in supported:
        supported.remove(Precision.FP16.code)     # bf16 where the GPU has it: same speed, no loss scaling
    if not supported and cluster.gpu.supports(Precision.FP32):
        supported = [Precision.FP32.code]         # a GPU with no 16-bit peak trains in fp32
    offloads = [Offload.NONE.code, Offload.CPU.code] + ([Offload.NVME.code] if cluster.nvme_bytes > 0 else [])
    flash = flash_attention_runs(model, cluster.gpu)
    return {
        "tp": [d for d in divs if d <= cluster.nvlink_domain],
        "pp": [d for d in divs if d <= layers],
        "dp": divs,
        "cp": [d for d in _powers_of_two(MAX_CONTEXT_PARALLEL) if n % d == 0],
        "vpp": [v for v in range(1, 9) if v * 2 <= layers or v == 1],
        "mbs": _powers_of_two(MAX_MICRO_BATCH),
        "gbs": list(_batch_candidates(request, seq_lens)),
        "seq_len": list(seq_lens),
        "zero": [z.code for z in ZeroStage],
        "offload_optimizer": offloads,
        "offload_params": offloads,
        "offload_activations": [Offload.NONE.code, Offload.CPU.code],
        "recompute": [r.code for r in Recompute],
        "recompute_layers": [0] + [k for k in _powers_of_two(layers) if k < layers],
        "sequence_parallel": [0, 1],
        "tp_comm_overlap": [0, 1],
        "flash_attention": [1] if flash else [0],
        "precision": supported,
        "sparsity": [Sparsity.DENSE.code],
        "grad_comm": [GradComm.FP32.code, GradComm.BF16.code, GradComm.ZEROPP.code, GradComm.ONEBIT.code],
    }


MAX_KNOB_VALUE = 10**7      # no degree, batch or length above this; CP-SAT needs 64-bit integers
DEGREES = ("tp", "pp", "dp", "cp")   # their product is the GPU count


def check_request(request: SearchRequest) -> None:
    """Values that no layout can have, refused before CP-SAT multiplies them (a product of degrees
    or a length beyond 64-bit integers is an invalid model there, not an infeasible one)."""
    for s in request.seq_lens:
        if isinstance(s, bool) or not isinstance(s, (int, np.integer)) or not 1 <= s <= MAX_KNOB_VALUE:
            raise SpecError(f"--seq-len {str(s)[:40]} is beyond any real run: give whole numbers of tokens from "
                            f"1 to {MAX_KNOB_VALUE:,}")
    if request.global_batch_tokens is not None:
        check_batch_tokens(*request.global_batch_tokens)


def parse_choice(name: str, values) -> tuple:
    """User values for a knob ('bf16', True, 8) -> the knob's integer codes."""
    if name not in KNOBS:
        unsearched = name in BY_NAME
        raise SpecError(f"{'knob' if unsearched else 'unknown knob'} '{name}'"
                        f"{' is not searched (set it in a case file for planner estimate)' if unsearched else ''}; "
                        f"searched knobs: {', '.join(KNOBS)}")
    out = []
    many = isinstance(values, (list, tuple, set, frozenset, np.ndarray))
    for v in (list(values) if many else (values,)):
        if name in ENUMS:
            out.append(ENUMS[name].parse(v).code)
        elif name in BOOLS:
            if isinstance(v, str):
                if v.lower() not in ("true", "false", "1", "0", "yes", "no", "on", "off"):
                    raise SpecError(f"{flag(name)} takes true or false, got {v!r}")
                v = v.lower() in ("true", "1", "yes", "on")
            out.append(int(bool(v)))
        else:
            try:
                if isinstance(v, str) and not (v.strip().isascii() and v.strip().lstrip("+-").isdigit()):
                    raise ValueError      # int() reads other scripts' digits ('\u0662' is 2) and '1_0' (10): refused
                iv = int(v)
            except (TypeError, ValueError):
                raise SpecError(f"{flag(name)} takes whole numbers, got {v!r}") from None
            if iv < BY_NAME[name].minimum:
                raise SpecError(f"{flag(name)} must be {BY_NAME[name].minimum} or more, got {iv}")
            if BY_NAME[name].maximum is not None and iv > BY_NAME[name].maximum:
                # a list (--zero 1,4) dropped the impossible value silently
                raise SpecError(f"{flag(name)} must be {BY_NAME[name].maximum} or less, got {iv}")
            if iv > MAX_KNOB_VALUE:
                raise SpecError(f"{flag(name)} {iv} is beyond any real layout (max {MAX_KNOB_VALUE:,})")
            out.append(iv)
    return tuple(sorted(set(out)))


def build_space(model: ModelSpec, cluster: ClusterSpec, request: SearchRequest) -> Space:
    """Every knob with its domain: the natural one, or the user's choice where given.

    A user choice replaces the natural domain (so `--tp 3` is kept and the rules say why it fails);
    sparsity and precisions outside the natural domain must be asked for explicitly.
    """
    if request.num_gpus <= 0:
        raise SpecError("the number of GPUs must be positive")
    if request.num_gpus > 10_000_000:
        raise SpecError(f"{request.num_gpus} GPUs is beyond any real cluster (at most 10^7)")
    check_request(request)
    natural = _natural_domains(model, cluster, request)
    for name in request.choices:
        if name not in KNOBS:       # a knob the search does not vary (first_stage_layers, ...) or none
            parse_choice(name, ())
    knobs = {}
    for name in KNOBS:
        domain = natural[name]
        if name in request.choices:
            domain = list(parse_choice(name, request.choices[name]))
            if not domain:
                raise SpecError(f"{flag(name)}: no value given")
            if name in DEGREES:
                # a degree above the GPU count cannot divide it: left out of a list of choices (--pp 1,2,4 on
                # 2 GPUs), refused when it is all that was asked (CP-SAT would multiply it past 64 bits)
                fitting = [v for v in domain if v <= request.num_gpus]
                if not fitting:
                    raise SpecError(f"{flag(name)} {min(domain)} is more than the {request.num_gpus} GPUs; a "
                                    "parallel degree divides the GPU count")
                domain = fitting
        knobs[name] = Knob(name, tuple(domain), BY_NAME[name].doc)
    return Space(model=model, cluster=cluster, request=request, knobs=knobs)
