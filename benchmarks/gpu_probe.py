"""Train the planner's own Megatron-DeepSpeed jobs on one GPU and record measured against predicted.

Three steps, so the GPU is held only while jobs train (issue 10):

    python benchmarks/gpu_probe.py plan  [--jobs .gpu/jobs]            # here: `planner plan` per layout
    scripts/gpu_probe.sh "$OUT"                                         # on the GPU machine: `run`
    python benchmarks/gpu_probe.py record OUT [OUT2 ...]                # here: parse, write YAML

`plan` pins each layout of LAYOUTS for TinyLlama 1.1B (benchmarks/gpu/tinyllama-1.1b.yaml) on one
H100-SXM and writes the job folder `planner plan` emits (launch.sh, ds_config.json, plan.json), with a
token budget of ITERATIONS steps, so launch.sh itself trains ITERATIONS iterations.

`run` (standard library only: the GPU machine has no planner dependencies) makes the data set
(benchmarks/gpu/make_data.py), then runs each job's own launch.sh with `--log-interval 1` appended (one
iteration time per line; launch.sh passes its arguments on after the planned ones) and, except for the
layouts in SAVE_CHECKPOINT, `--save ''` (no final checkpoint). It appends one JSON line per job to
results.jsonl and re-packs the logs after every job, so a run cut short keeps what it measured.

`record` reads the logs with `planner calibrate`'s own parser (planner/calibrate.py parse_log) and writes
benchmarks/data/gpu_runs.yaml: per job its layout, measured {step_time_s: median of the last
STEADY iterations, max_allocated_gib, max_reserved_gib} and predicted {step_time_s, peak_memory_gib,
allocated_gib} from its plan.json, with the commit, package versions and GPU.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "benchmarks" / "gpu" / "tinyllama-1.1b.yaml"
GPU = "H100-SXM"
ITERATIONS = 30
STEADY = 20                  # the last STEADY iteration times give the measured step time (median)
TOKENS_PER_STEP = 32_768     # global batch 16 at sequence 2,048, 8 at 4,096

# (name, ZeRO stage, recompute, micro batch, sequence): the ones most plans use first, so a run cut
# short by the machine's time limit has measured those.
LAYOUTS = [
    ("z1-none-mbs2-s2048", 1, "none", 2, 2048),
    ("z0-none-mbs2-s2048", 0, "none", 2, 2048),
    ("z2-none-mbs2-s2048", 2, "none", 2, 2048),
    ("z3-none-mbs2-s2048", 3, "none", 2, 2048),
    ("z1-full-mbs2-s2048", 1, "full", 2, 2048),
    ("z1-none-mbs1-s2048", 1, "none", 1, 2048),
    ("z1-none-mbs4-s2048", 1, "none", 4, 2048),
    ("z1-none-mbs1-s4096", 1, "none", 1, 4096),
    ("z1-none-mbs2-s4096", 1, "none", 2, 4096),
    ("z3-full-mbs4-s4096", 3, "full", 4, 4096),
    ("z0-full-mbs4-s2048", 0, "full", 4, 2048),
    ("z2-full-mbs1-s4096", 2, "full", 1, 4096),
    ("z0-none-mbs4-s4096", 0, "none", 4, 4096),
    ("z3-none-mbs1-s2048", 3, "none", 1, 2048),
]
SAVE_CHECKPOINT = {"z1-none-mbs2-s2048", "z3-none-mbs2-s2048"}   # these also write launch.sh's checkpoint


def plan(jobs: Path) -> None:
    """`planner plan` for every layout; each job folder as the CLI writes it."""
    if jobs.exists():
        shutil.rmtree(jobs)
    jobs.mkdir(parents=True)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                                capture_output=True, text=True).stdout.strip())
    for name, zero, recompute, mbs, seq in LAYOUTS:
        gbs = TOKENS_PER_STEP // seq
        cmd = [sys.executable, "-m", "planner.cli", "plan", "--model", str(MODEL), "--cluster", GPU, "--gpus", "1",
               "--global-batch", str(gbs), "--seq-len", str(seq), "--mbs", str(mbs), "--zero", str(zero),
               "--recompute", recompute, "--precision", "bf16", "--flash-attention", "true", "--tp", "1",
               "--pp", "1", "--offload-optimizer", "none", "--offload-params", "none",
               "--tokens", str(ITERATIONS * gbs * seq), "--out", str(jobs / name), "--quiet", "--no-progress"]
        if recompute == "full":
            cmd += ["--recompute-layers", "0"]           # every layer, Megatron's --checkpoint-activations
        subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
        print(f"planned {name}")
    (jobs / "manifest.json").write_text(json.dumps({"commit": commit, "dirty": dirty,
                                                    "layouts": [l[0] for l in LAYOUTS]}, indent=1) + "\n")


def _environment() -> dict:
    def out(cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""
    code = ("import json, sys, torch, deepspeed, pydantic; print(json.dumps({'python': sys.version.split()[0], "
            "'torch': torch.__version__, 'cuda': torch.version.cuda, 'deepspeed': deepspeed.__version__, "
            "'pydantic': pydantic.__version__, 'gpu': torch.cuda.get_device_name(0), "
            "'nccl': '.'.join(map(str, torch.cuda.nccl.version()))}))")
    printed = [line for line in out([sys.executable, "-c", code]).splitlines() if line.startswith("{")]
    env = json.loads(printed[-1]) if printed else {}       # DeepSpeed logs to stdout too; no GPU: nothing
    env["driver"] = out(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    env["nvcc"] = out(["nvcc", "--version"]).splitlines()[-1:]
    return env


def _pack(out: Path, logs: Path) -> None:
    tmp = out / "logs.tar.gz.tmp"
    with tarfile.open(tmp, "w:gz") as tar:
        tar.add(logs, arcname="logs")
    tmp.replace(out / "logs.tar.gz")


UNSYNCED = "+unsynced"     # suffix of a layout run again with DeepSpeed's throughput timer unsynchronised


def unsynced_config(job: Path, dest: Path) -> Path:
    """The job's ds_config.json with DeepSpeed's throughput timer left unsynchronised: by default it
    synchronises the device at every engine.forward when the client brings its own data loader
    (deepspeed/runtime/engine.py:1909, deepspeed/utils/timer.py:237, v0.16.2), i.e. every micro-batch of
    Megatron-DeepSpeed. Passed as a second --deepspeed_config after the planned one (the last wins)."""
    config = json.loads((job / "ds_config.json").read_text())
    config["timers"] = {"throughput": {"enabled": True, "synchronized": False}}
    dest.write_text(json.dumps(config, indent=2) + "\n")
    return dest


def tasks(jobs: Path, names: list[str], skip: set[str], trace: set[str], unsynced: list[str], logs: Path):
    """(run name, job folder, extra launch.sh arguments, extra environment) in the order they run: the
    layouts, then those of `unsynced` again with the unsynchronised timer (name + UNSYNCED)."""
    out = []
    for name in [n for n in names if n not in skip] + [n + UNSYNCED for n in unsynced]:
        layout = name.removesuffix(UNSYNCED)
        extra = ["--log-interval", "1"] + ([] if layout in SAVE_CHECKPOINT and name == layout else ["--save", ""])
        if name != layout:
            extra += ["--deepspeed_config", str(unsynced_config(jobs / layout, logs / f"{name}.ds_config.json"))]
        env = {"GPU_PROBE_TRACE": str(logs / f"{name}.trace")} if name in trace else {}
        out.append((name, jobs / layout, extra, env))
    return out


def run(jobs: Path, out: Path, data: Path, budget_s: float, skip: set[str], per_job_s: float,
        only: list[str], launcher: str, trace: set[str] = frozenset(), unsynced: list[str] = ()) -> None:
    start = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    logs = out / "logs_dir"
    logs.mkdir(exist_ok=True)
    (out / "environment.json").write_text(json.dumps(_environment(), indent=1) + "\n")
    megatron = Path(os.environ["MEGATRON_DS_DIR"])
    if not (data / "corpus_text_document.idx").exists():
        t = time.monotonic()
        subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu" / "make_data.py"), str(megatron), str(data)],
                       check=True, stdout=subprocess.DEVNULL)
        print(f"data made in {time.monotonic() - t:.0f} s", flush=True)
    names = only or json.loads((jobs / "manifest.json").read_text())["layouts"]
    for i, (name, job, extra, traced) in enumerate(tasks(jobs, names, skip, trace, unsynced, logs)):
        left = budget_s - (time.monotonic() - start)
        if left < 60:
            print(f"stopping before {name}: {left:.0f} s of the budget left", flush=True)
            break
        ckpt = Path("/tmp/gpu_probe_ckpt") / name
        shutil.rmtree(ckpt, ignore_errors=True)
        ckpt.mkdir(parents=True)
        env = dict(os.environ, DATA_PATH=str(data / "corpus_text_document"),
                   TOKENIZER_MODEL=str(data / "tokenizer.model"), CHECKPOINT_PATH=str(ckpt),
                   MASTER_PORT=str(29500 + i), GPU_PROBE_REPORT="1", LAUNCHER=launcher, **traced)
        log = logs / f"{name}.log"
        t = time.monotonic()
        with log.open("w") as f:
            p = subprocess.Popen(["bash", str(job / "launch.sh"), *extra], env=env, stdout=f,
                                 stderr=subprocess.STDOUT, start_new_session=True)
            try:
                rc = p.wait(timeout=min(per_job_s, left - 20))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
                rc = "timeout"
        wall = time.monotonic() - t
        saved = sum(f.stat().st_size for f in ckpt.rglob("*") if f.is_file())
        shutil.rmtree(ckpt, ignore_errors=True)
        rec = {"name": name, "rc": rc, "wall_s": round(wall, 1), "checkpoint_bytes": saved, "extra_args": extra,
               "launcher": launcher, "traced": bool(traced)}
        with (out / "results.jsonl").open("a") as f:
            f.write(json.dumps(rec) + "\n")
        _pack(out, logs)
        print(json.dumps(rec), flush=True)
    shutil.rmtree(logs, ignore_errors=True)


def _gib(mb) -> float | None:
    return None if mb is None else round(mb * 2**20 / 2**30, 3)


def _hook_memory(text: str) -> dict:
    """The probe hook's lines (benchmarks/gpu/probe_hook/sitecustomize.py): each process's peaks at exit;
    the launcher's processes print zeros, the training process its peaks, so the largest is taken."""
    found = {}
    for line in text.splitlines():
        if line.startswith("gpu_probe_memory "):
            for k, v in (kv.split("=", 1) for kv in line.split()[1:]):
                found[k] = max(found.get(k, 0), int(v))
    return found if any(found.values()) else {}


