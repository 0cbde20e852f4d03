"""`estimate` (one layout) and `estimate_batch` (a LayoutBatch, vectorised): memory and step time.

Both run the same numpy code; `estimate` is `estimate_batch` on a batch of one.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields

import numpy as np

from .vec import asf, asv, ceil, clip, floor, lookup, maximum, minimum, where  # noqa: F401

from . import compute, memory, params, steptime
from .comm import (grad_comm_bytes_per_param, zeropp_quantisation_bytes_per_param, members_per_domain, p2p_time, reduce_scatter_time,
                   weight_gather_bytes_per_param)
from .flops import model_flop_per_token, recompute_flop_per_token
from .types import (LAYOUT_FIELDS, ClusterSpec, Estimate, Framework, Layout, LayoutBatch, MemoryBreakdown,
                    ModelSpec, TimeBreakdown)
from .types import BF16, FP16, FP32, FP8, OFF_NONE, OFF_NVME, RC_FULL, RC_SELECTIVE  # named enum codes
from .types import ZERO0, ZERO1, ZERO2, ZERO3  # named ZeRO stage codes

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


def _f(x):
    return asf(x)


_WORKERS = max(1, min(8, os.cpu_count() or 1))
CHUNK = 8192   # rows per pass: keeps every temporary array in cache and out of mmap/page faults


def estimate_batch(model: ModelSpec, cluster: ClusterSpec, framework: Framework,
                   layouts: LayoutBatch) -> BatchEstimate:
    """Memory per GPU (peak stage) and time per step for every layout in `layouts`."""
    n = len(layouts)
    if n <= CHUNK:
        return BatchEstimate(_columns(_estimate_chunk(model, cluster, framework, layouts), n))

    def run(i):
        chunk = layouts.take(slice(i, i + CHUNK))
        return _columns(_estimate_chunk(model, cluster, framework, chunk), len(chunk))

    # numpy releases the GIL inside each operation, so chunks score in parallel on every core.
    with ThreadPoolExecutor(max_workers=min(_WORKERS, -(-n // CHUNK))) as pool:
        parts = list(pool.map(run, range(0, n, CHUNK)))
    return BatchEstimate({k: np.concatenate([p[k] for p in parts]) for k in parts[0]})


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
    tp, pp, dp, cp, vpp = _f(lb.tp), _f(lb.pp), _f(lb.dp), _f(lb.cp), _f(lb.vpp)
    mbs, gbs, seq = _f(lb.mbs), _f(lb.gbs), _f(lb.seq_len)
    zero, prec, rc = lb.zero, lb.precision, lb.recompute
    sp = lb.sequence_parallel & (tp > 1)
    flash = lb.flash_attention
    n_micro = gbs / (mbs * dp)
    tokens = mbs * seq / cp                      # tokens of one micro-batch on one GPU
    # Layers per stage as DeepSpeed's partition_balanced (and Megatron, where they divide evenly)
    # assigns them: ceil(L / p) on every stage but the last, which takes what remains.
    layers = ceil(m.num_layers / pp)
    layers_last = where(pp > 1, m.num_layers - (pp - 1) * layers, layers)
    # Megatron-Core's uneven split (--decoder-first/last-pipeline-num-layers): the first and last
    # stages hold the given counts, the middle stages share the rest evenly. `layers` is then the
    # middle stages' count, `layers_first` the first stage's.
    first_set, last_set = _f(lb.first_stage_layers), _f(lb.last_stage_layers)
    uneven = (first_set > 0) | (last_set > 0)
    layers_first = where(first_set > 0, first_set, layers)
    layers_last = where(last_set > 0, last_set, where(uneven, layers, layers_last))
    mid_rest = m.num_layers - layers_first - layers_last
    layers = where(uneven, where(pp > 2, mid_rest / maximum(pp - 2.0, 1.0), layers_first), layers)
    layers_first = where(uneven, layers_first, layers)

    def recomputed_in(stage_layers):
        return where(lb.recompute_layers > 0, minimum(lb.recompute_layers, stage_layers), stage_layers)

    recomputed = recomputed_in(layers_first)
    shard = dp * cp                              # ZeRO / distributed-optimizer shard group
    e = memory.activation_bytes_per_element(prec)

    # ---- time of one micro-batch on each kind of stage ---------------------------------------
    fwd, bwd, core = compute.layer_phases(m, c, fw, tokens=tokens, seq_len=seq, tp=tp, sp=sp,
                                          flash=flash, precision=prec, sparsity=lb.sparsity)
    out_f, out_b = compute.output_layer_phases(m, c, fw, tokens=tokens, tp=tp, sp=sp, precision=prec)
    emb_f, emb_b = compute.embedding_phases(m, c, fw, tokens=tokens, tp=tp, sp=sp, precision=prec)
    kv_bytes = tokens * 2.0 * m.hidden * m.num_kv_heads / m.num_heads * e / tp
    if fw.context_parallel == "ulysses":
        qkv = tokens * m.hidden * e / tp + kv_bytes
        cp_fwd = steptime.ulysses_exchange_time(qkv, tokens * m.hidden * e / tp, cp, tp, c)
        cp_bwd = cp_fwd
    else:
        cp_fwd = steptime.cp_exchange_time(kv_bytes, cp, tp, fwd.attention, c)
        cp_bwd = steptime.cp_exchange_time(2.0 * kv_bytes, cp, tp, bwd.attention, c)

    def gpu_and_excess(phase):
        busy = phase.busy
        return phase.gpu, phase.tp_comm, busy - phase.gpu - phase.tp_comm

    lf_gpu, lf_tp, lf_x = gpu_and_excess(fwd)
    lb_gpu, lb_tp, lb_x = gpu_and_excess(bwd)
    co_gpu, _, co_x = gpu_and_excess(core)
    full_rc = rc == RC_FULL

    def body_of(n_layers):
        """Per-micro-batch time of a stage's transformer layers, by component."""
        n_rc = recomputed_in(n_layers)
        return {"compute": n_layers * (lf_gpu + lb_gpu),
                "recompute": where(full_rc, n_rc * lf_gpu, where(rc == RC_SELECTIVE, n_layers * co_gpu, 0.0)),
                "tp_comm": n_layers * (lf_tp + lb_tp) + where(full_rc, n_rc * lf_tp, 0.0),
                "cp_comm": n_layers * (cp_fwd + cp_bwd) + where(full_rc, n_rc * cp_fwd, 0.0),
                "excess": n_layers * (lf_x + lb_x) + where(full_rc, n_rc * lf_x,
                                                              where(rc == RC_SELECTIVE, n_layers * co_x, 0.0))}

    body = body_of(layers_first)
    body_mid = body_of(layers)
    body_last = body_of(layers_last)
    ef_gpu, ef_tp, ef_x = gpu_and_excess(emb_f)
    eb_gpu, eb_tp, eb_x = gpu_and_excess(emb_b)
    of_gpu, of_tp, of_x = gpu_and_excess(out_f)
    ob_gpu, ob_tp, ob_x = gpu_and_excess(out_b)
    first_extra = {"compute": ef_gpu + eb_gpu, "tp_comm": ef_tp + eb_tp, "excess": ef_x + eb_x}
    last_extra = {"compute": of_gpu + ob_gpu, "tp_comm": of_tp + ob_tp, "excess": of_x + ob_x}

    # Pipeline sends: activations forward, gradients backward; Megatron splits them over the TP
    # ranks (scatter-gather optimisation, Narayanan et al. 2021, §4.1), DeepSpeed's PipelineEngine
    # sends the whole tensor from every TP rank (deepspeed/runtime/pipe/p2p.py).
    crosses = tp * cp * dp >= c.nvlink_domain
    split = tp if fw.pp_scatter_gather else 1.0
    # Interleaving sends every micro-batch across vpp times as many stage boundaries (Narayanan et al.
    # 2021, §2.2.2: "the amount of communication also increases by v").
    p2p = where(pp > 1, 2.0 * asf(vpp) * p2p_time(tokens * m.hidden * e / split, crosses, c), 0.0)

    # ZeRO-2 reduce-scatters and ZeRO-3 gathers happen every micro-batch.
    layer_p = params.layer_params(m)
    first_p = layers_first * layer_p + params.embedding_params(m) + where(pp <= 1, params.output_params(m), 0.0)
    mid_p = layers * layer_p
    last_out = params.output_params(m) + (m.vocab * m.hidden if m.tied_embeddings else 0.0)
    last_p = layers_last * layer_p + where(pp <= 1, params.embedding_params(m) + params.output_params(m), last_out)
    stage_p = maximum(maximum(first_p, last_p), where(pp > 2, mid_p, 0.0)) / tp   # weights per GPU, biggest stage
    gbytes = grad_comm_bytes_per_param(lb.grad_comm, prec)
    wbytes = weight_gather_bytes_per_param(lb.grad_comm, prec)
    # Forward and backward gather each layer; the recompute forward gathers again under DeepSpeed
    # ZeRO-3, not under FSDP (fw.zero3_recompute_gathers; see the framework files).
    gathers = 2.0 + where(full_rc, fw.zero3_recompute_gathers, 0.0)
    # One gather per fetched module (fw.zero3_gathers_per_layer) of the biggest stage, plus the
    # embedding / output layer; gradients leave in reduce buckets, or one call per gather unit.
    stage_layers = maximum(maximum(layers_first, layers_last), where(pp > 2, layers, 0.0))
    gather_calls = stage_layers * fw.zero3_gathers_per_layer + 1.0
    reduce_calls = gather_calls if fw.zero3_reduce_bucket_params <= 0 else \
        ceil(stage_p / fw.zero3_reduce_bucket_params)
    z3_bw, z3_lat = steptime.zero3_microbatch_comm_time(stage_p * wbytes, stage_p * gbytes, gathers, shard, tp, c,
                                                        gather_calls, reduce_calls)
    z3 = z3_bw / fw.zero3_gather_efficiency + z3_lat
    # ZeRO++'s quantisation kernels sit on the gather / reduce path.
    z3 = z3 + stage_p * zeropp_quantisation_bytes_per_param(lb.grad_comm, gathers) / (
        c.gpu.hbm_bytes_per_s * c.gpu.hbm_efficiency)
    mb_compute = body["compute"] + body["recompute"]
    # Gathers of layer i+1 are prefetched under layer i's compute; each pass's first layer waits for
    # its own gather (one layer's share of the micro-batch's traffic stays exposed).
    z3_first = z3 / maximum(asf(layers), 1.0)
    z3_exposed = where(zero >= ZERO3, maximum(z3 - fw.zero3_overlap * mb_compute, 0.0) + z3_first, 0.0)
    # FSDP2 under a pipeline schedule (torchtitan): weights gathered once per step and kept, gradients
    # reduce-scattered once, at the last micro-batch (fw.fsdp_pp_unsharded; see its catalog note).
    keep_unsharded = (zero >= ZERO3) & (pp > 1) & bool(fw.fsdp_pp_unsharded)
    once_bw, once_lat = steptime.zero3_microbatch_comm_time(stage_p * wbytes, stage_p * gbytes, 1.0, shard, tp, c,
                                                            gather_calls, reduce_calls)
    z3_once = once_bw / fw.zero3_gather_efficiency + once_lat
    z3_step = where(keep_unsharded, maximum(z3_once - fw.zero3_overlap * mb_compute, 0.0)
                    + z3_once / maximum(asf(layers), 1.0), 0.0)
    z3_exposed = where(keep_unsharded, 0.0, z3_exposed)
    k_dp = members_per_domain(shard, tp, c.nvlink_domain)
    z2_rs = reduce_scatter_time(stage_p * gbytes, shard, k_dp, c)
    dp_overlap = where(pp > 1, fw.dp_overlap_pipelined, where(zero == ZERO0, fw.dp_overlap_zero0, fw.dp_overlap))
    # BF16_Optimizer all-reduces after backward returns, with no hooks (bf16_optimizer.py:321-346).
    bf16_opt = memory.bf16_optimizer_in_use(prec, zero, fw)
    dp_overlap = where(bf16_opt, 0.0, dp_overlap)
    z2_exposed = where(zero == ZERO2, maximum(z2_rs - dp_overlap * layers * lb_gpu, 0.0), 0.0)
    # Parameters streamed from host memory (ZeRO-Infinity offload_param) once per use.
    nvme_per_gpu = max(c.nvme_bytes_per_s, 1.0) / c.gpus_per_node
    fetch_rate = where(lb.offload_params == OFF_NVME, min(c.pcie_bytes_per_s, nvme_per_gpu), c.pcie_bytes_per_s)
    param_fetch = stage_p * 2.0 * gathers / fetch_rate
    hidden = fw.offload_overlap * param_fetch
    offload_p = where((zero >= ZERO3) & (lb.offload_params != OFF_NONE),
                         param_fetch - hidden + maximum(hidden - mb_compute, 0.0), 0.0)

    per_mb_shared = {"pp_comm": p2p, "zero_comm": z3_exposed, "dp_comm": z2_exposed, "offload": offload_p}

    def tau(stage_body, extra):
        return sum(stage_body.values()) + sum(per_mb_shared.values()) + sum(extra.values())

    tau_first = tau(body, first_extra) + where(pp <= 1, sum(last_extra.values()), 0.0)
    tau_last = tau(body_last, last_extra)
    tau_mid = tau(body_mid, {})
    t_pipe, tau_max, slowest = steptime.pipeline_time(tau_first, tau_mid, tau_last, pp, vpp, n_micro)

    def bottleneck(key):
        first = body.get(key, 0.0) + first_extra.get(key, 0.0) + where(pp <= 1, last_extra.get(key, 0.0), 0.0)
        last = body_last.get(key, 0.0) + last_extra.get(key, 0.0)
        return where(slowest == 2, last, where(slowest == 1, body_mid.get(key, 0.0), first))

    # ---- once per step ------------------------------------------------------------------------
    grad_sync, weight_sync = steptime.dp_gradient_sync_time(stage_p * gbytes, stage_p * wbytes, zero,
                                                             shard, tp, c,
                                                             bf16_opt)
    grad_sync = where(zero >= ZERO2, 0.0, grad_sync)            # ZeRO-2/3 reduced per micro-batch
    weight_sync = where(zero >= ZERO3, 0.0, weight_sync)        # ZeRO-3 gathers per micro-batch
    window = dp_overlap * layers * lb_gpu                      # last micro-batch's backward
    dp_exposed = (maximum(grad_sync - window, 0.0)
                  + weight_sync * (1.0 - fw.param_gather_overlap))
    local = stage_p / where(zero >= ZERO1, shard, 1.0)
    opt_off = lb.offload_optimizer
    opt_gpu = where(opt_off != OFF_NONE, 0.0, steptime.optimizer_step_time(local, c, prec))
    opt_host = steptime.offloaded_optimizer_time(local, opt_off, c)

    time = {
        "compute": n_micro * bottleneck("compute"),
        "recompute": n_micro * bottleneck("recompute"),
        "tp_comm": n_micro * bottleneck("tp_comm"),
        "cp_comm": n_micro * bottleneck("cp_comm"),
        "pp_comm": n_micro * p2p,
        "bubble": t_pipe - n_micro * tau_max,
        "dp_comm": n_micro * z2_exposed + dp_exposed,
        "zero_comm": n_micro * z3_exposed + z3_step,
        "offload": n_micro * offload_p + opt_host,
        "optimizer": opt_gpu,
        "overhead": n_micro * (bottleneck("excess") + fw.microbatch_overhead_s) + fw.iteration_overhead_s,
    }
    step = sum(time.values())

    # ---- memory of the first and the last stage; report the larger ---------------------------
    stored, core_act = memory.layer_activation_bytes(m, tokens, seq, tp, sp, flash, prec, fw.fp8_saved_input_bytes)
    stored, core_act = stored * fw.saved_activation_factor, core_act * fw.saved_activation_factor
    ckpt = memory.checkpoint_bytes(m, tokens, tp, sp, prec)
    inflight_first = memory.inflight_microbatches(pp, vpp, n_micro, 0)
    inflight_last = memory.inflight_microbatches(pp, vpp, n_micro, pp - 1)
    inflight_mid = memory.inflight_microbatches(pp, vpp, n_micro, 1)
    act_mid = memory.stored_activation_bytes(stored, core_act, ckpt, rc, layers, recomputed_in(layers), inflight_mid)
    act_first = (memory.stored_activation_bytes(stored, core_act, ckpt, rc, layers_first, recomputed, inflight_first)
                 + inflight_first * memory.embedding_activation_bytes(m, tokens, tp, sp, prec))
    act_last = memory.stored_activation_bytes(stored, core_act, ckpt, rc, layers_last,
                                              recomputed_in(layers_last), inflight_last)
    logits = memory.logits_bytes(m, tokens, tp, fw)
    logits_first = where(pp <= 1, logits, 0.0)

    def states(p):
        return memory.model_state_bytes(p / tp, prec, zero, shard, opt_off, lb.offload_params, fw,
                                        lb.grad_comm)

    wf, gf, of = states(first_p)
    wl, gl, ol = states(last_p)
    wm, gm, om = states(mid_p)
    working = memory.zero3_working_params(layer_p / tp, stage_p, fw) * memory.activation_bytes_per_element(prec)
    working = where(zero >= ZERO3, working, 0.0)
    # FSDP + PP kept unsharded: the stage's 16-bit weights, and fp32 gradients accumulated over the
    # micro-batches before the last one's reduce-scatter.
    work_first, work_last, work_mid = (
        where(keep_unsharded, p / tp * memory.activation_bytes_per_element(prec), working)
        for p in (first_p, last_p, mid_p))
    grad_acc_first, grad_acc_last, grad_acc_mid = (where(keep_unsharded & (n_micro > 1), p / tp * 4.0, 0.0)
                                                   for p in (first_p, last_p, mid_p))
    workspace = memory.backward_workspace_bytes(m, tokens, tp, prec)
    buffers = fw.comm_buffer_bytes + 0.0 * step

    gf, gl, gm = gf + grad_acc_first, gl + grad_acc_last, gm + grad_acc_mid

    def allocated(w, g, o, a, lg, work):
        return w + g + o + a + lg + buffers + workspace + work

    alloc_first = allocated(wf, gf, of, act_first, logits_first, work_first)
    alloc_last = allocated(wl, gl, ol, act_last, logits, work_last)
    alloc_mid = allocated(wm, gm, om, act_mid, 0.0 * logits, work_mid)
    last_peaks = (pp > 1) & (alloc_last > alloc_first)
    # With an uneven split a middle stage (the second: most micro-batches in flight) may peak.
    mid_peaks = uneven & (pp > 2) & (alloc_mid > maximum(alloc_first, where(pp > 1, alloc_last, 0.0)))

    def pick(first, last, mid=None):
        out = where(last_peaks, last, first)
        return out if mid is None else where(mid_peaks, mid, out)

    mem = {
        "weights": pick(wf + work_first, wl + work_last, wm + work_mid),
        "grads": pick(gf, gl, gm),
        "optimizer": pick(of, ol, om),
        "activations": pick(act_first, act_last, act_mid),
        "logits": pick(logits_first, logits, 0.0 * logits),
        "comm_buffers": buffers,
        "workspace": workspace,
    }
    alloc = pick(alloc_first, alloc_last, alloc_mid)
    mem["fragmentation"] = alloc * fw.allocator_fragmentation
    mem["cuda_context"] = fw.cuda_context_bytes + 0.0 * alloc
    total_mem = alloc + mem["fragmentation"] + mem["cuda_context"]

    # Host memory for offloaded optimizer state: fp32 master, moments and gradients (16 B/param).
    host_per_node = where(opt_off != OFF_NONE, local * 16.0 * c.gpus_per_node, 0.0)
    host_per_node = host_per_node + where(lb.offload_params != OFF_NONE, local * 2.0 * c.gpus_per_node, 0.0)
    nvme_needed = where(opt_off == OFF_NVME, host_per_node, 0.0)
    host_fits = where(opt_off == OFF_NVME, nvme_needed <= c.nvme_bytes, host_per_node <= c.host_memory_bytes)

    # ---- throughput ----------------------------------------------------------------------------
    tokens_step = gbs * seq
    model_flop = tokens_step * model_flop_per_token(m, seq)
    share = recomputed / layers_first
    hw_flop = model_flop + tokens_step * recompute_flop_per_token(m, seq, rc, share)
    world = tp * pp * dp * cp
    peak = _peak_for(c, prec)
    cols = {f"mem_{k}": v for k, v in mem.items()}
    cols.update({f"time_{k}": v for k, v in time.items()})
    cols.update({
        "step_time_s": step,
        "peak_memory_bytes": total_mem,
        "allocated_bytes": alloc,
        "reserved_bytes": alloc + mem["fragmentation"],
        "fits": (total_mem <= c.gpu.hbm_bytes) & host_fits,
        "host_fits": host_fits,
        "host_bytes_per_node": host_per_node,
        "headroom_bytes": c.gpu.hbm_bytes - total_mem,
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
        "layers_per_stage": layers_first,
        "layers_mid_stage": layers,
        "layers_last_stage": layers_last,
        "memory_peak_stage": where(mid_peaks, 1.0, where(last_peaks, pp - 1, 0.0)),
    })
    return cols


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
