"""Fit the cost model's few shared efficiency constants to the published runs (../shared/validation).

Usage: pip install -e '.[fit]' && python benchmarks/fit.py [--data DIR] [--write]

Minimises the log step-time error under a soft-L1 loss per run (quadratic within 10%, linear beyond,
so a few runs the model cannot express do not move shared constants), each source weighted equally
(so the 1,440 vTrain rows do not drown the other runs), with a weak log-normal prior on each constant
at its physically expected value (data sheets, kernel benchmarks, benchmarks/host_overhead.py) and hard
physical bounds. Every constant here is shared by several
sources: per GPU family the GEMM and attention efficiency; across all GPUs the HBM efficiency and the
per-kernel cost; across all frameworks the host time to issue a kernel and the per-step overhead.
Framework differences (kernels, fusion, overlap) are ASSUMED from their documented behaviour in the
framework files, not fitted.

Before that, and not on step times: NCCL's per-step and per-call latencies and the A100 NVSwitch bus
efficiency are fitted to measured all-reduce times (`COLLECTIVE_PARAMETERS`, benchmarks/data/nccl);
with `--write` the step-time fit then sees them. After it, and on measured peak memory: the caching
allocator's overhead and torch.compile's saved-activation factor (`MEMORY_PARAMETERS`, `fit_memory`),
with their leave-one-source-out memory error.

`--write` puts the values into the catalog YAML files with a provenance comment (the runs and sources
whose step time responds to each constant, `provenance`);
tests/costmodels/test_provenance.py checks that every constant a catalog file calls FITTED is one
that this script fits. `fit()` and `PARAMETERS` are also used by benchmarks/validate.py for the
leave-one-source-out refits.
"""
from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner.validation import cases, evaluate, load_records, summarize  # noqa: E402

CATALOG = ROOT / "costmodels" / "catalog"
GPU_FAMILY = {"A100-80GB": "A100", "A100-40GB": "A100", "V100-32GB": "V100", "H100-SXM": "H100",
              "H100-96GB-500W": "H100", "H100-PCIe": "H100", "H200": "H100", "GB200": "Blackwell",
              "B200": "Blackwell"}
FAMILY_FILES = {"A100": ["a100-80gb", "a100-40gb"], "V100": ["v100-32gb"],
                "H100": ["h100-sxm", "h100-96gb-500w", "h100-pcie", "h200"], "Blackwell": ["b200", "gb200"]}
ALL_FAMILIES = tuple(FAMILY_FILES)
FRAMEWORKS = ("megatron-deepspeed", "megatron-lm", "megatron-lm-2021", "megatron-core", "megatron-core-deterministic", "megatron-bridge",
              "llm-foundry", "torchtitan", "torchtitan-compile", "torchtitan-compile-2025")


@dataclass(frozen=True)
class Parameter:
    """One fitted constant and every catalog entry that takes its value."""

    kind: str                  # gpu | fw | cluster
    groups: tuple              # GPU families or framework names that share it
    field: str                 # dataclass field
    yaml_key: str              # key in the catalog files
    unit: str                  # '' | 'us' | 'ms'
    low: float
    high: float
    prior: float               # physically expected value
    sigma: float               # spread of the prior, in log space
    why_prior: str
    # The constant is a property of the machine a job runs on (its host CPU), so the prior's spread is the
    # spread between machines: the error band varies it over prior x e^(+-sigma) as well as over its
    # leave-one-source-out range (benchmarks/bands.py thin_constants).
    varies_by_machine: bool = False


HOST_TIMES = ROOT / "benchmarks" / "data" / "host_times.yaml"


def measured_host_per_kernel_s(path=HOST_TIMES) -> float:
    """Host time per counted kernel of the emitted Megatron-DeepSpeed job, measured on the CPU
    (benchmarks/gpu/host_time: vTrain's GPT layer, ZeRO-0, fp16, full recompute, extrapolated to no
    attention-sized work), in seconds."""
    import yaml
    jobs = yaml.safe_load(path.read_text())["jobs"]
    job = next(j for j in jobs if j["zero"] == 0 and j["recompute"] == "full" and j["precision"] == "fp16"
               and "host_per_counted_kernel_us" in j)
    return job["host_per_counted_kernel_us"] * 1e-6


