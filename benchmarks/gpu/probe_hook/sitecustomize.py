"""Loaded by every Python process scripts/gpu_probe.sh starts (it is first on PYTHONPATH). With
GPU_PROBE_REPORT set, a process that used CUDA prints its peak allocated and reserved bytes at exit
(torch.cuda.max_memory_allocated / max_memory_reserved over the whole run, not only up to Megatron's
report after the first iteration). With GPU_PROBE_TRACE set, it also profiles one iteration (below).
It changes nothing else."""
import atexit
import os
import sys


def _report():
    torch = sys.modules.get("torch")
    if torch is None:
        return
    try:
        if torch.cuda.is_initialized():
            print(f"gpu_probe_memory max_allocated={torch.cuda.max_memory_allocated()} "
                  f"max_reserved={torch.cuda.max_memory_reserved()}", flush=True)
    except Exception:      # a hook must never turn a finished run into a failed one
        pass


if os.environ.get("GPU_PROBE_REPORT"):
    atexit.register(_report)


# With GPU_PROBE_TRACE=PREFIX, the training process also runs torch.profiler over training iteration
# GPU_PROBE_TRACE_ITER (default 5; DeepSpeedEngine.step ends an iteration, Megatron-DeepSpeed calls it
# once per iteration, megatron/training.py:746) and writes PREFIX.PID.json: the CUDA runtime calls by
# name (launches, synchronisations, copies) and the kernels' summed time against the wall time, so that
# host-bound and synchronised phases can be told apart (issue 8), and PREFIX.PID.trace.json.gz. The
# profiled iteration runs slower (the profiler's own host cost); it is not among the last 20 of the 30
# whose median is the recorded step time.
SYNC_CALLS = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaMemcpyAsync",
              "cudaMemcpy", "cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx")


def _summary(prof, wall_s):
    runtime, kernels_us, kernels = {}, 0.0, 0
    for e in prof.events():
        name = e.name
        if name in SYNC_CALLS:
            runtime[name] = runtime.get(name, 0) + 1
        elif str(getattr(e, "device_type", "")).endswith("CUDA"):
            kernels += 1
            kernels_us += e.time_range.elapsed_us()
    return {"wall_s": wall_s, "kernels": kernels, "kernel_time_s": kernels_us / 1e6, "runtime_calls": runtime}


def _trace_hook(prefix, target):
    import gzip
    import json
    import shutil
    import time

    import torch
    from deepspeed.runtime import engine as _engine

    state = {"iteration": 1, "prof": None, "t0": 0.0}
    forward, step = _engine.DeepSpeedEngine.forward, _engine.DeepSpeedEngine.step

    def traced_forward(self, *args, **kwargs):
        if state["iteration"] == target and state["prof"] is None:
            activities = [torch.profiler.ProfilerActivity.CPU]
            if torch.cuda.is_available():
                torch.cuda.synchronize()
                activities.append(torch.profiler.ProfilerActivity.CUDA)
            state["prof"] = torch.profiler.profile(activities=activities)
            state["prof"].__enter__()
            state["t0"] = time.perf_counter()
        return forward(self, *args, **kwargs)

    def traced_step(self, *args, **kwargs):
        boundary = self.is_gradient_accumulation_boundary()
        out = step(self, *args, **kwargs)
        if boundary and state["prof"] is not None and state["iteration"] == target:
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            wall = time.perf_counter() - state["t0"]
            prof = state["prof"]
            prof.__exit__(None, None, None)
            path = f"{prefix}.{os.getpid()}"
            with open(path + ".json", "w") as f:
                json.dump(_summary(prof, wall), f, indent=1)
            prof.export_chrome_trace(path + ".trace.json")
            with open(path + ".trace.json", "rb") as src, gzip.open(path + ".trace.json.gz", "wb") as dst:
                shutil.copyfileobj(src, dst)
            os.remove(path + ".trace.json")
        state["iteration"] += boundary
        return out

    _engine.DeepSpeedEngine.forward, _engine.DeepSpeedEngine.step = traced_forward, traced_step


if os.environ.get("GPU_PROBE_TRACE"):
    try:
        _trace_hook(os.environ["GPU_PROBE_TRACE"], int(os.environ.get("GPU_PROBE_TRACE_ITER", "5")))
    except ImportError:     # the launcher's processes: no deepspeed in some of them
        pass
