"""Fit the cost model's efficiency constants to the published runs (../shared/validation).

Usage: pip install -e '.[fit]' && python benchmarks/fit.py [--data DIR] [--iterations N]

Minimises the log step-time error, each source weighted equally (so the 1,440 vTrain rows do not
drown the 90 published runs), over a small set of constants with physical bounds: per GPU family
the GEMM / attention / HBM efficiencies and the per-kernel cost; per framework the host time per
kernel and the per-step overhead; the link efficiencies and latencies. It prints the fitted values
and the error per source; the values are then copied, with a comment, into the catalog YAML files
(costmodels/catalog/gpus/*.yaml `fitted:`, costmodels/catalog/frameworks/*.yaml).
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from planner.validation import cases, evaluate, load_records, summarize  # noqa: E402

GPU_FAMILY = {"A100-80GB": "A100", "A100-40GB": "A100", "H100-SXM": "H100", "H100-96GB-500W": "H100",
              "V100-32GB": "V100", "GB200": "GB200"}

# (kind, group, field, low, high, prior, sigma): the prior is the physically expected value (data
# sheets, kernel benchmarks) and sigma its spread in log space; the fit moves away from it only
# as far as the measurements demand.
PARAMETERS = [
    ("gpu", "A100", "gemm_efficiency", 0.4, 0.95, 0.75, 0.15),
    ("gpu", "A100", "attention_efficiency", 0.1, 0.9, 0.50, 0.3),      # FlashAttention-2 on A100
    ("gpu", "A100", "hbm_efficiency", 0.4, 1.0, 0.80, 0.15),
    ("gpu", "A100", "kernel_overhead_s", 1e-6, 40e-6, 5e-6, 0.7),
    ("gpu", "H100", "gemm_efficiency", 0.3, 0.95, 0.65, 0.15),
    ("gpu", "H100", "attention_efficiency", 0.1, 0.9, 0.35, 0.3),      # FlashAttention-2 on H100
    ("gpu", "H100", "hbm_efficiency", 0.3, 1.0, 0.80, 0.15),
    ("gpu", "H100", "fp8_gemm_speedup", 1.0, 2.0, 1.6, 0.1),
    ("gpu", "V100", "gemm_efficiency", 0.4, 0.95, 0.80, 0.15),
    ("gpu", "GB200", "gemm_efficiency", 0.15, 0.95, 0.55, 0.5),
    ("fw", "megatron-deepspeed", "host_overhead_s", 1e-6, 200e-6, 20e-6, 1.5),
    ("fw", "megatron-deepspeed", "iteration_overhead_s", 1e-3, 0.3, 0.02, 1.5),
    ("fw", "megatron-lm", "zero3_gather_efficiency", 0.02, 1.0, 0.5, 1.5),
    ("fw", "megatron-core", "iteration_overhead_s", 1e-3, 0.5, 0.02, 1.5),
    ("fw", "megatron-core", "attention_speedup", 0.5, 3.0, 1.3, 0.3),
    ("fw", "megatron-core-deterministic", "attention_speedup", 0.3, 3.0, 1.0, 0.5),
    ("fw", "megatron-core-deterministic", "iteration_overhead_s", 1e-3, 0.5, 0.02, 1.5),
    ("fw", "llm-foundry", "attention_speedup", 0.3, 2.0, 0.8, 0.3),
    ("fw", "llm-foundry", "elementwise_traffic", 0.3, 3.0, 1.0, 0.3),
    ("fw", "torchtitan", "elementwise_traffic", 0.3, 5.0, 2.0, 0.5),
    ("cluster", "*", "nvlink_latency_s", 1e-6, 40e-6, 5e-6, 1.0),
]


def make_overrides(values):
    gpu, fw, cluster = {}, {}, {}
    for (kind, group, name, *_), v in zip(PARAMETERS, values):
        target = {"gpu": gpu, "fw": fw, "cluster": cluster}[kind]
        target.setdefault(group, {})[name] = float(v)

    def apply(case):
        g = case.cluster.gpu
        fam = GPU_FAMILY.get(g.name, g.name)
        new_gpu = replace(g, **gpu.get(fam, {}))
        new_cluster = replace(case.cluster, gpu=new_gpu, **cluster.get("*", {}))
        fw_changes = dict(fw.get(case.framework.name, {}))
        if case.framework.name == "torchtitan-compile":   # shares torchtitan's kernels but its fusion
            fw_changes = {k: v for k, v in fw.get("torchtitan", {}).items() if k != "elementwise_traffic"}
        new_fw = replace(case.framework, **fw_changes)
        return replace(case, cluster=new_cluster, framework=new_fw)

    return apply


def current_values(prepared):
    """Start from the catalog's values."""
    out = []
    for kind, group, name, lo, hi, *_ in PARAMETERS:
        value = None
        for case in prepared:
            if kind == "gpu" and GPU_FAMILY.get(case.cluster.gpu.name) == group:
                value = getattr(case.cluster.gpu, name)
            elif kind == "fw" and case.framework.name == group:
                value = getattr(case.framework, name)
            elif kind == "cluster":
                value = getattr(case.cluster, name)
            if value is not None:
                break
        out.append(min(max(value if value is not None else (lo + hi) / 2, lo), hi))
    return np.array(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=None)
    ap.add_argument("--iterations", type=int, default=80)
    ap.add_argument("--prior-weight", type=float, default=0.1)
    args = ap.parse_args(argv)
    records = load_records(args.data)
    prepared = cases(records)
    sources = sorted({r.source for r in records})
    weight = {s: 1.0 / np.sqrt(sum(r.source == s for r in records)) for s in sources}
    w = np.array([weight[r.source] for r in records])
    x0 = current_values(prepared)
    lo = np.array([p[3] for p in PARAMETERS])
    hi = np.array([p[4] for p in PARAMETERS])
    prior = np.array([p[5] for p in PARAMETERS])
    sigma = np.array([p[6] for p in PARAMETERS])
    scale = np.maximum(np.abs(x0), 1e-9)

    def residuals(z):
        res = evaluate(records, overrides=make_overrides(z * scale), prepared=prepared)
        data = w * np.array([np.log(r.predicted_step_s / r.record.measured_step_s) for r in res])
        return np.concatenate([data, args.prior_weight * np.log(z * scale / prior) / sigma])

    fit = least_squares(residuals, x0 / scale, bounds=(lo / scale, hi / scale), max_nfev=args.iterations,
                        diff_step=1e-3, x_scale="jac")
    values = fit.x * scale
    for (kind, group, name, *_), v in zip(PARAMETERS, values):
        unit = " s" if name.endswith("_s") else ""
        print(f"{kind:8s} {group:20s} {name:26s} {v:.4g}{unit}")
    summary = summarize(evaluate(records, overrides=make_overrides(values), prepared=prepared))
    print(f"MAPE overall {summary['mape_overall']:.3f}, by source:")
    for s, v in summary["mape_by_source"].items():
        print(f"  {s:14s} {v:.3f}")
    print("worst", summary["worst"], "pairs right", summary["pair_order_right"])


if __name__ == "__main__":
    main()