PARAMETERS = [
    # GEMM rate of a large, well-quantised GEMM (costmodels/gemm.py adds the shape effects).
    # V100 shares A100's fraction: its only runs are 4 rows of one source.
    Parameter("gpu", ("A100", "V100"), "gemm_efficiency", "gemm_efficiency", "", 0.5, 0.95, 0.80, 0.15,
              "cuBLAS large bf16/fp16 GEMMs reach 75-85% of the A100 data-sheet peak"),
    # Blackwell takes Hopper's fraction of its own peak: no production Blackwell run is published.
    Parameter("gpu", ("H100", "Blackwell"), "gemm_efficiency", "gemm_efficiency", "", 0.4, 0.95, 0.70, 0.15,
              "cuBLAS large bf16 GEMMs reach 65-75% of the H100 SXM data-sheet peak"),
    Parameter("gpu", ("A100",), "attention_efficiency", "attention_efficiency", "", 0.2, 0.9, 0.55, 0.3,
              "FlashAttention-2 forward+backward on A100: 50-70% of peak (Dao 2023, Fig. 4)"),
    Parameter("gpu", ("H100", "Blackwell"), "attention_efficiency", "attention_efficiency", "", 0.15, 0.9, 0.35,
              0.3, "FlashAttention-2 on H100: about 35% of peak (Shah et al. 2024, Fig. 5)"),
    Parameter("gpu", ALL_FAMILIES, "hbm_efficiency", "hbm_efficiency", "", 0.5, 0.95, 0.80, 0.15,
              "streaming kernels reach about 80% of HBM bandwidth (STREAM-like copies)"),
    Parameter("gpu", ALL_FAMILIES, "kernel_overhead_s", "kernel_overhead", "us", 1e-6, 10e-6, 3e-6, 0.7,
              "kernel launch + ramp-up + tail: a few microseconds"),
    Parameter("gpu", ("H100", "Blackwell"), "fp8_gemm_speedup", "fp8_gemm_speedup", "", 1.1, 2.0, 1.5, 0.15,
              "Transformer Engine fp8 GEMMs 1.3-1.7x bf16 on H100 (peak ratio 2)"),
    # Host time per counted kernel. vTrain's Megatron-DeepSpeed rows measure the floor directly: at
    # tp 2-4, hidden 1024, a micro-batch takes 83-90 ms whether it holds 1, 2 or 4 sequences (3.4-3.6 ms
    # per layer for forward, recompute and backward), which no GPU term can do and a host-bound one
    # must; left out, nothing else holds the constant up. Its prior is measured instead: the emitted
    # job itself (Megatron-DeepSpeed, DeepSpeed's engine and checkpointing, the TorchScript fusions
    # run op by op) trained on the CPU with tiny tensors, per layer and counted kernel
    # (benchmarks/gpu/host_time, benchmarks/data/host_times.yaml). The spread covers the host CPU's
    # single-thread speed and the CUDA launch path the CPU run lacks. The lower bound is the bare op
    # sequence without the framework, 13 us (benchmarks/host_overhead.py: Python, modules,
    # dispatcher, autograd; AMD EPYC, one thread).
    Parameter("fw", FRAMEWORKS, "host_overhead_s", "host_overhead", "us", 13e-6, 60e-6,
              measured_host_per_kernel_s(), 0.3,
              "the emitted Megatron-DeepSpeed job's host time per counted kernel, measured on the CPU "
              "(benchmarks/gpu/host_time)", varies_by_machine=True),
    Parameter("fw", FRAMEWORKS, "iteration_overhead_s", "iteration_overhead", "ms", 1e-3, 0.2, 0.02, 1.0,
              "per step: grad-norm, loss-scale check, logging, barrier"),
    Parameter("fw", FRAMEWORKS, "microbatch_overhead_s", "microbatch_overhead", "ms", 0.1e-3, 10e-3, 1e-3, 1.0,
              "per micro-batch outside the layers: batch broadcast, loss, engine forward/backward/step calls"),
    # DeepSpeed ZeRO-3 integrated into Megatron (Narayanan et al. 2021, Table 2; DeepSpeed v0.3.13) and
    # Megatron-DeepSpeed (0.6.2 in the Azure runs) share one gather efficiency; what differs between the
    # versions is in their framework files (v0.3.13's per-rank loops and synchronous gathers), and
    # neither hides its gathers behind compute (zero3_overlap 0, ASSUMED there).
    Parameter("fw", ("megatron-deepspeed", "megatron-lm", "megatron-lm-2021"), "zero3_gather_efficiency", "zero3_gather_efficiency",
              "", 0.05, 1.0, 0.5, 1.0, "achieved / ideal bandwidth of DeepSpeed ZeRO-3 gathers"),
]


