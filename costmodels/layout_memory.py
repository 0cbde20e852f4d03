"""Memory per GPU of a batch of layouts: the first, the last and a middle stage each, the one that
peaks reported; and host memory for offloaded state. The per-item formulas are in memory.py; this
module puts them together for `estimate._estimate_chunk`.
"""
from __future__ import annotations

from dataclasses import dataclass

from .vec import maximum, where

from . import memory
from .stages import Knobs, StageParams, Stages, recomputed_layers
from .types import ClusterSpec, Framework, ModelSpec
from .types import OFF_NONE, OFF_NVME  # named enum codes
from .types import ZERO3  # named ZeRO stage code


def saved_layer_bytes(m: ModelSpec, fw: Framework, k: Knobs):
    """(stored, attention core) bytes one layer saves for backward per micro-batch on one GPU, with the
    framework's saved-activation factor: what recompute keeps or drops, and what activation offload moves."""
    stored, core_act = memory.layer_activation_bytes(m, k.tokens, k.seq, k.tp, k.sp, k.flash, k.precision,
                                                     fw.fp8_saved_input_bytes, fw.fused_softmax_max_seq,
                                                     fw.layer_saves)
    return stored * fw.saved_activation_factor, core_act * fw.saved_activation_factor


def layer_parts(m: ModelSpec, fw: Framework, k: Knobs):
    """(stored, attention core, checkpoint) bytes of one layer and micro-batch on one GPU."""
    stored, core_act = saved_layer_bytes(m, fw, k)
    return stored, core_act, memory.checkpoint_bytes(m, k.tokens, k.tp, k.sp, k.precision)


def stage_activations(m: ModelSpec, fw: Framework, k: Knobs, stages: Stages, parts=None):
    """Bytes of activations the (first, middle, last) stage keeps for its micro-batches in flight;
    `parts`: layer_parts, when the caller has them."""
    stored, core_act, ckpt = parts if parts is not None else layer_parts(m, fw, k)
    pp, vpp, n_micro, rc = k.pp, k.vpp, k.n_micro, k.recompute
    inflight_first = memory.inflight_microbatches(pp, vpp, n_micro, 0)
    inflight_last = memory.inflight_microbatches(pp, vpp, n_micro, pp - 1)
    inflight_mid = memory.inflight_microbatches(pp, vpp, n_micro, 1)
    off = k.ckpt_offload
    act_mid = memory.stored_activation_bytes(stored, core_act, ckpt, rc, stages.mid,
                                             recomputed_layers(k, stages.mid), inflight_mid, off)
    act_first = (memory.stored_activation_bytes(stored, core_act, ckpt, rc, stages.first,
                                                recomputed_layers(k, stages.first), inflight_first, off)
                 + inflight_first * memory.embedding_activation_bytes(m, k.tokens, k.tp, k.sp, k.precision))
    act_last = memory.stored_activation_bytes(stored, core_act, ckpt, rc, stages.last,
                                              recomputed_layers(k, stages.last), inflight_last, off)
    # With the checkpoints offloaded, DeepSpeed's PipelineEngine still keeps each in-flight micro-batch's
    # received input and its output in pipe_buffers on the GPU (pipe/engine.py:713-716, 760).
    pipe = where(off & (pp > 1), 2.0 * ckpt, 0.0)
    # Megatron-Core's activation offload (pp 1, no recompute; one stage, one micro-batch in flight):
    # Transformer Engine's default synchronisation has every offloaded layer's copy done by the
    # forward of layer L-N+i, so at the end of forward, where activations peak, L-N layers' are on
    # the GPU (cpu_offload.py, OffloadSynchronizer._default_offload_sync_init).
    act_first = act_first - memory.cpu_offloaded_layers(k.cpu_offload_layers, stages.first) * (stored + core_act)
    return act_first + inflight_first * pipe, act_mid + inflight_mid * pipe, act_last + inflight_last * pipe


def backward_transient(parts, k: Knobs, layers):
    """What the layer in backward brings back on a stage of `layers` layers (memory.recompute_transient_bytes),
    from layer_parts."""
    stored, core_act, ckpt = parts
    return memory.recompute_transient_bytes(stored, core_act, ckpt, k.recompute, layers,
                                            recomputed_layers(k, layers), k.ckpt_offload)


def host_checkpoint_bytes(m: ModelSpec, fw: Framework, k: Knobs, stages: Stages):
    """Host bytes per GPU of offloaded activation checkpoints (DeepSpeed) or of offloaded layers' saved
    activations (Megatron-Core), on the stage that holds the most."""
    ckpt = memory.checkpoint_bytes(m, k.tokens, k.tp, k.sp, k.precision)
    inflight = [memory.inflight_microbatches(k.pp, k.vpp, k.n_micro, s) for s in (0, 1, k.pp - 1)]
    per_stage = [memory.offloaded_checkpoint_bytes(ckpt, layers, n, k.ckpt_offload)
                 for layers, n in zip((stages.first, stages.mid, stages.last), inflight)]
    stored, core_act = saved_layer_bytes(m, fw, k)
    offloaded = memory.cpu_offloaded_layers(k.cpu_offload_layers, stages.first) * (stored + core_act)   # pp 1
    return maximum(per_stage[0], maximum(per_stage[1], per_stage[2])) + offloaded


