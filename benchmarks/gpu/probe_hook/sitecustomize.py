"""Loaded by every Python process scripts/gpu_probe.sh starts (it is first on PYTHONPATH). With
GPU_PROBE_REPORT set, a process that used CUDA prints its peak allocated and reserved bytes at exit
(torch.cuda.max_memory_allocated / max_memory_reserved over the whole run, not only up to Megatron's
report after the first iteration). It changes nothing else."""
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