# Fitted to measured collectives, not to step times: vTrain's NCCL all-reduce table (nccl-tests
# all_reduce_perf on its 8-GPU A100 node, 2-8 GPUs, 1 MiB-1 GiB; benchmarks/data/nccl). The per-step
# and per-call latencies are NCCL's, shared by every GPU (ASSUMED: same protocols); the bus efficiency
# belongs to the A100's NVSwitch fabric only.
NCCL_TABLE = ROOT / "benchmarks" / "data" / "nccl" / "vtrain_allreduce.csv"
COLLECTIVE_PARAMETERS = [
    Parameter("cluster", ("*",), "nvlink_latency_s", "nvlink_latency", "us", 0.1e-6, 15e-6, 3e-6, 0.7,
              "NCCL per ring step inside a node (LL/LL128 protocols: 1-5 us)"),
    Parameter("cluster", ("*",), "collective_latency_s", "collective_latency", "us", 1e-6, 100e-6, 20e-6, 1.0,
              "kernel launch and chunk-pipeline fill per NCCL call: tens of us"),
    Parameter("system", ("A100",), "nvlink_efficiency", "nvlink_efficiency", "", 0.5, 0.95, 0.8, 0.15,
              "NCCL bus bandwidth / NVLink rate: 75-85% on NVSwitch systems"),
]
# Fitted to measured peak memory, not to step times: the caching allocator's overhead over the live
# tensors at the peak (reserved / allocated - 1, costmodels/layout_memory.py). Only readings that hold
# the allocator's cache set it: torch.cuda.max_memory_reserved ("reserved") and nvidia-smi ("device");
# max_memory_allocated readings do not contain it. One value for every framework: all of them run
# PyTorch's CUDA caching allocator. Its prior is on log(1 + value), the reserved / allocated ratio that
# the readings see (on log(value) a weak prior would still hold 0.05 at 0.08: a factor 2 there is 5% of
# memory).
#
# torch.compile's saved activations relative to eager: every compiled run with a memory reading is
# torchtitan's (Tables 1 and 3, op-level selective checkpointing), so one source sets it; its prior is
# the eager value, 1.0, because under op-level checkpointing the policy's MUST_SAVE list (matmul and
# attention outputs), not the compiler, picks what is saved (torchtitan 9dec370
# parallelisms/parallelize_llama.py _save_list); a weak one (sigma 1 in log), since the measured
# compiled runs hold 5-7% less than their eager twins and nothing read here says why. Without
# torchtitan it stays at that prior.
MEMORY_PARAMETERS = [
    Parameter("fw", FRAMEWORKS, "allocator_fragmentation", "allocator_fragmentation", "", 0.0, 0.6, 0.10, 0.3,
              "PyTorch's caching allocator rounds requests up (512 B; 2 MiB segments, and 20 MiB ones for "
              "1-10 MiB requests) and keeps freed blocks cached: a tenth or so above the live peak"),
    Parameter("fw", ("torchtitan-compile", "torchtitan-compile-2025"), "saved_activation_factor",
              "saved_activation_factor", "", 0.3, 1.5, 1.0, 1.0,
              "under op-level checkpointing the policy, not Inductor, picks the saved tensors: eager's 1.0"),
]
# The allocator's prior is on log(1 + value) (see above), the others' on log(value).
PRIOR_ON_ONE_PLUS = ("allocator_fragmentation",)
MEMORY_METHODS = ("reserved", "device")
ALL_PARAMETERS = PARAMETERS + COLLECTIVE_PARAMETERS + MEMORY_PARAMETERS


def load_nccl_table(gpu="A100"):
    """(num_gpus, bytes, seconds) rows of the measured all-reduce table for one GPU."""
    import csv
    with open(NCCL_TABLE, newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["gpu"] == gpu]
    return (np.array([int(r["num_gpus"]) for r in rows]), np.array([float(r["size_bytes"]) for r in rows]),
            np.array([float(r["time_us"]) * 1e-6 for r in rows]))


