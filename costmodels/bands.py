"""Error bands: an 80% interval around every step-time and peak-memory estimate.

The numbers come from `catalog/error_bands.yaml`, written by `python benchmarks/bands.py --write`
from the cross-validated residuals (leave-one-source-out: each source predicted by constants fitted
without it). This module only applies them; how they were made is in that file's header.

Step time. Residual r = log(predicted / measured). For every component a layout uses (the
framework, the GPU family, ZeRO-3, offload, pipeline, context parallel, fp8, multi-node, TP beyond
the NVLink domain) the file holds the 10th and 90th percentile of r over the LOSO runs that use it,
each source weighted equally. Rule (conservative, documented in README "Error bands"):

  1. widest applicable: r_low = min over the layout's components of q10, r_high = max of q90
     (the overall band is always one of them); a component seen in fewer than MIN_RUNS runs or in a
     single source is not trusted on its own: its band is the widest of its own and the overall
     band times THIN_FACTOR; then both are multiplied by the file's `width_scale`, FITTED by
     benchmarks/bands.py so that the band holds for 80% of the runs (mean of sources) when each
     source's band is made from the other sources only: the widest-of rule alone over-covers;
  2. thin constants: a fitted constant that fewer than 20 runs or fewer than 3 sources constrain
     (the file lists them, with the range its LOSO refits took) is varied over that range and the
     estimate recomputed; the relative change is added to the band on its side (log space);
  3. floor: at least STEP_FLOOR either side.

The measured value then lies in [predicted * exp(-r_high), predicted * exp(-r_low)].

Peak memory: the same from the measured-memory runs (few: the file says how many), at least
MEMORY_FLOOR either side.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field, replace
from importlib import resources

import numpy as np
import yaml

from .types import ZERO3, ClusterSpec, Estimate, Framework, Layout, ModelSpec

LEVEL = 0.8               # the band is an 80% interval (10th to 90th percentile)
MIN_RUNS = 8              # a component band from fewer runs (or one source) is widened (rule 1)
THIN_FACTOR = 1.5         # ... to at least the overall band times this
STEP_FLOOR = 0.05         # at least 5% either side for step time
MEMORY_FLOOR = 0.10       # at least 10% either side for memory (few measured runs)

GPU_FAMILY = {"A100-80GB": "A100", "A100-40GB": "A100", "V100-32GB": "V100", "H100-SXM": "H100",
              "H100-96GB-500W": "H100", "H100-PCIe": "H100", "H200": "H100", "GB200": "Blackwell",
              "B200": "Blackwell"}
COMPONENT_TEXT = {
    "all": "all runs", "zero3": "ZeRO-3", "offload": "CPU/NVMe offload", "pipeline": "pipeline parallel",
    "context_parallel": "context parallel", "fp8": "fp8", "multi_node": "multi-node",
    "tp_beyond_nvlink": "TP beyond the NVLink domain",
}


def gpu_family(name: str) -> str:
    return GPU_FAMILY.get(name, name)


def components(framework: str, layout: Layout, cluster: ClusterSpec) -> list[str]:
    """The components of a layout whose residuals make its band ('all' first)."""
    out = ["all", f"framework:{framework}", f"gpu:{gpu_family(cluster.gpu.name)}"]
    world = layout.world
    if layout.zero == ZERO3:
        out.append("zero3")
        out.append(f"zero3:{framework}")
    if any(getattr(getattr(layout, k), "value", "none") != "none"
           for k in ("offload_optimizer", "offload_params", "offload_activations")):
        out.append("offload")
    if layout.pp > 1:
        out.append("pipeline")
    if layout.cp > 1:
        out.append("context_parallel")
    if getattr(layout.precision, "value", "") == "fp8":
        out.append("fp8")
    if world > cluster.gpus_per_node:
        out.append("multi_node")
    if layout.tp > cluster.nvlink_domain:
        out.append("tp_beyond_nvlink")
    return out


def component_text(name: str) -> str:
    if name in COMPONENT_TEXT:
        return COMPONENT_TEXT[name]
    kind, _, value = name.partition(":")
    if kind == "zero3":
        return f"ZeRO-3 under {value}"
    return f"{kind} {value}"


@functools.lru_cache(maxsize=1)
def load_bands() -> dict:
    """The band file (catalog/error_bands.yaml)."""
    text = (resources.files("costmodels") / "catalog" / "error_bands.yaml").read_text(encoding="utf-8")
    from .catalog import _strict_load
    return _strict_load(text)


@dataclass(frozen=True)
class Band:
    """An interval [low, high] around `value` and what made it."""

    value: float
    low: float
    high: float
    level: float = LEVEL
    widest: tuple[str, str] = ("all", "all")     # components that set the low and the high side
    thin: tuple[str, ...] = ()                   # thin constants that widened it (rule 2)
    notes: tuple[str, ...] = field(default=())

    def as_list(self) -> list[float]:
        return [self.low, self.high]

    def overlaps(self, other: "Band") -> bool:
        return self.low <= other.high and other.low <= self.high


def residual_offsets(comps: list[str], table: dict | None = None) -> tuple[float, float, str, str]:
    """(r_low, r_high, component of the low side, of the high side) by rule 1."""
    data = table if table is not None else load_bands()
    step = data["step_time"]
    overall = step["components"]["all"]
    r_lo, r_hi = float(overall["q10"]), float(overall["q90"])
    lo_by, hi_by = "all", "all"
    for name in comps[1:]:
        entry = step["components"].get(name)
        if entry is None:
            # never seen in a run: the overall band, widened as a thin component
            q10, q90 = THIN_FACTOR * float(overall["q10"]), THIN_FACTOR * float(overall["q90"])
        else:
            q10, q90 = float(entry["q10"]), float(entry["q90"])
            if entry["runs"] < MIN_RUNS or entry["sources"] < 2:
                q10 = min(q10, THIN_FACTOR * float(overall["q10"]))
                q90 = max(q90, THIN_FACTOR * float(overall["q90"]))
        if q10 < r_lo:
            r_lo, lo_by = q10, name
        if q90 > r_hi:
            r_hi, hi_by = q90, name
    scale = float(step.get("width_scale", 1.0))
    return scale * r_lo, scale * r_hi, lo_by, hi_by


def _in_use(p: dict, cluster: ClusterSpec, framework: Framework):
    """The value of thin constant `p` the estimate uses, or None where it does not apply."""
    if p["kind"] == "fw":
        return getattr(framework, p["field"], None) if framework.name in p["groups"] else None
    if p["kind"] == "gpu":
        return getattr(cluster.gpu, p["field"], None) if gpu_family(cluster.gpu.name) in p["groups"] else None
    return None


def _with_constant(p: dict, value: float, cluster: ClusterSpec, framework: Framework):
    """(cluster, framework) with one fitted constant set to `value`, or None if it does not apply."""
    if _in_use(p, cluster, framework) is None:
        return None
    if p["kind"] == "fw":
        return cluster, replace(framework, **{p["field"]: value})
    return replace(cluster, gpu=replace(cluster.gpu, **{p["field"]: value})), framework


def thin_constant_name(p: dict) -> str:
    return f"{p['field']} ({p['runs']} runs, {p['sources']} sources)"


def vary_thin_constants(model: ModelSpec, cluster: ClusterSpec, framework: Framework, layout: Layout,
                        table: dict | None = None, only_catalog: bool = True):
    """For each thin constant that applies to the layout: (entry, step time at its low, at its high).
    With `only_catalog`, a constant whose value in use is not the catalog's is left alone: a
    calibration (`planner calibrate`) or a file of one's own measured it for this cluster, and the
    LOSO range says nothing about that value (a calibrated host time per kernel was varied back)."""
    from .estimate import estimate

    data = table if table is not None else load_bands()
    for p in data["step_time"].get("thin_constants", []):
        value = _in_use(p, cluster, framework)
        if only_catalog and value is not None and p.get("catalog") and \
                abs(float(value) / float(p["catalog"]) - 1.0) > 2e-3:     # the file keeps 4 digits
            continue
        times = []
        for value in (p["low"], p["high"]):
            changed = _with_constant(p, float(value), cluster, framework)
            if changed is None:
                break
            times.append(estimate(model, changed[0], changed[1], layout).step_time_s)
        if len(times) == 2:
            yield p, times[0], times[1]


def thin_constant_offsets(model: ModelSpec, cluster: ClusterSpec, framework: Framework, layout: Layout,
                          step_s: float, table: dict | None = None,
                          only_catalog: bool = True) -> tuple[float, float, tuple[str, ...]]:
    """Rule 2: vary each thin constant over its LOSO range; (log down, log up, names that mattered)."""
    down = up = 0.0
    names = []
    for p, t_low, t_high in vary_thin_constants(model, cluster, framework, layout, table, only_catalog):
        times = (t_low, t_high)
        lo, hi = math.log(min(times) / step_s), math.log(max(times) / step_s)
        if max(abs(lo), abs(hi)) < 1e-3:
            continue
        down += min(lo, 0.0)
        up += max(hi, 0.0)
        names.append(thin_constant_name(p))
    return down, up, tuple(names)


def step_time_band(model: ModelSpec, cluster: ClusterSpec, framework: Framework, layout: Layout,
                   est: Estimate, table: dict | None = None) -> Band:
    """The 80% band of the step time of `layout` (rules 1-3 above)."""
    data = table if table is not None else load_bands()
    step = est.step_time_s
    comps = components(framework.name, layout, cluster)
    r_lo, r_hi, lo_by, hi_by = residual_offsets(comps, data)
    down, up, thin = thin_constant_offsets(model, cluster, framework, layout, step, data)
    # measured = predicted * exp(-r): a residual above 0 (predicted too slow) opens the band downwards
    low = step * math.exp(-r_hi + down)
    high = step * math.exp(-r_lo + up)
    low = min(low, step * (1.0 - STEP_FLOOR))
    high = max(high, step * (1.0 + STEP_FLOOR))
    return Band(step, low, high, widest=(hi_by, lo_by), thin=thin)


def memory_band(est: Estimate, table: dict | None = None) -> Band:
    """The 80% band of the peak memory per GPU."""
    data = table if table is not None else load_bands()
    mem = data["memory"]
    peak = est.peak_memory_bytes
    low = min(peak * math.exp(-float(mem["q90"])), peak * (1.0 - MEMORY_FLOOR))
    high = peak * memory_high_factor(data)
    return Band(peak, low, high)


def oom_risk(est: Estimate, band: Band) -> bool:
    """The upper memory band exceeds the GPU's memory."""
    return band.high > est.hbm_bytes


def memory_high_factor(table: dict | None = None) -> float:
    """Upper memory band / point estimate (the same factor for every estimate, see memory_band)."""
    data = table if table is not None else load_bands()
    return max(math.exp(-float(data["memory"]["q10"])), 1.0 + MEMORY_FLOOR)


def oom_risk_rows(peak_bytes, hbm_bytes: float, table: dict | None = None):
    """oom_risk for arrays of point estimates of peak memory (a batch of layouts on one GPU)."""
    return np.asarray(peak_bytes, dtype=float) * memory_high_factor(table) > hbm_bytes


__all__ = ["Band", "components", "component_text", "load_bands", "memory_band", "memory_high_factor", "oom_risk",
           "oom_risk_rows",
           "residual_offsets", "step_time_band", "thin_constant_name", "thin_constant_offsets",
           "vary_thin_constants", "LEVEL"]