def _unpack(out: Path) -> Path:
    """A `run` folder's logs.tar.gz, unpacked beside it; the folder of the logs."""
    work = out / "unpacked"
    shutil.rmtree(work, ignore_errors=True)
    with tarfile.open(out / "logs.tar.gz") as tar:
        tar.extractall(work, filter="data")
    return work / "logs"


def _iteration_times(text: str) -> list[float]:
    """Every 'elapsed time per iteration (ms)' of a log, in seconds (a log cut short included)."""
    key = "elapsed time per iteration (ms): "
    return [float(l.split(key)[1].split()[0]) / 1e3 for l in text.splitlines() if key in l]


def utilisation(out: Path) -> dict:
    """A `run` folder that also holds `nvidia-smi dmon -s u -d 1` output (dmon_final.txt): the GPU's busy
    share each second (utilization.gpu: the time some kernel ran) while its job trained, beside the
    iteration times it logged. The training seconds are those from the first reading of 20% or more to
    the last (start-up reads 0-9%, idle 0%); every reading is kept beside them."""
    rec = json.loads((out / "results.jsonl").read_text().splitlines()[0])
    times = _iteration_times((_unpack(out) / f"{rec['name']}.log").read_text(errors="replace"))
    every = [int(l.split()[1]) for l in (out / "dmon_final.txt").read_text().splitlines()
             if l.strip() and not l.startswith("#")]
    first = next((i for i, b in enumerate(every) if b >= 20), len(every))
    last = max((i for i, b in enumerate(every) if b >= 20), default=first - 1)
    busy = every[first:last + 1]
    return {"run": rec["name"], "launcher": rec.get("launcher"), "exit_code": rec["rc"],
            "iterations_logged": len(times), "iteration_times_s": [round(t, 3) for t in times],
            "tool": "nvidia-smi dmon -s u -d 1 (sm: percent of each second some kernel ran)",
            "gpu_busy_pct_each_second": every, "training_seconds": [first, last + 1],
            "gpu_busy_pct_median_while_training": statistics.median(busy) if busy else None}