def fit_collectives(parameters=COLLECTIVE_PARAMETERS):
    """Least squares on log time of the measured single-node all-reduces; returns (values, MAPE before,
    MAPE after)."""
    from costmodels.catalog import load_cluster
    from costmodels.comm import all_reduce_time
    n, size, measured = load_nccl_table("A100")
    base = load_cluster("A100-80GB", num_gpus=8, gpus_per_node=8)

    def predict(x):
        c = replace(base, **{p.field: float(v) for p, v in zip(parameters, x)})
        return np.array([float(all_reduce_time(b, g, g, c)) for g, b in zip(n, size)])

    x0 = np.array([getattr(base, p.field) for p in parameters])
    x0 = np.clip(x0, [p.low * 1.0001 for p in parameters], [p.high * 0.9999 for p in parameters])
    scale = np.array([p.prior for p in parameters])
    result = least_squares(lambda z: np.log(predict(z * scale) / measured), x0 / scale,
                           bounds=([p.low / p.prior for p in parameters], [p.high / p.prior for p in parameters]))
    values = result.x * scale
    mape = lambda x: float(np.mean(np.abs(predict(x) / measured - 1.0)))  # noqa: E731
    return values, mape(x0), mape(values)


def _family(gpu_name: str) -> str:
    return GPU_FAMILY.get(gpu_name, gpu_name)


def make_overrides(values, parameters=PARAMETERS):
    """case -> case with every fitted constant set to `values`."""
    def apply(case):
        gpu_changes, fw_changes, cluster_changes = {}, {}, {}
        fam = _family(case.cluster.gpu.name)
        for p, v in zip(parameters, values):
            if p.kind == "gpu" and fam in p.groups:
                gpu_changes[p.field] = float(v)
            elif p.kind == "fw" and case.framework.name in p.groups:
                fw_changes[p.field] = float(v)
            elif p.kind == "cluster":
                cluster_changes[p.field] = float(v)
        new_gpu = replace(case.cluster.gpu, **gpu_changes)
        new_cluster = replace(case.cluster, gpu=new_gpu, **cluster_changes)
        return replace(case, cluster=new_cluster, framework=replace(case.framework, **fw_changes))

    return apply


def current_values(prepared, parameters=PARAMETERS):
    """The catalog's present values, as a starting point."""
    out = []
    for p in parameters:
        value = None
        for case in prepared:
            if p.kind == "gpu" and _family(case.cluster.gpu.name) in p.groups:
                value = getattr(case.cluster.gpu, p.field)
            elif p.kind == "fw" and case.framework.name in p.groups:
                value = getattr(case.framework, p.field)
            elif p.kind == "cluster":
                value = getattr(case.cluster, p.field)
            if value is not None:
                break
        value = p.prior if value is None else value
        out.append(min(max(value, p.low * 1.0001), p.high * 0.9999))
    return np.array(out)


ROBUST_SCALE = 0.10   # log error beyond which a run's pull on the constants grows linearly, not quadratically


def robust_residual(r, c=ROBUST_SCALE):
    """Pseudo-residual whose square is the soft-L1 loss 2c^2 (sqrt(1 + (r/c)^2) - 1) of a log error r
    (Huber-like: quadratic within c, linear beyond). So a few runs the model cannot express (e.g. two
    GB200 functional tests 40% off) do not move constants that a thousand runs constrain; per run, so
    that the equal weighting of sources is kept."""
    r = np.asarray(r, dtype=float)
    return np.sign(r) * np.sqrt(2.0 * c * c * (np.sqrt(1.0 + (r / c) ** 2) - 1.0))


def source_weights(records) -> np.ndarray:
    """Per record 1 / sqrt(runs of its source): each source weighs the same in a sum of squares."""
    counts: dict[str, int] = {}
    for r in records:
        counts[r.source] = counts.get(r.source, 0) + 1
    return np.array([1.0 / np.sqrt(counts[r.source]) for r in records])


