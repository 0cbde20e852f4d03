"""`estimate` (one layout) and `estimate_batch` (a LayoutBatch, vectorised): memory and step time.

Both run the same numpy code; `estimate` is `estimate_batch` on a batch of one.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields

import numpy as np

from .vec import asv

from .flops import model_flop_per_token, recompute_flop_per_token
from .layout_memory import HostMemory, Memory, host_checkpoint_bytes, host_memory, stage_memory
from .layout_time import (activation_offload_time, checkpoint_offload_time, comm_volumes, dp_overlap,
                          microbatch_bodies, param_offload_time, step_time,
                          zero2_communication, zero3_communication, zero3_model_hooks)
from .stages import Knobs, Stages, read_knobs, recomputed_layers, stage_layers, stage_params
from .types import (LAYOUT_FIELDS, ClusterSpec, Estimate, Framework, Layout, LayoutBatch, MemoryBreakdown,
                    ModelSpec, TimeBreakdown)
from .types import BF16, FP16, FP32, FP8  # named enum codes

MEMORY_FIELDS = tuple(f.name for f in fields(MemoryBreakdown))
TIME_FIELDS = tuple(f.name for f in fields(TimeBreakdown))


@dataclass(frozen=True)
class BatchEstimate:
    """Column arrays, one row per layout: every MemoryBreakdown and TimeBreakdown field plus totals."""

    columns: dict

    def __getattr__(self, name):
        columns = object.__getattribute__(self, "columns")
        if name in columns:
            return columns[name]
        raise AttributeError(name)

    def __len__(self):
        return len(self.columns["step_time_s"])


_WORKERS = max(1, min(8, os.cpu_count() or 1))
CHUNK = 8192   # rows per pass: keeps every temporary array in cache and out of mmap/page faults


def estimate_batch(model: ModelSpec, cluster: ClusterSpec, framework: Framework,
                   layouts: LayoutBatch) -> BatchEstimate:
    """Memory per GPU (peak stage) and time per step for every layout in `layouts`."""
    n = len(layouts)
    if n <= CHUNK:
        return BatchEstimate(_columns(_estimate_chunk(model, cluster, framework, layouts), n))

    # Each chunk writes its rows into columns allocated once from the first chunk's keys, float64 but for
    # the fit flags (no concatenation of every column at the end).
    first = _estimate_chunk(model, cluster, framework, layouts.take(slice(0, CHUNK)))
    out = {k: np.empty(n, dtype=bool if np.asarray(v).dtype == bool else float) for k, v in first.items()}

    def write(i, cols):
        for k, v in cols.items():
            out[k][i:i + CHUNK] = v               # constants broadcast; the last chunk may be shorter

    write(0, first)
    # numpy releases the GIL inside each operation, so chunks score in parallel on every core.
    with ThreadPoolExecutor(max_workers=min(_WORKERS, -(-n // CHUNK))) as pool:
        list(pool.map(lambda i: write(i, _estimate_chunk(model, cluster, framework,
                                                         layouts.take(slice(i, i + CHUNK)))),
                      range(CHUNK, n, CHUNK)))
    return BatchEstimate(out)


def _columns(cols: dict, n: int) -> dict:
    """Every value as an array of n rows (constants broadcast)."""
    out = {}
    for k, v in cols.items():
        v = np.asarray(v)
        out[k] = v if v.shape == (n,) else np.broadcast_to(v, (n,))
    return out


class _OneLayout:
    """A Layout read like a LayoutBatch, with plain Python numbers: the scalar fast path."""

    def __init__(self, layout: Layout):
        for name in LAYOUT_FIELDS:
            value = getattr(layout, name)
            setattr(self, name, value.code if hasattr(value, "code") else value)

    def __len__(self):
        return 1


def _estimate_chunk(m: ModelSpec, c: ClusterSpec, fw: Framework, lb) -> dict:
    """Every column of `estimate_batch` for the layouts of `lb`: the steps below, in order."""
    k = read_knobs(lb)
    stages = stage_layers(m, k)
    sp = stage_params(m, k, stages)
    # ---- time of one micro-batch on each kind of stage, then of one step ----------------------
    bodies = microbatch_bodies(m, c, fw, k, stages)
    vol = comm_volumes(fw, k)
    overlap = dp_overlap(fw, k, stages, bodies.layer)
    mb_compute = bodies.first_compute               # what ZeRO-3 gathers and parameter fetches hide under
    zero3 = zero3_communication(c, fw, k, stages, sp, vol, mb_compute)
    # What every micro-batch adds on every stage:
    per_mb_shared = {"zero_comm": zero3.per_microbatch, "hooks": zero3_model_hooks(m, fw, k),
                     "dp_comm": zero2_communication(c, k, sp, vol, overlap),
                     "offload": (param_offload_time(c, fw, k, sp, vol, mb_compute)
                                 + checkpoint_offload_time(m, c, k, stages)
                                 + activation_offload_time(m, c, fw, k, bodies.layer, stages))}
    time = step_time(c, fw, k, bodies, per_mb_shared, zero3, sp, vol, overlap)
    step = sum(time.values())
    # ---- memory of the first and the last stage; report the larger ---------------------------
    mem = stage_memory(m, fw, k, stages, sp, zero3.keep_unsharded, rows=step)
    host = host_memory(c, k, sp, host_checkpoint_bytes(m, fw, k, stages))
    return _output_columns(m, c, k, stages, time, step, mem, host)


def _output_columns(m: ModelSpec, c: ClusterSpec, k: Knobs, stages: Stages, time: dict, step,
                    mem: Memory, host: HostMemory) -> dict:
    """The columns of a BatchEstimate, in their order."""
    cols = {f"mem_{key}": v for key, v in mem.columns.items()}
    required = mem.allocated + mem.columns["cuda_context"]
    fits = (required <= c.gpu.hbm_bytes) & host.fits
    fits_with_cache = (mem.total <= c.gpu.hbm_bytes) & host.fits
    cols.update({f"time_{key}": v for key, v in time.items()})
    cols.update({
        "step_time_s": step,
        "peak_memory_bytes": mem.total,
        "allocated_bytes": mem.allocated,
        "reserved_bytes": mem.activation_peak + mem.columns["fragmentation"] + mem.columns["step_copies"],
        # what the job cannot run without (MemoryBreakdown.required): the caching allocator gives
        # its cache (`fragmentation`) back before an allocation fails. `fits`: the job runs;
        # `fits_with_cache`: with the cache too, the layouts the search proposes; `tight`: between.
        "required_memory_bytes": required,
        "fits": fits,
        "fits_with_cache": fits_with_cache,
        "tight": np.logical_and(fits, np.logical_not(fits_with_cache)),
        "host_fits": host.fits,
        "host_bytes_per_node": host.per_node,
        "host_ram_bytes_per_node": host.ram,
        "host_nvme_bytes_per_node": host.nvme,
        "headroom_bytes": c.gpu.hbm_bytes - mem.total,
    })
    cols.update(throughput(m, c, k, stages, step))
    cols.update({
        "layers_per_stage": stages.first,
        "layers_mid_stage": stages.mid,
        "layers_last_stage": stages.last,
        "memory_peak_stage": mem.peak_stage,
    })
    return cols


def throughput(m: ModelSpec, c: ClusterSpec, k: Knobs, stages: Stages, step) -> dict:
    """Tokens and FLOP per step and per second, MFU and HFU."""
    tokens_step = k.gbs * k.seq
    model_flop = tokens_step * model_flop_per_token(m, k.seq)
    share = recomputed_layers(k, stages.first) / stages.first
    hw_flop = model_flop + tokens_step * recompute_flop_per_token(m, k.seq, k.recompute, share)
    world = k.tp * k.pp * k.dp * k.cp
    peak = _peak_for(c, k.precision)
    return {
        "tokens_per_step": tokens_step,
        "tokens_per_s": tokens_step / step,
        "tokens_per_s_per_gpu": tokens_step / step / world,
        "model_flop_per_step": model_flop,
        "hardware_flop_per_step": hw_flop,
        "model_tflops_per_gpu": model_flop / step / world / 1e12,
        "mfu": model_flop / step / world / peak,
        "hfu": hw_flop / step / world / peak,
        "peak_flop_per_s": peak,
        "num_gpus": world,
    }


def _peak_for(c: ClusterSpec, precision):
    """Dense peak FLOP/s of the layout's precision (TF32 for fp32), the MFU denominator."""
    p = c.gpu.peak_flop_per_s
    fp32 = p.get("tf32") or p.get("fp32", 0.0)
    table = np.zeros(4)
    table[[FP32, FP16, BF16, FP8]] = [fp32, p.get("fp16", 0.0), p.get("bf16", 0.0), p.get("fp8", 0.0)]
    return table[asv(precision)]


def estimate(model: ModelSpec, cluster: ClusterSpec, framework: Framework, layout: Layout) -> Estimate:
    """Memory and time of one layout (the batch estimator on a batch of one)."""
    row = {k: float(v) for k, v in _estimate_chunk(model, cluster, framework, _OneLayout(layout)).items()}
    mem = MemoryBreakdown(**{k: row[f"mem_{k}"] for k in MEMORY_FIELDS})
    time = TimeBreakdown(**{k: row[f"time_{k}"] for k in TIME_FIELDS})
    first, mid, last = (int(round(row[k])) for k in ("layers_per_stage", "layers_mid_stage", "layers_last_stage"))
    stages = (first,) if layout.pp == 1 else (first,) + (mid,) * (layout.pp - 2) + (last,)
    return Estimate(memory=mem, time=time, model_flop_per_step=row["model_flop_per_step"],
                    hardware_flop_per_step=row["hardware_flop_per_step"],
                    tokens_per_step=row["tokens_per_step"], num_gpus=layout.world,
                    hbm_bytes=cluster.gpu.hbm_bytes, peak_flop_per_s=row["peak_flop_per_s"],
                    stage_layers=stages, host_fits=bool(row["host_fits"]))
