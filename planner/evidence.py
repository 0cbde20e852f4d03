"""How far to trust a plan's numbers: the evidence behind the constants its layout leans on.

Read from the catalog's own provenance comments (each constant says FITTED on which runs, or ASSUMED
and why; tests/costmodels/test_provenance.py keeps them honest), so the report cannot drift from
the data files. The out-of-sample error per source is the one measured by benchmarks/validate.py
(README, "Validation against published runs").
"""
from __future__ import annotations

import re
from importlib import resources

from .emit.shell import printable

# Leave-one-source-out step-time error of the sources that ran the target framework, measured by
# `python benchmarks/validate.py` on 2026-12-06 (README). Update both together.
TARGET_FRAMEWORK_LOSO = (("vTrain's 1,440 single-node runs", 0.092), ("vTrain's 109 multi-node runs", 0.084),
                         ("the 10 DeepSpeed / Azure / Megatron-DeepSpeed example runs", 0.066),
                         ("BLOOM's 62 runs on Jean Zay", 0.050))
_LINE = re.compile(r"^\s*([a-z0-9_]+):\s*([^#\n]*?)\s*#\s*(.*)$")


def _provenance(kind: str, name: str) -> dict[str, tuple[str, str]]:
    """key -> (value, comment) of the catalog file whose `name:` is `name`."""
    folder = resources.files("costmodels") / "catalog" / kind
    for entry in folder.iterdir():
        if not entry.name.endswith(".yaml"):
            continue
        text = entry.read_text(encoding="utf-8")
        if re.search(rf"^name:\s*{re.escape(name)}\s*$", text, re.M):
            out = {}
            for line in text.splitlines():
                m = _LINE.match(line)
                if m:
                    out[m.group(1)] = (m.group(2), m.group(3))
            return out
    return {}


def _runs(comment: str) -> str:
    m = re.search(r"FITTED \(benchmarks/fit\.py\):\s*([^;]*)", comment)
    return m.group(1).strip() if m else comment


def evidence_lines(data: dict) -> list[str]:
    """Markdown bullets for plan.json-shaped `data`: where the evidence behind this plan is thin."""
    layout, inputs = data["layout"], data["inputs"]
    fw = _provenance("frameworks", inputs["framework"])
    gpu = _provenance("gpus", inputs["cluster"]["gpu"])
    out = []
    if inputs["framework"] == "megatron-deepspeed":
        loso = "; ".join(f"{err * 100:.0f}% on {name}" for name, err in TARGET_FRAMEWORK_LOSO)
        out.append("Step-time error on Megatron-DeepSpeed runs the constants were not fitted to "
                   f"(leave-one-source-out): {loso}. Differences between layouts smaller than this are "
                   "not established by the model.")
    if layout["zero_stage"] == 3 and "zero3_gather_efficiency" in fw:
        value, note = fw["zero3_gather_efficiency"]
        out.append(f"ZeRO-3: its gathers run at a fitted {value} of the link bandwidth, from "
                   f"{_runs(note)}: the weakest-supported constant behind this plan.")
    if layout["grad_comm"] == "zeropp":
        out.append("ZeRO++ quantised communication: no ZeRO++ run with model dimensions is in the "
                   "validation data; its quantisation kernels are charged as HBM traffic (physics only).")
    if layout["offload_optimizer"] != "none" or layout["offload_params"] != "none":
        value, note = fw.get("offload_overlap", ("?", ""))
        out.append(f"Offload: the share of PCIe traffic hidden behind compute ({value}) is {note or 'ASSUMED'}.")
    if layout.get("offload_activations", "none") != "none":
        out.append("Activation-checkpoint offload (--checkpoint-in-cpu): its copies are charged at the PCIe "
                   "data-sheet rate, not hidden (ASSUMED: DeepSpeed copies to pageable host memory, which can "
                   "be slower). The only measured runs with it are the four Azure ZeRO-3 runs, where the "
                   "copies are a few per cent of the step: no run checks this time on its own.")
    if layout["precision"] == "fp8" and "fp8_gemm_speedup" in gpu:
        value, note = gpu["fp8_gemm_speedup"]
        out.append(f"fp8: GEMM speed-up {value} over bf16, from {_runs(note)}.")
    eff = gpu.get("gemm_efficiency")
    if eff and "ASSUMED" in eff[1]:
        out.append(f"{printable(str(inputs['cluster']['gpu']))}: GEMM efficiency {eff[0]} is {eff[1]}")
    link = gpu.get("nvlink_efficiency")
    if not link:
        out.append(f"{printable(str(inputs['cluster']['gpu']))}: NCCL bus efficiency inside a node is the assumed default "
                   "(0.8); only the A100's is fitted to measured all-reduces.")
    host = fw.get("host_overhead")
    est = data.get("estimate", {})
    overhead = est.get("time_breakdown_s", {}).get("overhead", 0.0)
    if host and overhead > 0.05 * est.get("step_time_s", float("inf")):
        out.append(f"Host-bound: {overhead / est['step_time_s'] * 100:.0f}% of the step is the host issuing "
                   f"kernels and per-step work ({host[0]} per kernel, fitted on vTrain's small-model runs around the "
                   "emitted job's own host time measured on a CPU, 36 us: a GPU node's CPU may differ).")
    return out
