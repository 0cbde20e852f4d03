"""Summarise host-time reports (see README.md here) into benchmarks/data/host_times.yaml.

Usage: python benchmarks/gpu/host_time/summarise.py OUT_DIR [OUT_DIR ...] > benchmarks/data/host_times.yaml

Each OUT_DIR is one pass of run.sh over the same job names (NAME.PID.json per job). Per job: the CPU time of
the engine's forward and backward per micro-batch, the smallest over the steady micro-batches (iteration 2
on, the boundary micro-batch left out: it also all-reduces and steps) and then over the passes, since the
shared machine only ever adds time. Per layer: the jobs that differ only in their layers, (t_L2 - t_L1) /
(L2 - L1). The tiny tensors still take CPU time in the attention-sized ops (dropout, softmax, batched
GEMMs over heads x s x s), so the per-layer time is measured at several sequence lengths and extrapolated
to none: t(s) = host + b s^2, least squares. `host` divided by the kernels the cost model counts for that
layer and pass (costmodels.compute._kernel_counts, plus the 2 per pass it adds for the layer's entry and
exit) is the host time per counted kernel, the physical counterpart of `host_overhead`.
"""
from __future__ import annotations

import datetime
import json
import platform
import re
import sys
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

NAME = re.compile(r"^z(?P<zero>\d)-(?P<recompute>none|full)-mbs(?P<mbs>\d+)-s(?P<seq>\d+)-l(?P<layers>\d+)"
                  r"-(?P<precision>bf16|fp16)$")
FIRST_ITERATION = 2


def _cpu_seconds(report: dict, call: str) -> float:
    last = max(c["micro_batch"] for c in report["calls"] if c["call"] == "forward")
    return min(c["cpu_s"] for c in report["calls"]
               if c["call"] == call and c["iteration"] >= FIRST_ITERATION and c["micro_batch"] < last)


def job_times(outs: list[Path]) -> dict:
    """{name: {'forward': s, 'backward': s, 'passes': n}}, the smallest over micro-batches and passes."""
    times: dict[str, dict] = {}
    for out in outs:
        for f in sorted(out.glob("*.json")):
            name = f.name.split(".")[0]
            if not NAME.match(name):
                continue
            report = json.loads(f.read_text())
            t = times.setdefault(name, {"forward": np.inf, "backward": np.inf, "passes": 0})
            t["passes"] += 1
            for call in ("forward", "backward"):
                t[call] = min(t[call], _cpu_seconds(report, call))
    return times


def counted_kernels(recompute: str) -> float:
    """Kernels the cost model counts per layer and micro-batch for layers.yaml's layer (with the 2 per
    pass for entry and exit): forward, the recomputed forward with full recompute, and backward."""
    from costmodels.compute import _kernel_counts
    from planner.specs import load_model
    fwd, bwd = _kernel_counts(load_model(Path(__file__).parent / "layers.yaml"), False)
    return float(fwd + 2.0) * (2.0 if recompute == "full" else 1.0) + float(bwd + 2.0)


def per_layer(times: dict) -> dict:
    """{(zero, recompute, mbs, precision): {seq: seconds per layer and micro-batch (forward + backward)}}."""
    groups: dict[tuple, dict] = {}
    for name, t in times.items():
        g = NAME.match(name).groupdict()
        key = (int(g["zero"]), g["recompute"], int(g["mbs"]), g["precision"], int(g["seq"]))
        groups.setdefault(key, {})[int(g["layers"])] = t["forward"] + t["backward"]
    out: dict[tuple, dict] = {}
    for (zero, recompute, mbs, precision, seq), by_layers in groups.items():
        if len(by_layers) < 2:
            continue
        (l1, t1), (l2, t2) = sorted(by_layers.items())[0], sorted(by_layers.items())[-1]
        out.setdefault((zero, recompute, mbs, precision), {})[seq] = (t2 - t1) / (l2 - l1)
    return out


def extrapolate(by_seq: dict) -> tuple[float, float, float]:
    """Least squares t(s) = host + b s^2 over the sequence lengths: (host, b, largest residual)."""
    s = np.array(sorted(by_seq), dtype=float)
    t = np.array([by_seq[int(x)] for x in s])
    a = np.stack([np.ones_like(s), s * s], axis=1)
    (host, b), *_ = np.linalg.lstsq(a, t, rcond=None)
    return float(host), float(b), float(np.max(np.abs(a @ np.array([host, b]) - t)))


def main(argv: list[str]) -> None:
    outs = [Path(a) for a in argv]
    times = job_times(outs)
    reports = [json.loads(f.read_text()) for out in outs for f in sorted(out.glob("*.json"))
               if NAME.match(f.name.split(".")[0])]
    jobs = []
    for (zero, recompute, mbs, precision), by_seq in sorted(per_layer(times).items()):
        entry = {"zero": zero, "recompute": recompute, "micro_batch": mbs, "precision": precision,
                 "per_layer_ms": {s: round(v * 1e3, 4) for s, v in sorted(by_seq.items())},
                 "counted_kernels_per_layer": counted_kernels(recompute)}
        if len(by_seq) >= 2:
            host, b, resid = extrapolate(by_seq)
            entry.update({"host_per_layer_ms": round(host * 1e3, 4), "s2_coefficient_us": round(b * 1e6, 5),
                          "largest_residual_ms": round(resid * 1e3, 4),
                          "host_per_counted_kernel_us": round(host / entry["counted_kernels_per_layer"] * 1e6, 2)})
        jobs.append(entry)
    doc = {
        "what": "CPU time per transformer layer and micro-batch of the emitted Megatron-DeepSpeed job, run on the "
                "CPU with tiny tensors (benchmarks/gpu/host_time), and that time per kernel the cost model counts: "
                "the host's side of the layer, the physical anchor of host_overhead (benchmarks/fit.py)",
        "how": "python benchmarks/gpu/host_time/summarise.py over run.sh passes; per job the smallest CPU time of "
               "the engine's forward + backward over steady micro-batches and passes; per layer the difference of "
               "the 2- and 8-layer jobs / 6; extrapolated to s = 0 as host + b s^2",
        "stack": {"torch": reports[0].get("torch") if reports else None, "python": platform.python_version(),
                  "cpu": _cpu_name(), "threads": reports[0].get("threads") if reports else None,
                  "passes": max((t["passes"] for t in times.values()), default=0),
                  "date": datetime.date.today().isoformat()},
        "jobs": jobs,
    }
    print("# Written by benchmarks/gpu/host_time/summarise.py (see its README); read by benchmarks/fit.py and "
          "tests/costmodels/test_host_times.py.")
    print(yaml.safe_dump(doc, sort_keys=False, width=110), end="")


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


if __name__ == "__main__":
    main(sys.argv[1:])