def fit(records, parameters=PARAMETERS, prior_weight=0.1, iterations=60, x0=None, prepared=None,
        robust_scale=ROBUST_SCALE):
    """Robust least squares on log(predicted / measured) step time (soft-L1 per run,
    `robust_residual`), sources weighted equally, with priors. Returns the fitted values (array in
    the order of `parameters`)."""
    prepared = prepared if prepared is not None else cases(records)
    w = source_weights(records)
    x0 = current_values(prepared, parameters) if x0 is None else np.asarray(x0, dtype=float)
    lo = np.array([p.low for p in parameters])
    hi = np.array([p.high for p in parameters])
    x0 = np.clip(x0, lo * 1.0001, hi * 0.9999)
    prior = np.array([p.prior for p in parameters])
    sigma = np.array([p.sigma for p in parameters])
    scale = np.maximum(np.abs(x0), 1e-12)
    # A constant no remaining record touches stays at its prior (leave-one-source-out).
    used = _constrained(parameters, prepared)

    def residuals(z):
        x = np.where(used, z * scale, prior)
        res = evaluate(records, overrides=make_overrides(x, parameters), prepared=prepared)
        logs = np.array([np.log(r.predicted_step_s / r.record.measured_step_s) for r in res])
        data = w * (robust_residual(logs, robust_scale) if robust_scale else logs)
        return np.concatenate([data, prior_weight * np.log(z * scale / prior) / sigma])

    result = least_squares(residuals, x0 / scale, bounds=(lo / scale, hi / scale), max_nfev=iterations,
                           diff_step=1e-3, x_scale="jac")
    return np.where(used, result.x * scale, prior)


def memory_records(records):
    """The records whose measured peak memory contains the allocator's cache (MEMORY_METHODS)."""
    return [r for r in records if r.measured_memory_gib is not None and r.memory_method in MEMORY_METHODS]


def memory_readings(records, parameters=MEMORY_PARAMETERS) -> dict:
    """{field: (ids of the readings that respond to it, their sources, how many it enters)} among
    `memory_records(records)`; a reading responds when halving the constant (from the catalog's
    value) moves its prediction by 1% or more, as `provenance` counts for step times."""
    held = memory_records(records)
    if not held:
        return {p.field: ([], [], 0) for p in parameters}
    prepared = cases(held)
    names = [case.framework.name for case in prepared]
    base = current_values(prepared, parameters)
    before = memory_predictions(held, base, parameters, prepared)
    out = {}
    for k, p in enumerate(parameters):
        # the allocator's overhead is a fraction above 1: halve 1 + value, not the value
        half = base.copy()
        half[k] = (1.0 + base[k]) / 2.0 - 1.0 if p.field in PRIOR_ON_ONE_PLUS else base[k] / 2.0
        half[k] = max(half[k], p.low)
        after = memory_predictions(held, half, parameters, prepared)
        enters = [r for r, name in zip(held, names) if p.groups == FRAMEWORKS or name in p.groups]
        runs = [r for r, b, a in zip(held, before, after) if abs(a[2] / b[2] - 1.0) >= 0.01]
        out[p.field] = ([r.id for r in runs], sorted({r.source for r in runs}), len(enters))
    return out


def memory_predictions(records, values, parameters=MEMORY_PARAMETERS, prepared=None):
    """[(id, source, predicted GiB, measured GiB)] of `records` with the memory constants at `values`."""
    res = evaluate(records, overrides=make_overrides(values, parameters), prepared=prepared)
    return [(r.record.id, r.record.source, r.predicted_memory_gib, r.record.measured_memory_gib) for r in res]


def fit_memory(records, parameters=MEMORY_PARAMETERS, prior_weight=0.1, robust_scale=ROBUST_SCALE):
    """Robust least squares on log(predicted / measured) peak memory of `memory_records(records)`
    (soft-L1 per run, sources weighted equally, a weak prior on log(1 + value) for the allocator's
    overhead, on log(value) for the others), as `fit` does for step times. Returns the fitted values (array in the order of `parameters`); the prior where no record
    holds a reading."""
    records = memory_records(records)
    prior = np.array([p.prior for p in parameters])
    if not records:
        return prior
    prepared = cases(records)
    w = source_weights(records)
    lo = np.array([p.low for p in parameters])
    hi = np.array([p.high for p in parameters])
    sigma = np.array([p.sigma for p in parameters])
    x0 = np.clip(current_values(prepared, parameters), lo + 1e-4, hi - 1e-4)
    shift = np.array([1.0 if p.field in PRIOR_ON_ONE_PLUS else 0.0 for p in parameters])

    def residuals(x):
        rows = memory_predictions(records, x, parameters, prepared)
        logs = np.array([np.log(pred / meas) for _, _, pred, meas in rows])
        data = w * (robust_residual(logs, robust_scale) if robust_scale else logs)
        return np.concatenate([data, prior_weight * np.log((shift + x) / (shift + prior)) / sigma])

    result = least_squares(residuals, x0, bounds=(lo, hi), diff_step=1e-2)
    return result.x