def record(outs: list[Path], jobs: Path, dest: Path, utilisation_of: list[Path] = ()) -> dict:
    """Each OUT folder of a `run` (results.jsonl, logs.tar.gz, environment.json); a layout measured in
    several is taken from the last."""
    sys.path.insert(0, str(ROOT))
    from planner.calibrate import parse_log
    recs, logs_of = {}, {}
    for out in outs:
        logs = _unpack(out)
        for line in (out / "results.jsonl").read_text().splitlines():
            rec = json.loads(line)
            recs[rec["name"]] = rec
            logs_of[rec["name"]] = logs / f"{rec['name']}.log"
    manifest = json.loads((jobs / "manifest.json").read_text())
    env = json.loads((outs[0] / "environment.json").read_text())
    runs = []
    for spec in [l for l in LAYOUTS if l[0] in recs]:
        name = spec[0]
        rec = recs[name]
        p = json.loads((jobs / name / "plan.json").read_text())
        est = p["estimate"]
        log = logs_of[name]
        assert (p["layout"]["zero_stage"], p["layout"]["micro_batch"], p["layout"]["seq_len"]) == \
            (spec[1], spec[3], spec[4]), name
        run_ = {"name": name, "layout": p["layout"],
                "launch": {"launcher": rec.get("launcher", "deepspeed"), "extra_args": rec["extra_args"],
                           "exit_code": rec["rc"], "wall_s": rec["wall_s"],
                           "checkpoint_bytes": rec["checkpoint_bytes"]},
                "predicted": {"step_time_s": round(est["step_time_s"], 4),
                              "peak_memory_gib": round(est["peak_memory_gib"], 3),
                              "allocated_gib": round(est["memory_breakdown_bytes"]["allocated"] / 2**30, 3),
                              "fits": est["fits"]}}
        text = log.read_text(errors="replace") if log.exists() else ""
        hook = _hook_memory(text)
        try:
            lr = parse_log(log)
        except Exception as exc:          # a job that did not finish: what it logged is the record
            run_["measured"] = None
            run_["error"] = " ".join(str(exc).split())[:300]
            seen = _iteration_times(text)
            if len(seen) > 2:
                run_["partial"] = {"iterations": len(seen), "median_after_2_s": round(statistics.median(seen[2:]), 4)}
            runs.append(run_)
            continue
        times = [ms / 1e3 for _, ms in lr.iterations]
        steady = times[-STEADY:]
        mem = lr.memory_mb or {}
        run_["measured"] = {
            "iterations": len(times), "step_time_s": round(statistics.median(steady), 4),
            "step_time_spread_s": [round(min(steady), 4), round(max(steady), 4)],
            "max_allocated_gib": round(hook["max_allocated"] / 2**30, 3) if hook else _gib(mem.get("max_allocated")),
            "max_reserved_gib": round(hook["max_reserved"] / 2**30, 3) if hook else _gib(mem.get("max_reserved")),
            "after_first_iteration": {"max_allocated_gib": _gib(mem.get("max_allocated")),
                                      "max_reserved_gib": _gib(mem.get("max_reserved"))},
            "tflops_per_gpu_reported": lr.tflops}
        m = run_["measured"]
        run_["error_pct"] = {"step_time": round(100 * (est["step_time_s"] / m["step_time_s"] - 1), 1),
                             "allocated": round(100 * (run_["predicted"]["allocated_gib"] / m["max_allocated_gib"]
                                                       - 1), 1) if m["max_allocated_gib"] else None}
        runs.append(run_)
    doc = {"what": "The planner's own Megatron-DeepSpeed jobs (launch.sh as emitted) trained on one GPU: "
                   "measured step time and memory next to the prediction in each job's plan.json (issue 10).",
           "reproduce": "python benchmarks/gpu_probe.py plan; scripts/gpu_probe.sh OUT (on the GPU machine); "
                        "python benchmarks/gpu_probe.py record OUT",
           "model": "benchmarks/gpu/tinyllama-1.1b.yaml", "cluster": {"gpu": GPU, "num_gpus": 1},
           "framework": "megatron-deepspeed", "iterations": ITERATIONS,
           "step_time": f"median of the last {STEADY} of {ITERATIONS} iteration times (Megatron's 'elapsed time "
                        "per iteration', --log-interval 1)",
           "memory": "torch.cuda.max_memory_allocated / max_memory_reserved of the training process at exit "
                     "(benchmarks/gpu/probe_hook); Megatron's own report after iteration 1 beside it",
           "commit": manifest["commit"], "commit_dirty": manifest["dirty"],
           "megatron_deepspeed_commit": json.loads((jobs / LAYOUTS[0][0] / "plan.json").read_text())
           ["requires"]["megatron_deepspeed_commit"],
           "environment": env,
           "substitutions": SUBSTITUTIONS,
           "runs": runs}
    if utilisation_of:
        doc["utilisation"] = [utilisation(u) for u in utilisation_of]
    import yaml
    tmp = dest.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump(doc, sort_keys=False, width=110, allow_unicode=True))
    tmp.replace(dest)
    return doc


