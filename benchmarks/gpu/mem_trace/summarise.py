"""Summarise memory-trace reports (see README.md here) into benchmarks/data/mem_traces.yaml.

Usage: python benchmarks/gpu/mem_trace/summarise.py OUT_DIR > benchmarks/data/mem_traces.yaml

OUT_DIR is what run.sh wrote: NAME.PID.json per traced job, NAME.yaml (its model) and NAME/plan.json. For each
job: the allocated bytes at the start of the steady iteration (2: the optimizer state exists), the peak of its
forward, backward and optimizer-step calls, and the peak of the whole run. For every pair of jobs that differ
only in their layers, the bytes one layer keeps from the end of its forward (what it saves for backward).
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import yaml

NAME = re.compile(r"^z(?P<zero>\d)-(?P<recompute>none|full)-mbs(?P<mbs>\d+)-s(?P<seq>\d+)-l(?P<layers>\d+)$")
ITERATION = 2


def _report(out: Path, name: str) -> dict:
    files = sorted(out.glob(f"{name}.*.json"))
    if len(files) != 1:
        raise SystemExit(f"{out}: expected one report for {name}, found {len(files)}")
    return json.loads(files[0].read_text())


def job(out: Path, name: str) -> dict:
    report = _report(out, name)
    calls = [c for c in report["calls"] if c["iteration"] == ITERATION]
    if not calls:
        raise SystemExit(f"{name}: no call of iteration {ITERATION} in its report (MEM_TRACE_ITERS >= {ITERATION})")
    first = next(c for c in calls if c["call"] == "forward" and c["micro_batch"] == 0)
    peak = {kind: max(c["peak_bytes"] for c in calls if c["call"] == kind) for kind in ("forward", "backward", "step")}
    plan = json.loads((out / name / "plan.json").read_text())
    return {"name": name, **{k: int(v) if v.isdigit() else v for k, v in NAME.match(name).groupdict().items()},
            "micro_batches": 1 + max(c["micro_batch"] for c in calls), "layout": plan["layout"],
            "measured": {"iteration_start_bytes": first["start_bytes"],
                         "first_forward_saved_bytes": first["end_bytes"] - first["start_bytes"],
                         "forward_peak_bytes": peak["forward"], "backward_peak_bytes": peak["backward"],
                         "step_peak_bytes": peak["step"], "run_peak_bytes": report["peak_bytes"]}}


def per_layer(jobs: list[dict]) -> list[dict]:
    out = []
    key = lambda j: (j["zero"], j["recompute"], j["mbs"], j["seq"])  # noqa: E731
    for a in jobs:
        for b in jobs:
            if key(a) == key(b) and a["layers"] < b["layers"]:
                diff = b["measured"]["first_forward_saved_bytes"] - a["measured"]["first_forward_saved_bytes"]
                out.append({"jobs": [a["name"], b["name"]], "saved_bytes_per_layer": diff / (b["layers"] - a["layers"]),
                            "tokens": a["mbs"] * a["seq"]})
    return out


def main(out_dir: str) -> None:
    out = Path(out_dir)
    names = sorted({p.name.split(".")[0] for p in out.glob("*.json") if NAME.match(p.name.split(".")[0])})
    jobs = [job(out, n) for n in names]
    model = yaml.safe_load((out / f"{names[0]}.yaml").read_text())
    model.pop("num_layers", None)
    model.pop("max_seq_len", None)
    doc = {"what": "Allocated bytes of the emitted Megatron-DeepSpeed job traced on the CPU, allocation by allocation "
                   "(benchmarks/gpu/mem_trace): the CPU's counterpart of torch.cuda.max_memory_allocated, for the "
                   "memory model of the target framework (costmodels/memory.py)",
           "how": "benchmarks/gpu/mem_trace/run.sh OUT NAME...; python benchmarks/gpu/mem_trace/summarise.py OUT. Each "
                  "job planned by `planner plan` (1 x H100-SXM, bf16, flash attention, global batch = 4 micro-batches) "
                  "and trained 2 iterations through its own launch.sh (LAUNCHER=torchrun) on the CPU with the GPU runs' "
                  "stand-ins; iteration 2 is read",
           "stack": {"torch": _report(out, names[0])["torch"], "deepspeed": "0.16.2 (DS_BUILD_OPS=0)",
                     "megatron_deepspeed": "6acc370a", "optimizer": "the GPU runs' apex stand-in (fused AdamW)",
                     "rmsnorm": "saves its input and the fp32 reciprocal RMS, as CUDA's fused op does"},
           "cluster": {"gpu": "H100-SXM", "num_gpus": 1}, "framework": "megatron-deepspeed",
           "model": model, "jobs": jobs, "per_layer": per_layer(jobs)}
    yaml.safe_dump(doc, sys.stdout, sort_keys=False, width=110)


if __name__ == "__main__":
    main(*sys.argv[1:])
