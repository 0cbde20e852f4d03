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

NAME = re.compile(r"^z(?P<zero>\d)-(?P<recompute>none|full)-mbs(?P<mbs>\d+)-s(?P<seq>\d+)-l(?P<layers>\d+)"
                  r"(-pp(?P<pp>\d+))?$")
ITERATION = 2


def _reports(out: Path, name: str) -> list[dict]:
    """The job's reports, one per worker (pipeline stage), in rank order."""
    reports = sorted((json.loads(f.read_text()) for f in out.glob(f"{name}.*.json")), key=lambda r: r.get("rank", 0))
    if not reports:
        raise SystemExit(f"{out}: no report for {name}")
    return reports


def _peak(calls: list[dict], kind: str):
    peaks = [c["peak_bytes"] for c in calls if c["call"] == kind]
    return max(peaks) if peaks else None


def job(out: Path, name: str) -> list[dict]:
    """One entry per pipeline stage. Under the PipelineEngine (pp > 1) an iteration is one train_batch call,
    whose peak is the stage's peak of the iteration; only the last stage calls the engine's backward."""
    plan = json.loads((out / name / "plan.json").read_text())
    fields = {k: int(v) if v and v.isdigit() else v for k, v in NAME.match(name).groupdict().items()}
    fields["pp"] = fields["pp"] or 1
    entries = []
    for report in _reports(out, name):
        calls = [c for c in report["calls"] if c["iteration"] == ITERATION]
        if not calls:
            raise SystemExit(f"{name}: no call of iteration {ITERATION} in its report (MEM_TRACE_ITERS >= {ITERATION})")
        first = next(c for c in calls if c["call"] == "forward" and c["micro_batch"] == 0)
        measured = {"iteration_start_bytes": first["start_bytes"],
                    "first_forward_saved_bytes": first["end_bytes"] - first["start_bytes"],
                    "forward_peak_bytes": _peak(calls, "forward"), "backward_peak_bytes": _peak(calls, "backward"),
                    "step_peak_bytes": _peak(calls, "step"), "iteration_peak_bytes": _peak(calls, "train_batch"),
                    "run_peak_bytes": report["peak_bytes"]}
        entries.append({"name": name, **fields, "stage": report.get("rank", 0),
                        "micro_batches": 1 + max(c["micro_batch"] for c in calls), "layout": plan["layout"],
                        "measured": {k: v for k, v in measured.items() if v is not None}})
    return entries


def per_layer(jobs: list[dict]) -> list[dict]:
    out = []
    key = lambda j: (j["zero"], j["recompute"], j["mbs"], j["seq"], j["pp"], j["stage"])  # noqa: E731
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
    jobs = [entry for n in names for entry in job(out, n)]
    model = yaml.safe_load((out / f"{names[0]}.yaml").read_text())
    model.pop("num_layers", None)
    model.pop("max_seq_len", None)
    doc = {"what": "Allocated bytes of the emitted Megatron-DeepSpeed job traced on the CPU, allocation by allocation "
                   "(benchmarks/gpu/mem_trace): the CPU's counterpart of torch.cuda.max_memory_allocated, for the "
                   "memory model of the target framework (costmodels/memory.py)",
           "how": "benchmarks/gpu/mem_trace/run.sh OUT NAME...; python benchmarks/gpu/mem_trace/summarise.py OUT. Each "
                  "job planned by `planner plan` (pp x H100-SXM, tp 1, bf16, flash attention, global batch = 4 "
                  "micro-batches) and trained 2 iterations through its own launch.sh (LAUNCHER=torchrun, a worker per "
                  "pipeline stage) on the CPU with the GPU runs' stand-ins; iteration 2 is read",
           "stack": {"torch": _reports(out, names[0])[0]["torch"], "deepspeed": "0.16.2 (DS_BUILD_OPS=0)",
                     "megatron_deepspeed": "6acc370a", "optimizer": "the GPU runs' apex stand-in (fused AdamW)",
                     "rmsnorm": "saves its input and the fp32 reciprocal RMS, as CUDA's fused op does"},
           "cluster": {"gpu": "H100-SXM"}, "framework": "megatron-deepspeed",
           "model": model, "jobs": jobs, "per_layer": per_layer(jobs)}
    yaml.safe_dump(doc, sys.stdout, sort_keys=False, width=110)


if __name__ == "__main__":
    main(*sys.argv[1:])
