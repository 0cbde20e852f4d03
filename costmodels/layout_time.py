"""Time of one training step of a batch of layouts, built up stage by stage.

First the time of one micro-batch on each kind of stage (its layers, by component), then what every
micro-batch adds on every stage (pipeline sends, ZeRO gathers and reduce-scatters, parameter
offload), then the pipeline schedule over those stage times and what happens once per step (DP
gradient sync, the optimizer). The primitives (collectives, the schedule) are in comm.py and
steptime.py; this module puts them together for `estimate._estimate_chunk`.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from .vec import asf, ceil, maximum, where

from . import compute, memory, steptime
from .comm import (all_gather_time, members_per_domain, overlap_slowdown, p2p_time, reduce_scatter_time,
                   grad_comm_bytes_per_param, weight_gather_bytes_per_param, zeropp_quantisation_bytes_per_param)
from .layout_memory import saved_layer_bytes
from .stages import Knobs, StageParams, Stages, recomputed_layers
from .types import ClusterSpec, Framework, ModelSpec
from .types import GC_FP32, OFF_NONE, OFF_NVME, RC_FULL, RC_SELECTIVE  # named enum codes
from .types import ZERO0, ZERO2, ZERO3  # named ZeRO stage codes


# ---- time of one micro-batch on each kind of stage ---------------------------------------------

def gpu_and_excess(phase):
    """(GPU time, TP communication, the rest of the phase's busy time: the host's excess) of a phase."""
    gpu, tp_comm = phase.gpu, phase.tp_comm
    return gpu, tp_comm, phase.busy - gpu - tp_comm


@dataclass(frozen=True, slots=True)
class LayerTimes:
    """One transformer layer's phases for one micro-batch, each split by gpu_and_excess, and the
    context-parallel exchange of its forward and backward."""

    fwd_gpu: object
    fwd_tp: object
    fwd_excess: object
    bwd_gpu: object
    bwd_tp: object
    bwd_excess: object
    core_gpu: object                # the attention core (what selective recomputation recomputes)
    core_excess: object
    cp_fwd: object
    cp_bwd: object


def context_parallel_exchange(m: ModelSpec, c: ClusterSpec, fw: Framework, k: Knobs, fwd, bwd):
    """Exposed seconds of one layer's context-parallel exchange, (forward, backward): DeepSpeed-Ulysses'
    all-to-alls, the ring's K/V passes, or PyTorch's all-gathered K/V (repeated over all query heads,
    torchtitan's repeat_kv) and fp32 dK/dV passes."""
    kv_bytes = k.tokens * 2.0 * m.hidden * m.num_kv_heads / m.num_heads * k.act_bytes / k.tp
    if fw.context_parallel == "ring_allgather":
        expanded = k.tokens * 2.0 * m.hidden / k.tp
        return steptime.ring_allgather_exchange_time(expanded * k.act_bytes, expanded * 4.0, k.cp, k.tp,
                                                     fwd.attention, bwd.attention, c)
    if fw.context_parallel == "ulysses":
        qkv = k.tokens * m.hidden * k.act_bytes / k.tp + kv_bytes
        cp_fwd = steptime.ulysses_exchange_time(qkv, k.tokens * m.hidden * k.act_bytes / k.tp, k.cp, k.tp, c)
        return cp_fwd, cp_fwd
    return (steptime.cp_exchange_time(kv_bytes, k.cp, k.tp, fwd.attention, c),
            steptime.cp_exchange_time(2.0 * kv_bytes, k.cp, k.tp, bwd.attention, c))


# DeepSpeed's BF16_Optimizer moves every micro-batch's bf16 gradients into its fp32 buffer as soon as
# backward ends (DeepSpeed 0.16.2 engine.py backward -> bf16_optimizer.py backward -> update_hp_grads ->
# _update_hp_grad: hp_grad.add_(lp.grad.to(fp32))): the cast reads 2 bytes and writes 4, the add
# reads 4 + 4 and writes 4.
BF16_OPTIMIZER_GRAD_BYTES = 18.0


def grad_accumulation_bytes_per_param(fw: Framework, k: Knobs):
    """Bytes per parameter and micro-batch of gradient accumulation outside the weight-gradient GEMM:
    none under ZeRO-3 / FSDP (each micro-batch's gradient is reduce-scattered and dropped),
    BF16_OPTIMIZER_GRAD_BYTES where DeepSpeed's BF16_Optimizer runs, else the framework's; plus, under
    ZeRO-2 and ZeRO-3, the framework's gradient path where it has one (`zero_gradient_bytes`)."""
    bf16_opt = memory.bf16_optimizer_in_use(k.precision, k.zero, fw)
    out = where(k.zero >= ZERO3, 0.0, where(bf16_opt, BF16_OPTIMIZER_GRAD_BYTES, fw.grad_accumulation_bytes))
    return out + zero_gradient_path_bytes(fw, k)


def zero_gradient_path_bytes(fw: Framework, k: Knobs):
    """What DeepSpeed's ZeRO-2 / ZeRO-3 gradient path reads and writes per parameter every micro-batch,
    beyond what grad_accumulation_bytes_per_param charges without it: each gradient copied into the reduce bucket, the bucket
    divided by dp and cast to the communication dtype, then, for the rank's 1/dp share, cast back and added
    into the partition (DeepSpeed 0.16.2 stage_1_and_2.py reduce_independent_p_g_buckets_and_remove_grads,
    average_tensor, allreduce_bucket, copy_grads_in_partition; stage3.py likewise). ZeRO-1 runs it once
    per step, at the last micro-batch. Counted on the CPU at dp 1 and 2 (benchmarks/gpu/host_time,
    HOST_SYNC_BYTES): `each` + `partition` / dp."""
    out = 0.0
    for stage, code in (("zero2", ZERO2), ("zero3", ZERO3)):
        if f"{stage}/fp32/each" not in fw.zero_gradient_bytes:
            continue
        comm = where(k.grad_comm == GC_FP32, 1.0, 0.0)
        part = {p: comm * fw.zero_gradient_bytes[f"{stage}/fp32/{p}"]
                + (1.0 - comm) * fw.zero_gradient_bytes[f"{stage}/16bit/{p}"] for p in ("each", "partition")}
        out = out + where(k.zero == code, part["each"] + part["partition"] / asf(k.shard), 0.0)
    return out


def layer_times(m: ModelSpec, c: ClusterSpec, fw: Framework, k: Knobs) -> LayerTimes:
    """Per-micro-batch time of one transformer layer."""
    fwd, bwd, core = compute.layer_phases(m, c, fw, tokens=k.tokens, seq_len=k.seq, tp=k.tp, sp=k.sp,
                                          flash=k.flash, precision=k.precision, sparsity=k.sparsity,
                                          tp_pipelined=k.tp_pipelined,
                                          grad_bytes_per_param=grad_accumulation_bytes_per_param(fw, k))
    # DeepSpeed ZeRO-3's hooks around every submodule run on the host in each pass (the recompute
    # forward's too): measured on the CPU per module (benchmarks/gpu/host_time, "ZeRO-3's hooks")
    hooks = where(k.zero >= ZERO3, compute.zero3_hooked_modules(k.flash), 0.0) * fw.host_overhead_s
    fwd = replace(fwd, host=fwd.host + hooks * fw.zero3_module_hooks_forward)
    bwd = replace(bwd, host=bwd.host + hooks * fw.zero3_module_hooks_backward)
    cp_fwd, cp_bwd = context_parallel_exchange(m, c, fw, k, fwd, bwd)
    lf_gpu, lf_tp, lf_x = gpu_and_excess(fwd)
    lb_gpu, lb_tp, lb_x = gpu_and_excess(bwd)
    co_gpu, _, co_x = gpu_and_excess(core)
    return LayerTimes(fwd_gpu=lf_gpu, fwd_tp=lf_tp, fwd_excess=lf_x, bwd_gpu=lb_gpu, bwd_tp=lb_tp, bwd_excess=lb_x,
                      core_gpu=co_gpu, core_excess=co_x, cp_fwd=cp_fwd, cp_bwd=cp_bwd)


def stage_body(k: Knobs, lt: LayerTimes, n_layers) -> dict:
    """Per-micro-batch time of a stage's transformer layers, by component."""
    rc = k.recompute
    full_rc = rc == RC_FULL
    n_rc = recomputed_layers(k, n_layers)
    return {"compute": n_layers * (lt.fwd_gpu + lt.bwd_gpu),
            "recompute": where(full_rc, n_rc * lt.fwd_gpu, where(rc == RC_SELECTIVE, n_layers * lt.core_gpu, 0.0)),
            "tp_comm": n_layers * (lt.fwd_tp + lt.bwd_tp) + where(full_rc, n_rc * lt.fwd_tp, 0.0),
            "cp_comm": n_layers * (lt.cp_fwd + lt.cp_bwd) + where(full_rc, n_rc * lt.cp_fwd, 0.0),
            "excess": n_layers * (lt.fwd_excess + lt.bwd_excess) + where(full_rc, n_rc * lt.fwd_excess,
                                                                         where(rc == RC_SELECTIVE,
                                                                               n_layers * lt.core_excess, 0.0))}


def edge_layers(m: ModelSpec, c: ClusterSpec, fw: Framework, k: Knobs):
    """Per-micro-batch time of the embedding (on the first stage) and of the output layer (on the
    last), forward and backward, by component: (first_extra, last_extra)."""
    grad_bytes = grad_accumulation_bytes_per_param(fw, k)
    out_f, out_b = compute.output_layer_phases(m, c, fw, tokens=k.tokens, tp=k.tp, sp=k.sp, precision=k.precision,
                                               grad_bytes_per_param=grad_bytes)
    emb_f, emb_b = compute.embedding_phases(m, c, fw, tokens=k.tokens, tp=k.tp, sp=k.sp, precision=k.precision,
                                            grad_bytes_per_param=grad_bytes)
    ef_gpu, ef_tp, ef_x = gpu_and_excess(emb_f)
    eb_gpu, eb_tp, eb_x = gpu_and_excess(emb_b)
    of_gpu, of_tp, of_x = gpu_and_excess(out_f)
    ob_gpu, ob_tp, ob_x = gpu_and_excess(out_b)
    first_extra = {"compute": ef_gpu + eb_gpu, "tp_comm": ef_tp + eb_tp, "excess": ef_x + eb_x}
    last_extra = {"compute": of_gpu + ob_gpu, "tp_comm": of_tp + ob_tp, "excess": of_x + ob_x}
    return first_extra, last_extra


@dataclass(frozen=True, slots=True)
class Bodies:
    """Per-micro-batch time of each kind of stage, by component (dicts of arrays)."""

    first: dict                     # the first stage's transformer layers
    mid: dict                       # a middle stage's
    last: dict                      # the last stage's
    first_extra: dict               # the embedding, on the first stage
    last_extra: dict                # the output layer, on the last stage (on the first too when pp = 1)
    layer: LayerTimes

    @property
    def first_compute(self):
        """The first stage's compute and recompute: what ZeRO-3 gathers and parameter fetches hide under."""
        return self.first["compute"] + self.first["recompute"]


def microbatch_bodies(m: ModelSpec, c: ClusterSpec, fw: Framework, k: Knobs, stages: Stages) -> Bodies:
    """Time of one micro-batch on each kind of stage, before what every micro-batch adds (below);
    each stage's own pipeline sends and receives are part of it ("pp_comm")."""
    lt = layer_times(m, c, fw, k)
    first_extra, last_extra = edge_layers(m, c, fw, k)
    send_first, send_mid, send_last = pipeline_send_times(m, c, fw, k)
    return Bodies(first={**stage_body(k, lt, stages.first), "pp_comm": send_first},
                  mid={**stage_body(k, lt, stages.mid), "pp_comm": send_mid},
                  last={**stage_body(k, lt, stages.last), "pp_comm": send_last},
                  first_extra=first_extra, last_extra=last_extra, layer=lt)


# ---- what every micro-batch adds on every stage --------------------------------------------------

def pipeline_send_times(m: ModelSpec, c: ClusterSpec, fw: Framework, k: Knobs):
    """Seconds per micro-batch of the pipeline's point-to-point transfers on the first, a middle and
    the last stage: (first, mid, last)."""
    # Pipeline sends: activations forward, gradients backward. Split over the TP ranks, each rank
    # sends 1/tp of the tensor and the receiving stage all-gathers it over TP again: Megatron's
    # scatter-gather optimisation (Narayanan et al. 2021, §4.1) and DeepSpeed's PipelineEngine with
    # tp > 1 (pipe_partitioned / grad_partitioned default true, runtime/config.py:466-467;
    # runtime/pipe/engine.py:144-145 and 719-760: PartitionedTensor over the slice-parallel (TP)
    # group, `.full()` all-gathers on receipt).
    crosses = k.tp * k.cp * k.dp >= c.nvlink_domain
    split = where(fw.pp_scatter_gather, k.tp, 1.0)
    full = k.tokens * m.hidden * k.act_bytes
    transfer = p2p_time(full / split, crosses, c)
    regather = where(split > 1, all_gather_time(full, k.tp, members_per_domain(k.tp, 1, c.nvlink_domain), c), 0.0)
    first, mid, last = pipeline_transfer_counts(fw)
    gathers_first, gathers_mid, gathers_last = pipeline_regather_counts(fw)
    chunk = {"first": first * transfer + gathers_first * regather,
             "mid": mid * transfer + gathers_mid * regather,
             "last": last * transfer + gathers_last * regather}
    # Interleaving sends every micro-batch across vpp times as many stage boundaries (Narayanan et al.
    # 2021, §2.2.2: "the amount of communication also increases by v"): a device runs vpp model chunks,
    # one of them the model's first (last) on the first (last) device, the others middle chunks.
    # An interleaved schedule may post its sends and receives asynchronously and run the next model
    # chunk meanwhile (Megatron-Core overlap_p2p_comm); the framework says what share that hides.
    v = asf(k.vpp)
    exposed = where(k.vpp > 1, 1.0 - fw.pp_overlap, 1.0)
    on = where(k.pp > 1, exposed, 0.0)
    return (on * ((v - 1.0) * chunk["mid"] + chunk["first"]), on * v * chunk["mid"],
            on * ((v - 1.0) * chunk["mid"] + chunk["last"]))


def pipeline_transfer_counts(fw: Framework) -> tuple[float, float, float]:
    """Transfer times the first, a middle and the last stage wait for per micro-batch. Megatron
    posts a send and the matching receive in one batched call (send_forward_recv_backward,
    send_backward_recv_forward: torch batch_isend_irecv), so the two directions share one transfer
    time: a middle stage waits for two per micro-batch (one per pass), the first and the last for one
    (their other call has nothing to send or receive). DeepSpeed's PipelineEngine runs SendGrad,
    RecvActivation, RecvGrad and SendActivation as separate commands (DeepSpeed v0.16.2
    runtime/pipe/schedule.py:216-223), each its own NCCL send or recv on the stage's stream
    (runtime/pipe/p2p.py:60, 81; async_op is refused at 48, 69): four on a middle stage, two on the
    first (SendActivation, RecvGrad) and on the last (RecvActivation, SendGrad)."""
    return (2.0, 4.0, 2.0) if fw.pp_blocking_p2p else (1.0, 2.0, 1.0)


def pipeline_regather_counts(fw: Framework) -> tuple[float, float, float]:
    """TP all-gathers of a pipeline tensor per micro-batch on the first, a middle and the last stage
    when sends are split over TP. Megatron gathers each tensor it receives: the activation on a
    non-first stage, the gradient on a non-last one. DeepSpeed's PipelineEngine does too
    (runtime/pipe/engine.py:722-726 forward, 845-848 backward, v0.16.2) and, since it keeps only its
    own partition of each sent activation, also gathers that back before backward on every stage
    but the last (engine.py:750-760 drops it, 830-833 restores it)."""
    return (2.0, 3.0, 1.0) if fw.pp_blocking_p2p else (1.0, 2.0, 1.0)


# ZeRO-2 reduce-scatters and ZeRO-3 gathers happen every micro-batch.

@dataclass(frozen=True, slots=True)
class CommVolumes:
    """Bytes per parameter of a gradient reduction and of a weight gather, and how many times a
    micro-batch gathers each layer under ZeRO-3."""

    grad_bytes: object
    weight_bytes: object
    gathers: object


def comm_volumes(fw: Framework, k: Knobs) -> CommVolumes:
    gbytes = grad_comm_bytes_per_param(k.grad_comm, k.precision)
    wbytes = weight_gather_bytes_per_param(k.grad_comm, k.precision)
    # Forward and backward gather each layer; the recompute forward gathers again under DeepSpeed
    # ZeRO-3, not under FSDP (fw.zero3_recompute_gathers; see the framework files).
    gathers = 2.0 + where(k.recompute == RC_FULL, fw.zero3_recompute_gathers, 0.0)
    return CommVolumes(grad_bytes=gbytes, weight_bytes=wbytes, gathers=gathers)


def zero3_calls(fw: Framework, k: Knobs, stages: Stages, sp: StageParams):
    """(all-gather calls, reduce-scatter calls) of one pass over the biggest stage."""
    # One gather per fetched module (fw.zero3_gathers_per_layer) of the biggest stage, plus the
    # embedding / output layer; gradients leave in reduce buckets, or one call per gather unit.
    most_layers = maximum(maximum(stages.first, stages.last), where(k.pp > 2, stages.mid, 0.0))
    gather_calls = most_layers * fw.zero3_gathers_per_layer + 1.0
    reduce_calls = gather_calls if fw.zero3_reduce_bucket_params <= 0 else \
        ceil(sp.per_gpu / fw.zero3_reduce_bucket_params)
    reduce_calls = where(fw.zero3_reduce_tensors_per_layer > 0,
                         most_layers * fw.zero3_reduce_tensors_per_layer + 1.0, reduce_calls)
    return gather_calls, reduce_calls


def zero3_gather_reduce_time(c: ClusterSpec, fw: Framework, k: Knobs, sp: StageParams, vol: CommVolumes,
                             gathers, calls):
    """Seconds of the biggest stage's weight gathers (`gathers` of each layer) and gradient
    reduce-scatter, at the framework's gather efficiency, plus every call's latency and, where the
    framework loops over the ranks on the host in every call, that loop (`zero3_rank_loop`)."""
    bw, lat = steptime.zero3_microbatch_comm_time(sp.per_gpu * vol.weight_bytes, sp.per_gpu * vol.grad_bytes,
                                                  gathers, k.shard, k.tp, c, *calls)
    return bw / fw.zero3_gather_efficiency + lat + zero3_rank_loop_time(c, fw, k, gathers, calls)


def zero3_rank_loop_time(c: ClusterSpec, fw: Framework, k: Knobs, gathers, calls):
    """Seconds of the per-rank work inside each ZeRO-3 call of DeepSpeed v0.3.13: every weight
    all-gather and every parameter's reduce-scatter builds one view per rank in a Python loop
    (partition_parameters.py:596-636 `_allgather_param`, 733-770 `_reduce_scatter_gradient`) and
    hands torch's list collective one tensor per rank, which copies each rank's piece with its own
    kernel (torch 1.8 ProcessGroupNCCL.cpp, allgather / reduce_scatter: flatten, then copy_ per
    tensor). Each gather also waits for the GPU (torch.cuda.synchronize(), line 611), so nothing hides
    them. The loop's host time is a measured share of a counted kernel's CPU time, priced at the fitted
    host_overhead_s (which also holds a kernel launch the loop does not make), and each copy at the
    GPU's kernel_overhead_s (not its host launch): two approximations of opposite sign, neither
    measured on a GPU. DeepSpeed 0.5.5 made the gathers flat (_all_gather_base, PR #1188) and 0.6.0
    the reduce-scatters (reduce_scatter_coalesced, PR #1453); zero for those and for FSDP."""
    gather_calls, reduce_calls = calls
    per_rank_call = fw.zero3_rank_loop_host * fw.host_overhead_s + fw.zero3_rank_loop_copies * c.gpu.kernel_overhead_s
    return (gathers * gather_calls + reduce_calls) * asf(k.shard) * per_rank_call


def _hidden_and_exposed(c: ClusterSpec, comm, window):
    """Seconds a collective of `comm` seconds costs beside a compute `window` it may hide under: the
    part that does not fit in the window, plus the slowdown its SMs cause to the compute while the rest
    hides (comm.overlap_slowdown)."""
    exposed = maximum(comm - window, 0.0)
    return exposed + overlap_slowdown(comm - exposed, c)


@dataclass(frozen=True, slots=True)
class Zero3:
    """Exposed ZeRO-3 / FSDP communication."""

    per_microbatch: object
    per_step: object
    keep_unsharded: object          # FSDP + PP: the stage's weights stay gathered over the step


def zero3_communication(c: ClusterSpec, fw: Framework, k: Knobs, stages: Stages, sp: StageParams,
                        vol: CommVolumes, mb_compute) -> Zero3:
    """Exposed seconds of ZeRO-3 / FSDP weight gathers and gradient reduce-scatters; `mb_compute` is
    the compute they hide under."""
    calls = zero3_calls(fw, k, stages, sp)
    z3 = zero3_gather_reduce_time(c, fw, k, sp, vol, vol.gathers, calls)
    # ZeRO++'s quantisation kernels sit on the gather / reduce path.
    z3 = z3 + sp.per_gpu * zeropp_quantisation_bytes_per_param(k.grad_comm, vol.gathers) / (
        c.gpu.hbm_bytes_per_s * c.gpu.hbm_efficiency)
    # Gathers of layer i+1 are prefetched under layer i's compute; each pass's first layer waits for
    # its own gather (one layer's share of the micro-batch's traffic stays exposed).
    # (counted once: the rest hides under compute as far as the framework overlaps at all).
    # What hides still slows the compute under it (comm.overlap_slowdown).
    z3_first = z3 / maximum(asf(stages.mid), 1.0)
    z3_exposed = where(k.zero >= ZERO3, z3_first + _hidden_and_exposed(c, z3 - z3_first, fw.zero3_overlap * mb_compute),
                       0.0)
    # FSDP2 under a pipeline schedule (torchtitan): weights gathered once per step and kept, gradients
    # reduce-scattered once, at the last micro-batch (fw.fsdp_pp_unsharded; see its catalog note).
    keep_unsharded = (k.zero >= ZERO3) & (k.pp > 1) & bool(fw.fsdp_pp_unsharded)
    z3_once = zero3_gather_reduce_time(c, fw, k, sp, vol, 1.0, calls)
    once_first = z3_once / maximum(asf(stages.mid), 1.0)
    z3_step = where(keep_unsharded,
                    once_first + _hidden_and_exposed(c, z3_once - once_first, fw.zero3_overlap * mb_compute), 0.0)
    z3_exposed = where(keep_unsharded, 0.0, z3_exposed)
    return Zero3(per_microbatch=z3_exposed, per_step=z3_step, keep_unsharded=keep_unsharded)


@dataclass(frozen=True, slots=True)
class DpOverlap:
    """How much data-parallel gradient communication hides under the backward pass."""

    window: object                  # seconds of backward it overlaps with
    bf16_optimizer: object          # DeepSpeed's BF16_Optimizer runs (and hides nothing)


def dp_overlap(fw: Framework, k: Knobs, stages: Stages, lt: LayerTimes) -> DpOverlap:
    """The framework's overlap share (pipelined, ZeRO-0 or otherwise) of a middle stage's backward."""
    share = where(k.pp > 1, fw.dp_overlap_pipelined, where(k.zero == ZERO0, fw.dp_overlap_zero0, fw.dp_overlap))
    # BF16_Optimizer all-reduces after backward returns, with no hooks (bf16_optimizer.py:321-346).
    bf16_opt = memory.bf16_optimizer_in_use(k.precision, k.zero, fw)
    share = where(bf16_opt, 0.0, share)
    return DpOverlap(window=share * stages.mid * lt.bwd_gpu, bf16_optimizer=bf16_opt)


def zero2_communication(c: ClusterSpec, k: Knobs, sp: StageParams, vol: CommVolumes, overlap: DpOverlap):
    """Exposed seconds per micro-batch of ZeRO-2's gradient reduce-scatter."""
    k_dp = members_per_domain(k.shard, k.tp, c.nvlink_domain)
    z2_rs = reduce_scatter_time(sp.per_gpu * vol.grad_bytes, k.shard, k_dp, c)
    return where(k.zero == ZERO2, _hidden_and_exposed(c, z2_rs, overlap.window), 0.0)


def param_offload_time(c: ClusterSpec, fw: Framework, k: Knobs, sp: StageParams, vol: CommVolumes, mb_compute):
    """Exposed seconds per micro-batch of fetching offloaded parameters; `mb_compute` hides some."""
    # Parameters streamed from host memory (ZeRO-Infinity offload_param) once per use.
    nvme_per_gpu = max(c.nvme_bytes_per_s, 1.0) / c.gpus_per_node
    fetch_rate = where(k.offload_params == OFF_NVME, min(c.pcie_bytes_per_s, nvme_per_gpu), c.pcie_bytes_per_s)
    param_fetch = sp.per_gpu * 2.0 * vol.gathers / fetch_rate
    hidden = fw.offload_overlap * param_fetch
    return where((k.zero >= ZERO3) & (k.offload_params != OFF_NONE),
                 param_fetch - hidden + maximum(hidden - mb_compute, 0.0), 0.0)


def checkpoint_offload_time(m: ModelSpec, c: ClusterSpec, k: Knobs, stages: Stages):
    """Seconds per micro-batch of moving activation checkpoints to host memory and back (DeepSpeed
    --checkpoint-in-cpu): each layer's input goes to the CPU in forward and returns for its
    recompute, over PCIe, with blocking copies on the compute stream (`.to(device)`, DeepSpeed 0.16.2
    checkpointing.py:530-531 and :615-617), so nothing hides it. The stage with the most layers sets it."""
    ckpt = memory.checkpoint_bytes(m, k.tokens, k.tp, k.sp, k.precision)
    layers = maximum(stages.first, maximum(stages.mid, stages.last))
    return where(k.ckpt_offload, 2.0 * layers * ckpt / c.pcie_bytes_per_s, 0.0)


def activation_offload_time(m: ModelSpec, c: ClusterSpec, fw: Framework, k: Knobs, lt: LayerTimes,
                            stages: Stages):
    """Seconds per micro-batch of Megatron-Core's activation offload (--cpu-offloading-num-layers N,
    pp 1, L layers). Transformer Engine's cpu_offload (its default synchronisation,
    OffloadSynchronizer._default_offload_sync_init) offloads layers 0..N-1 on a side stream: layer
    i's copy, issued when its forward ends, must be done when the forward of layer L-N+i starts,
    and its reload, issued at the backward of layer L-1-N+i, when its own backward starts. So each
    copy x has a window of w = L-N-1 layers, and the N copies queue on one stream over L-2 layers:
    forward waits max(N x - (L-2) f, N (x - w f), 0), backward the same with b."""
    stored, core_act = saved_layer_bytes(m, fw, k)
    copy = (stored + core_act) / c.pcie_bytes_per_s
    layers = stages.first                                   # one stage: pp 1
    n = memory.cpu_offloaded_layers(k.cpu_offload_layers, layers)
    window = layers - n - 1.0
    fwd, bwd = lt.fwd_gpu + lt.fwd_tp, lt.bwd_gpu + lt.bwd_tp
    wait = (maximum(maximum(n * copy - (layers - 2.0) * fwd, n * (copy - window * fwd)), 0.0)
            + maximum(maximum(n * copy - (layers - 2.0) * bwd, n * (copy - window * bwd)), 0.0))
    return where(n > 0, wait, 0.0)          # (with one layer, -(L-2) f would be a wait for nothing)


# ---- the pipeline over the stages, and once per step --------------------------------------------

def stage_microbatch_times(bodies: Bodies, shared: dict, pp):
    """(tau_first, tau_mid, tau_last): one micro-batch's time on each kind of stage, all included;
    `shared` is what every micro-batch adds on every stage."""

    def tau(stage_body, extra):
        return sum(stage_body.values()) + sum(shared.values()) + sum(extra.values())

    tau_first = tau(bodies.first, bodies.first_extra) + where(pp <= 1, sum(bodies.last_extra.values()), 0.0)
    return tau_first, tau(bodies.mid, {}), tau(bodies.last, bodies.last_extra)


def bottleneck(bodies: Bodies, slowest, pp, key):
    """Component `key` of one micro-batch on the slowest stage (0 first, 1 middle, 2 last)."""
    first = (bodies.first.get(key, 0.0) + bodies.first_extra.get(key, 0.0)
             + where(pp <= 1, bodies.last_extra.get(key, 0.0), 0.0))
    last = bodies.last.get(key, 0.0) + bodies.last_extra.get(key, 0.0)
    return where(slowest == 2, last, where(slowest == 1, bodies.mid.get(key, 0.0), first))


def dp_step_sync(c: ClusterSpec, fw: Framework, k: Knobs, sp: StageParams, vol: CommVolumes, overlap: DpOverlap):
    """Exposed seconds of the once-per-step data-parallel gradient sync and weight gather."""
    grad_sync, weight_sync = steptime.dp_gradient_sync_time(sp.per_gpu * vol.grad_bytes, sp.per_gpu * vol.weight_bytes,
                                                             k.zero, k.shard, k.tp, c,
                                                             overlap.bf16_optimizer)
    grad_sync = where(k.zero >= ZERO2, 0.0, grad_sync)          # ZeRO-2/3 reduced per micro-batch
    weight_sync = where(k.zero >= ZERO3, 0.0, weight_sync)      # ZeRO-3 gathers per micro-batch
    window = overlap.window                                     # last micro-batch's backward
    return (_hidden_and_exposed(c, grad_sync, window)
            + weight_sync * (1.0 - fw.param_gather_overlap)
            + overlap_slowdown(weight_sync * fw.param_gather_overlap, c))


def optimizer_time(c: ClusterSpec, k: Knobs, sp: StageParams):
    """(seconds of the optimizer step on the GPU, on the host when offloaded)."""
    opt_off = k.offload_optimizer
    opt_gpu = where(opt_off != OFF_NONE, 0.0, steptime.optimizer_step_time(sp.local, c, k.precision))
    opt_host = steptime.offloaded_optimizer_time(sp.local, opt_off, c)
    return opt_gpu, opt_host


def zero3_model_hooks(m: ModelSpec, fw: Framework, k: Knobs):
    """Host seconds per micro-batch of ZeRO-3's hooks on the modules outside the layers, forward and
    backward. They run where each micro-batch starts and ends (DeepSpeed's throughput timer has just
    synchronised the device, deepspeed/utils/timer.py:238), so nothing hides them."""
    per_module = fw.zero3_module_hooks_forward + fw.zero3_module_hooks_backward
    return where(k.zero >= ZERO3, compute.zero3_hooked_model_modules(m) * per_module * fw.host_overhead_s, 0.0)


def step_time(c: ClusterSpec, fw: Framework, k: Knobs, bodies: Bodies, shared: dict, zero3: Zero3,
              sp: StageParams, vol: CommVolumes, overlap: DpOverlap) -> dict:
    """Seconds per step by component: the pipeline schedule over the stages' micro-batch times
    (the slowest stage's components, n_micro times, and the bubble), then what happens once per step."""
    tau_first, tau_mid, tau_last = stage_microbatch_times(bodies, shared, k.pp)
    t_pipe, tau_max, slowest = steptime.pipeline_time(tau_first, tau_mid, tau_last, k.pp, k.vpp, k.n_micro)
    n_micro = k.n_micro

    def on_slowest(key):
        return bottleneck(bodies, slowest, k.pp, key)

    # ---- once per step ----------------------------------------------------------------------------
    dp_exposed = dp_step_sync(c, fw, k, sp, vol, overlap)
    opt_gpu, opt_host = optimizer_time(c, k, sp)
    return {
        "compute": n_micro * on_slowest("compute"),
        "recompute": n_micro * on_slowest("recompute"),
        "tp_comm": n_micro * on_slowest("tp_comm"),
        "cp_comm": n_micro * on_slowest("cp_comm"),
        "pp_comm": n_micro * on_slowest("pp_comm"),
        "bubble": t_pipe - n_micro * tau_max,
        "dp_comm": n_micro * shared["dp_comm"] + dp_exposed,
        "zero_comm": n_micro * shared["zero_comm"] + zero3.per_step,
        "offload": n_micro * shared["offload"] + opt_host,
        "optimizer": opt_gpu,
        "overhead": n_micro * (on_slowest("excess") + fw.microbatch_overhead_s + shared["hooks"])
                    + fw.iteration_overhead_s,
    }