def zero3_working_bytes(fw: Framework, k: Knobs, sp: StageParams):
    """Bytes of the weights ZeRO-3 holds gathered at a time (0 below ZeRO-3)."""
    working = memory.zero3_working_params(sp.layer / k.tp, sp.per_gpu, fw) * k.act_bytes
    return where(k.zero >= ZERO3, working, 0.0)


def one_stage_memory(fw: Framework, k: Knobs, stage_p, activations, logits, working, keep_unsharded) -> dict:
    """Bytes per GPU of a stage holding `stage_p` parameters (before the TP split), by item; "working":
    the gathered ZeRO-3 weights, or FSDP + PP's unsharded stage."""
    w, g, o = memory.model_state_bytes(stage_p / k.tp, k.precision, k.zero, k.shard, k.offload_optimizer,
                                       k.offload_params, fw, k.grad_comm)
    # FSDP + PP kept unsharded: the stage's 16-bit weights, and fp32 gradients accumulated over the
    # micro-batches before the last one's reduce-scatter.
    work = where(keep_unsharded, stage_p / k.tp * k.act_bytes, working)
    grad_acc = where(keep_unsharded & (k.n_micro > 1), stage_p / k.tp * 4.0, 0.0)
    local = stage_p / k.tp
    zero0_copies = memory.zero0_step_copy_bytes(local, k.precision, k.zero, k.grad_comm, fw)
    copies = zero0_copies + memory.zero_step_copy_bytes(local, k.zero, k.shard, k.offload_optimizer, fw)
    # The optimizer step's own peak, after the last backward: the activations are freed by then.
    # ZeRO 1-3: the weights and the optimizer state with the gradient partition and its copies (the full
    # 16-bit gradients of ZeRO-1 and the gradient buckets are freed too); stage 0: the whole state with
    # its optimizer's copies (memory.zero0_step_copy_bytes).
    gradients_at_step = memory.zero_step_peak_bytes(local, k.zero, k.shard, k.offload_optimizer, fw)
    step = where(gradients_at_step > 0,
                 w + o + gradients_at_step + memory.persistent_comm_buffer_bytes(k.zero, k.pp, fw),
                 where(zero0_copies > 0, w + g + grad_acc + o + zero0_copies, 0.0))
    return {"weights": w, "grads": g + grad_acc, "optimizer": o, "activations": activations, "logits": logits,
            "working": work, "step_copies": copies, "step_peak": step}


def allocated(stage: dict, buffers, workspace):
    """Bytes the allocator hands out on a stage at its activation peak: its items, the communication
    buffers, the backward workspace."""
    return (stage["weights"] + stage["grads"] + stage["optimizer"] + stage["activations"] + stage["logits"]
            + buffers + workspace + stage["working"])


def held(stage: dict, alloc, fw: Framework):
    """What the caching allocator holds on a stage: the activation peak's allocation, its cache, and the
    optimizer step's copies on top (they come after the last backward, in blocks the cached activations do
    not fit: memory.zero0_step_copy_bytes, memory.zero_step_copy_bytes). It is never less than the step's
    own allocation (memory.zero_step_peak_bytes), which holds no more than the activation peak's
    model states and these copies."""
    return alloc * (1.0 + fw.allocator_fragmentation) + stage["step_copies"]


@dataclass(frozen=True, slots=True)
class Memory:
    """Memory per GPU of the stage that peaks."""

    columns: dict                   # by item: MemoryBreakdown's fields
    allocated: object               # the larger of the activation peak and the optimizer step's
    activation_peak: object         # live tensors at the activation peak (what the allocator's cache grows from)
    total: object
    peak_stage: object              # which stage peaks: 0 first, 1 a middle one, pp - 1 the last


