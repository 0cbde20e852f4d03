"""The planner's own jobs trained on a GPU (benchmarks/data/gpu_runs.yaml, written by
benchmarks/gpu_probe.py record): one more source for benchmarks/validate.py, never fitted. Each run
becomes a planner.validation.Record of the layout its plan.json holds, so it is predicted again with
the catalog's constants as they stand, not only with the prediction recorded when it ran."""
from __future__ import annotations

import os
from pathlib import Path

import yaml

from planner.validation import Record

ROOT = Path(__file__).resolve().parents[1]
GPU_RUNS_FILE = ROOT / "benchmarks" / "data" / "gpu_runs.yaml"
SOURCE = "gpu-probe:megatron-deepspeed"


def load_gpu_runs(path: str | os.PathLike | None = None, finished_only: bool = True) -> list[Record]:
    """Records of the runs that trained all their iterations (the step time is the median of the
    last 20); memory is torch's max allocated over the whole run."""
    doc = yaml.safe_load(Path(path or GPU_RUNS_FILE).read_text())
    out = []
    for run in doc["runs"]:
        m = run.get("measured")
        if m is None and finished_only:
            continue
        case = {"model": str(ROOT / doc["model"]), "cluster": dict(doc["cluster"]),
                "parallel": dict(run["layout"]), "framework": doc["framework"]}
        out.append(Record(id=f"gpu-probe-{run['name']}", source=SOURCE, case=case,
                          measured_step_s=m["step_time_s"] if m else None,
                          measured_memory_gib=m["max_allocated_gib"] if m else None,
                          memory_method="allocated" if m else None, model_key=("tinyllama-1.1b",)))
    return out