def loso_memory(records, parameters=MEMORY_PARAMETERS):
    """Leave-one-source-out for memory: for each source with readings, the memory constants refitted
    on the other sources' readings and that source's runs predicted with them.
    Returns ({source: [(id, source, predicted GiB, measured GiB)]}, {source: refitted values})."""
    held = memory_records(records)
    out, refits = {}, {}
    for source in sorted({r.source for r in held}):
        values = fit_memory([r for r in held if r.source != source], parameters)
        out[source] = memory_predictions([r for r in held if r.source == source], values, parameters)
        refits[source] = [float(v) for v in values]
    return out, refits


def memory_mape(rows) -> float:
    return float(np.mean([abs(pred / meas - 1.0) for _, _, pred, meas in rows]))


def memory_out_of_sample(records, values=None) -> dict:
    """Memory accuracy per source with readings: 'loso' and 'in_sample' MAPE (in sample at `values`,
    default the catalog's), the LOSO 'refits' and 'predictions' ({source: [[id, predicted, measured]]},
    GiB), the shape benchmarks/validate.py reports and benchmarks/bands.py reads."""
    held = memory_records(records)
    if not held:
        return {}
    loso, refits = loso_memory(records)
    values = current_values(cases(held), MEMORY_PARAMETERS) if values is None else values
    inside = {row[0]: row for row in memory_predictions(held, values)}
    return {"loso": {s: memory_mape(rows) for s, rows in loso.items()},
            "in_sample": {s: memory_mape([inside[row[0]] for row in rows]) for s, rows in loso.items()},
            "runs": {s: len(rows) for s, rows in loso.items()},
            "refits": refits,
            "predictions": {s: [[i, p, m] for i, _, p, m in rows] for s, rows in loso.items()}}


def _constrained(parameters, prepared):
    """Which parameters at least one case depends on."""
    out = []
    for p in parameters:
        if p.kind == "gpu":
            out.append(any(_family(c.cluster.gpu.name) in p.groups for c in prepared))
        elif p.kind == "fw":
            out.append(any(c.framework.name in p.groups for c in prepared))
        else:
            out.append(True)
    return np.array(out)


# A run constrains a constant when its predicted step time responds to it: a 50% change of the
# constant moves the run's step by 1% or more (elasticity |d log t / d log c| >= 0.02; measured with a
# 10% step at the catalog values; overheads and efficiencies differ between clusters by that much). A run the constant merely enters (the iteration overhead of a
# 100-second step, the host time of a GPU-bound run) says nothing about its value, and counting it
# made the host time per kernel read "1703 runs from 11 sources" where 950 runs of 2 sources set it.
ELASTICITY_MIN = 0.02


def _uses(p: Parameter, records, prepared) -> list[bool]:
    """Whether parameter `p` enters each record's prediction (its GPU family / framework, its feature)."""
    out = []
    for r, c in zip(records, prepared):
        if p.kind == "gpu":
            hit = _family(c.cluster.gpu.name) in p.groups
        elif p.kind == "fw":
            hit = c.framework.name in p.groups
        else:
            hit = True
        if p.field.startswith("zero3"):
            hit = hit and r.case["parallel"].get("zero_stage") == 3
        elif p.field == "attention_efficiency":
            hit = hit and bool(r.case["parallel"].get("flash_attention"))
        elif p.field == "fp8_gemm_speedup":
            hit = hit and r.case["parallel"].get("precision") == "fp8"
        elif p.field == "iteration_overhead_s":      # not in runs measured without it (vTrain single-node)
            hit = hit and "iteration_overhead" not in r.step_excludes
        out.append(hit)
    return out