def stage_memory(m: ModelSpec, fw: Framework, k: Knobs, stages: Stages, sp: StageParams, keep_unsharded,
                 rows) -> Memory:
    """Memory of the first and the last stage (and a middle one); reports the larger. `keep_unsharded`:
    FSDP + PP keeps the stage's weights gathered (layout_time.Zero3); `rows`: an array with one value
    per layout (the step time), so that constant items come out one per row."""
    pp = k.pp
    parts = layer_parts(m, fw, k)
    act_first, act_mid, act_last = stage_activations(m, fw, k, stages, parts)
    # PyTorch's context parallel adds its ring's buffers to what a layer's backward holds (counted on top of
    # the MLP's gradients, which are freed before the attention's backward: up to those high)
    ring = (memory.ring_allgather_buffer_bytes(m, k.tokens, k.tp, k.cp, k.precision)
            if fw.context_parallel == "ring_allgather" else 0.0)
    workspace = memory.backward_workspace_bytes(m, k.tokens, k.tp, k.precision) + ring
    logits = memory.logits_bytes(m, k.tokens, k.tp, fw)
    logits_first = memory.logits_at_peak_bytes(logits, backward_transient(parts, k, stages.first) + workspace, fw,
                                               ring)
    logits_last = memory.logits_at_peak_bytes(logits, backward_transient(parts, k, stages.last) + workspace, fw,
                                              ring)
    working = zero3_working_bytes(fw, k, sp)
    first = one_stage_memory(fw, k, sp.first, act_first, where(pp <= 1, logits_first, 0.0), working, keep_unsharded)
    last = one_stage_memory(fw, k, sp.last, act_last, logits_last, working, keep_unsharded)
    mid = one_stage_memory(fw, k, sp.mid, act_mid, 0.0 * logits, working, keep_unsharded)
    buffers = memory.comm_buffer_bytes(k.zero, pp, fw) + 0.0 * rows
    return peak_stage_memory(fw, k, stages, first, mid, last, buffers, workspace)


def peak_stage_memory(fw: Framework, k: Knobs, stages: Stages, first: dict, mid: dict, last: dict,
                      buffers, workspace) -> Memory:
    """The memory of whichever of the first, the last and a middle stage allocates the most."""
    pp = k.pp
    alloc_first = allocated(first, buffers, workspace)
    alloc_last = allocated(last, buffers, workspace)
    alloc_mid = allocated(mid, buffers, workspace)
    held_first, held_last, held_mid = held(first, alloc_first, fw), held(last, alloc_last, fw), held(mid, alloc_mid, fw)
    last_peaks = (pp > 1) & (held_last > held_first)
    # With an uneven split a middle stage (the second: most micro-batches in flight) may peak.
    mid_peaks = stages.uneven & (pp > 2) & (held_mid > maximum(held_first, where(pp > 1, held_last, 0.0)))

    def pick(first, last, mid=None):
        out = where(last_peaks, last, first)
        return out if mid is None else where(mid_peaks, mid, out)

    def pick_item(key):
        return pick(first[key], last[key], mid[key])

    columns = {
        "weights": pick(first["weights"] + first["working"], last["weights"] + last["working"],
                        mid["weights"] + mid["working"]),
        "grads": pick_item("grads"),
        "optimizer": pick_item("optimizer"),
        "activations": pick_item("activations"),
        "logits": pick_item("logits"),
        "comm_buffers": buffers,
        "workspace": workspace,
        "step_copies": pick_item("step_copies"),
    }
    alloc = pick(alloc_first, alloc_last, alloc_mid)
    columns["fragmentation"] = alloc * fw.allocator_fragmentation
    columns["cuda_context"] = fw.cuda_context_bytes + 0.0 * alloc
    columns["step_peak"] = pick_item("step_peak")
    total = alloc + columns["fragmentation"] + columns["step_copies"] + columns["cuda_context"]
    return Memory(columns=columns, allocated=maximum(alloc, columns["step_peak"]), activation_peak=alloc,
                  total=total, peak_stage=where(mid_peaks, 1.0, where(last_peaks, pp - 1, 0.0)))


@dataclass(frozen=True, slots=True)
class HostMemory:
    per_node: object                # bytes of host memory and NVMe per node, together
    ram: object                     # of those, in host memory
    nvme: object                    # of those, on NVMe
    fits: object


def host_memory(c: ClusterSpec, k: Knobs, sp: StageParams, checkpoints=0.0) -> HostMemory:
    """Host memory (or NVMe) per node: offloaded optimizer state (fp32 master, moments and gradients,
    16 B/param), offloaded parameters (2 B/param), and `checkpoints` bytes per GPU of offloaded
    activation checkpoints (always host memory)."""
    opt_off, local = k.offload_optimizer, sp.local
    host_per_node = where(opt_off != OFF_NONE, local * 16.0 * c.gpus_per_node, 0.0)
    host_per_node = host_per_node + where(k.offload_params != OFF_NONE, local * 2.0 * c.gpus_per_node, 0.0)
    # With the optimizer on NVMe, DeepSpeed puts offloaded parameters there too (the old accounting).
    nvme_needed = where(opt_off == OFF_NVME, host_per_node, 0.0)
    in_ram = where(opt_off == OFF_NVME, 0.0, host_per_node) + checkpoints * c.gpus_per_node
    host_fits = (nvme_needed <= c.nvme_bytes) & (in_ram <= c.host_memory_bytes)
    return HostMemory(per_node=nvme_needed + in_ram, ram=in_ram, nvme=nvme_needed, fits=host_fits)