SUBSTITUTIONS = [
    {"replaced": "NVIDIA apex FusedAdam (apex.optimizers)", "by": "torch.optim.AdamW(fused=True)",
     "may_move": "optimizer step time (one fused multi-tensor kernel either way)"},
    {"replaced": "apex MixedFusedRMSNorm", "by": "torch.nn.functional.rms_norm",
     "may_move": "norm kernels' time (2 per layer)"},
    {"replaced": "flash-attn 2.x flash_attn_varlen_func",
     "by": "torch scaled_dot_product_attention, flash backend only (PyTorch's FlashAttention-2 kernels), "
           "with a transpose in and out",
     "may_move": "attention time and the transposes' memory traffic"},
    {"replaced": "apex amp_C / multi_tensor_applier (parameter norms only, not used by these jobs)",
     "by": "torch._foreach_norm", "may_move": "nothing measured"},
]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("plan")
    a.add_argument("--jobs", type=Path, default=ROOT / ".gpu" / "jobs")
    r = sub.add_parser("run")
    r.add_argument("--jobs", type=Path, default=ROOT / ".gpu" / "jobs")
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--data", type=Path, default=Path("/tmp/gpu_probe_data"))
    r.add_argument("--budget-s", type=float, default=540)
    r.add_argument("--per-job-s", type=float, default=240)
    r.add_argument("--skip", default="", help="comma-separated layout names already measured")
    r.add_argument("--only", default="", help="comma-separated layout names to run, in this order")
    r.add_argument("--trace", default="", help="comma-separated run names to profile one iteration of "
                   "(torch.profiler; benchmarks/gpu/probe_hook); NAME+unsynced names the unsynchronised re-run")
    r.add_argument("--unsynced", default="", help="comma-separated layout names to run again with DeepSpeed's "
                   "throughput timer unsynchronised (recorded as NAME+unsynced; `record` leaves them out)")
    r.add_argument("--launcher", default="deepspeed", choices=["deepspeed", "torchrun"],
                   help="launch.sh's LAUNCHER (both are emitted)")
    c = sub.add_parser("record")
    c.add_argument("outs", type=Path, nargs="+", help="the OUT folders of `run`")
    c.add_argument("--jobs", type=Path, default=ROOT / ".gpu" / "jobs")
    c.add_argument("--dest", type=Path, default=ROOT / "benchmarks" / "data" / "gpu_runs.yaml")
    c.add_argument("--utilisation", type=Path, action="append", default=[],
                   help="a run folder with nvidia-smi dmon output (dmon_final.txt) of one job's re-run")
    args = ap.parse_args(argv)
    if args.cmd == "plan":
        plan(args.jobs)
    elif args.cmd == "run":
        run(args.jobs, args.out, args.data, args.budget_s, {s for s in args.skip.split(",") if s}, args.per_job_s,
            [s for s in args.only.split(",") if s], args.launcher, {s for s in args.trace.split(",") if s},
            [s for s in args.unsynced.split(",") if s])
    else:
        record(args.outs, args.jobs, args.dest, args.utilisation)


if __name__ == "__main__":
    main()