def elasticities(records, parameters=PARAMETERS, values=None, prepared=None) -> np.ndarray:
    """|d log(step) / d log(constant)| per (parameter, record), from a 10% step of each constant at
    `values` (default: the catalog's)."""
    prepared = prepared if prepared is not None else cases(records)
    x = current_values(prepared, parameters) if values is None else np.asarray(values, dtype=float)
    steps = lambda v: np.array([r.predicted_step_s for r in  # noqa: E731
                                evaluate(records, overrides=make_overrides(v, parameters), prepared=prepared)])
    base = steps(x)
    out = np.zeros((len(parameters), len(records)))
    for k in range(len(parameters)):
        moved = x.copy()
        moved[k] *= 1.1
        out[k] = np.abs(np.log(steps(moved) / base)) / np.log(1.1)
    return out


def provenance(records, parameters=PARAMETERS, values=None):
    """For each parameter: (runs, sources, used) where runs and sources are those of the records whose
    step time responds to it (ELASTICITY_MIN) and used the number of records it enters at all."""
    records = [r for r in records if r.measured_step_s is not None]
    prepared = cases(records)
    e = elasticities(records, parameters, values, prepared)
    out = []
    for k, p in enumerate(parameters):
        uses = _uses(p, records, prepared)
        hit = [r for r, u, el in zip(records, uses, e[k]) if u and el >= ELASTICITY_MIN]
        out.append((len(hit), sorted({r.source for r in hit}), sum(uses)))
    return out


def _format(value: float, unit: str) -> str:
    if unit == "us":
        return f"{value * 1e6:.3g} us"
    if unit == "ms":
        return f"{value * 1e3:.3g} ms"
    return f"{value:.3g}"


def catalog_targets(p: Parameter) -> list[Path]:
    """The catalog files that hold parameter `p`."""
    if p.kind == "fw":
        return [CATALOG / "frameworks" / f"{name}.yaml" for name in p.groups]
    if p.kind == "cluster":
        return sorted((CATALOG / "gpus").glob("*.yaml"))
    if p.kind == "system":
        return [CATALOG / "gpus" / f"{f}.yaml" for fam in p.groups for f in FAMILY_FILES[fam]]
    return [CATALOG / "gpus" / f"{f}.yaml" for fam in p.groups for f in FAMILY_FILES[fam]]


