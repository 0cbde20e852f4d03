"""Summarise host-time reports (see README.md here) into benchmarks/data/host_times.yaml.

Usage: python benchmarks/gpu/host_time/summarise.py OUT_DIR [OUT_DIR ...] > benchmarks/data/host_times.yaml
       python benchmarks/gpu/host_time/summarise.py --zero3 OUT_DIR [OUT_DIR ...] > benchmarks/data/zero3_hooks.yaml

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
ANCHOR_LAYER = "host-time-layers"     # layers.yaml's name: the layer host_overhead is anchored on


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
            if not NAME.match(name) or f.name.count(".") != 2:
                continue
            report = json.loads(f.read_text())
            t = times.setdefault(name, {"forward": np.inf, "backward": np.inf, "passes": 0})
            t["passes"] += 1
            for call in ("forward", "backward"):
                t[call] = min(t[call], _cpu_seconds(report, call))
    return times


def pass_layer_times(out: Path) -> dict:
    """One pass: {(layer name, recompute, mbs, seq, precision, flash): {zero: {'forward': s, 'backward': s}}},
    the CPU time per layer and micro-batch of each call ((t_L2 - t_L1) / (L2 - L1), steady micro-batches)."""
    jobs: dict[tuple, dict] = {}
    for f in sorted(out.glob("*.json")):
        name = f.name.split(".")[0]
        if not NAME.match(name) or f.name.count(".") != 2:      # NAME.PID.json (not NAME.syncs.PID.json)
            continue
        g = NAME.match(name).groupdict()
        layer = yaml.safe_load((out / f"{name}.yaml").read_text())["name"]
        flash = bool(json.loads((out / name / "plan.json").read_text())["layout"]["flash_attention"])
        key = (layer, g["recompute"], int(g["mbs"]), int(g["seq"]), g["precision"], flash)
        report = json.loads(f.read_text())
        jobs.setdefault(key, {}).setdefault(int(g["zero"]), {})[int(g["layers"])] = {
            call: _cpu_seconds(report, call) for call in ("forward", "backward")}
    out_times: dict[tuple, dict] = {}
    for key, by_zero in jobs.items():
        for zero, by_layers in by_zero.items():
            if len(by_layers) >= 2:
                (l1, t1), (l2, t2) = sorted(by_layers.items())[0], sorted(by_layers.items())[-1]
                out_times.setdefault(key, {})[zero] = {c: (t2[c] - t1[c]) / (l2 - l1) for c in t1}
    return out_times


def zero3_hooks(outs: list[Path]) -> list[dict]:
    """ZeRO-3's hooks per module and pass. In every pass, the ZeRO-3 job's CPU time per layer less the ZeRO-0
    job's with the same layer and knobs, forward and backward, then the median over passes, divided by the
    modules the layer runs (costmodels.compute.zero3_hooked_modules). Without recompute the backward's extra is
    the backward hooks; with full recompute it also holds the recomputed forward's, which is taken off."""
    from costmodels.compute import zero3_hooked_modules
    extras: dict[tuple, dict] = {}
    for out in outs:
        for key, by_zero in pass_layer_times(out).items():
            if 0 in by_zero and 3 in by_zero:
                for call in ("forward", "backward"):
                    extras.setdefault(key, {}).setdefault(call, []).append(by_zero[3][call] - by_zero[0][call])
    rows = []
    for (layer, recompute, mbs, seq, precision, flash), by_call in sorted(extras.items()):
        modules = float(zero3_hooked_modules(flash))
        fwd = float(np.median(by_call["forward"])) / modules
        bwd = float(np.median(by_call["backward"])) / modules - (fwd if recompute == "full" else 0.0)
        rows.append({"layer": layer, "recompute": recompute, "micro_batch": mbs, "seq": seq, "precision": precision,
                     "flash_attention": flash, "modules_per_layer": modules, "passes": len(by_call["forward"]),
                     "forward_us_per_module": round(fwd * 1e6, 1), "backward_us_per_module": round(bwd * 1e6, 1)})
    return rows


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


def zero3_main(outs: list[Path]) -> None:
    """benchmarks/data/zero3_hooks.yaml: ZeRO-3's hook time per module and pass (zero3_hooks), and that time in
    counted kernels of the same passes: the vTrain layer's ZeRO-0 job (layers.yaml, full recompute), its CPU time
    per layer over the kernels the cost model counts for it (88), median over the passes."""
    anchor = []
    for out in outs:
        for (layer, recompute, *_), by_zero in pass_layer_times(out).items():
            if layer == ANCHOR_LAYER and recompute == "full" and 0 in by_zero:
                anchor.append(sum(by_zero[0].values()) / counted_kernels("full"))
    per_kernel = float(np.median(anchor))
    rows = zero3_hooks(outs)
    for row in rows:
        row["forward_kernels_per_module"] = round(row["forward_us_per_module"] * 1e-6 / per_kernel, 2)
        row["backward_kernels_per_module"] = round(row["backward_us_per_module"] * 1e-6 / per_kernel, 2)
    doc = {
        "what": "host time of DeepSpeed 0.16.2 ZeRO-3's hooks around each submodule of the emitted Megatron-DeepSpeed "
                "job, per module and pass, measured on the CPU (benchmarks/gpu/host_time, README 'ZeRO-3's hooks')",
        "how": "python benchmarks/gpu/host_time/summarise.py --zero3 over run.sh passes; per pass the ZeRO-3 job's CPU "
               "time per layer less the ZeRO-0 job's (2- and 8-layer jobs), median over passes, / modules per layer; "
               "in counted kernels: / the vTrain layer's ZeRO-0 CPU time per counted kernel in the same passes",
        "stack": {"python": platform.python_version(), "cpu": _cpu_name(), "passes": len(outs),
                  "date": datetime.date.today().isoformat()},
        "anchor_us_per_counted_kernel": round(per_kernel * 1e6, 2),
        "layers": rows,
        "forward_kernels_per_module": round(float(np.mean([r["forward_kernels_per_module"] for r in rows])), 1),
        "backward_kernels_per_module": round(float(np.mean([r["backward_kernels_per_module"] for r in rows])), 1),
    }
    print("# Written by benchmarks/gpu/host_time/summarise.py --zero3 (see its README); read by "
          "tests/costmodels/test_host_times.py.")
    print(yaml.safe_dump(doc, sort_keys=False, width=110), end="")


def main(argv: list[str]) -> None:
    if argv and argv[0] == "--zero3":
        return zero3_main([Path(a) for a in argv[1:]])
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