def write_catalog(values, records, parameters=PARAMETERS, notes=None, prov=None):
    """Replace each fitted constant's line in the catalog with the value and its provenance (`prov`:
    provenance(records, parameters, values), computed here if not given)."""
    if notes is None:
        prov = prov if prov is not None else provenance(records, parameters, values)
        notes = [(f"FITTED (benchmarks/fit.py): {runs} runs from {len(sources)} sources "
                  f"({', '.join(sources)}) whose step time responds to it (a 50% change moves it 1% or more), "
                  f"of {used} runs it enters; shared by {', '.join(p.groups)}"
                  + (f"; its prior, {_format(p.prior, p.unit)} (sigma {p.sigma} in log), is {p.why_prior}"
                     if p.varies_by_machine else ""))
                 for p, (runs, sources, used) in zip(parameters, prov)]
    for p, v, note in zip(parameters, values, notes):
        for path in catalog_targets(p):
            text = path.read_text()
            pattern = re.compile(rf"^(\s*){re.escape(p.yaml_key)}:[^\n]*$", re.M)
            if not pattern.search(text):
                raise SystemExit(f"{path}: no '{p.yaml_key}:' line to write")
            text = pattern.sub(lambda m: f"{m.group(1)}{p.yaml_key}: {_format(v, p.unit)}   # {note}", text, count=1)
            path.write_text(text)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=None)
    ap.add_argument("--iterations", type=int, default=60)
    ap.add_argument("--prior-weight", type=float, default=0.1)
    ap.add_argument("--write", action="store_true", help="write the values into the catalog YAML files")
    args = ap.parse_args(argv)
    records = load_records(args.data)
    coll, before, after = fit_collectives()
    n_rows = len(load_nccl_table("A100")[0])
    for p, v in zip(COLLECTIVE_PARAMETERS, coll):
        print(f"{p.kind:8s} {'/'.join(p.groups)[:34]:34s} {p.field:24s} {_format(v, p.unit):>10s}   "
              f"prior {_format(p.prior, p.unit)}; {n_rows} NCCL all-reduce timings")
    print(f"NCCL all-reduce table MAPE {before:.3f} -> {after:.3f}")
    if args.write:
        note = (f"FITTED (benchmarks/fit.py): {n_rows} measured NCCL all-reduces (nccl-tests, 2-8 A100, "
                f"1 MiB-1 GiB; benchmarks/data/nccl), MAPE {after * 100:.1f}%")
        write_catalog(coll, records, COLLECTIVE_PARAMETERS,
                      notes=[note + ("; ASSUMED for every GPU: same NCCL protocols" if p.kind == "cluster" else "")
                             for p in COLLECTIVE_PARAMETERS])
        # The step-time fit below reads the catalog, so it sees the collective constants just written.
        import costmodels.catalog as catalog_module
        for obj in vars(catalog_module).values():
            if hasattr(obj, "cache_clear"):
                obj.cache_clear()
        records = load_records(args.data)
    values = fit(records, prior_weight=args.prior_weight, iterations=args.iterations)
    prov = provenance(records, values=values)     # the elasticities take a dozen evaluations: once
    for p, v, (runs, sources, used) in zip(PARAMETERS, values, prov):
        print(f"{p.kind:8s} {'/'.join(p.groups)[:34]:34s} {p.field:24s} {_format(v, p.unit):>10s}   "
              f"prior {_format(p.prior, p.unit)}; set by {runs} runs of {len(sources)} sources "
              f"({', '.join(sources)}), enters {used}")
    summary = summarize(evaluate(records, overrides=make_overrides(values)))
    print(f"in-sample MAPE overall {summary['mape_overall']:.3f}, mean of sources "
          f"{summary['mape_mean_of_sources']:.3f}")
    for s, v in summary["mape_by_source"].items():
        print(f"  {s:14s} {v:.3f}")
    mem_values = fit_memory(records)
    mem = memory_out_of_sample(records, mem_values)
    held, sources = memory_records(records), sorted(mem["loso"])
    readings = memory_readings(held)
    for p, v in zip(MEMORY_PARAMETERS, mem_values):
        runs, of, enters = readings[p.field]
        groups = "(all frameworks)" if p.groups == FRAMEWORKS else "/".join(p.groups)
        print(f"{p.kind:8s} {groups[:34]:34s} {p.field:24s} {_format(v, p.unit):>10s}   "
              f"prior {_format(p.prior, p.unit)}; set by {len(runs)} memory readings ({'/'.join(MEMORY_METHODS)}) "
              f"of {len(of)} sources ({', '.join(of)}), enters {enters}")
    for s in sources:
        print(f"  memory {s:14s} leave-one-source-out {mem['loso'][s] * 100:.1f}%, "
              f"in-sample {mem['in_sample'][s] * 100:.1f}%")
    if args.write:
        write_catalog(values, records, prov=prov)
        loso_text = ", ".join(f"{s} {mem['loso'][s] * 100:.1f}% ({mem['runs'][s]} runs)" for s in sources)
        runs, of, _ = readings["allocator_fragmentation"]
        notes = {"allocator_fragmentation": (
            f"FITTED (benchmarks/fit.py, fit_memory): {len(runs)} peak-memory readings that hold the "
            f"allocator's cache (max reserved / nvidia-smi) from {len(of)} sources ({', '.join(of)}); "
            f"leave-one-source-out memory MAPE {loso_text}; shared by every framework (all run PyTorch's "
            f"caching allocator)")}
        runs, of, enters = readings["saved_activation_factor"]
        notes["saved_activation_factor"] = (
            f"FITTED (benchmarks/fit.py, fit_memory): {len(runs)} max-reserved readings of compiled runs "
            f"from {len(of)} source ({', '.join(of)}) that respond to it (halving it moves them 1% or more), "
            f"of {enters} it enters, with the allocator overhead; thin: without that source "
            f"it stays at its prior 1.0 (eager's saved set: under op-level checkpointing the policy picks "
            f"what is saved), which its leave-one-source-out figure uses; shared by torchtitan-compile and "
            f"torchtitan-compile-2025")
        write_catalog(mem_values, records, MEMORY_PARAMETERS, notes=[notes[p.field] for p in MEMORY_PARAMETERS])
        print("catalog updated")


if __name__ == "__main__":
    main()
