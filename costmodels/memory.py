"""Memory per GPU: model states by ZeRO stage, activations by recompute mode and schedule.

Every function takes numpy arrays (or scalars) for layout fields and broadcasts.
Codes: recompute 0 none / 1 selective / 2 full; offload 0 none / 1 cpu / 2 nvme;
precision 0 fp32 / 1 fp16 / 2 bf16 / 3 fp8.
"""
from __future__ import annotations

import numpy as np

from .vec import asf, asv, ceil, clip, floor, lookup, maximum, minimum, where, whole  # noqa: F401

from .types import FP8, FP32, GC_FP32, OFF_NONE, RC_FULL, RC_SELECTIVE, ZERO0, ZERO1, ZERO2, ZERO3, Framework, ModelSpec, Precision



def activation_bytes_per_element(precision):
    """Activations are 16-bit in mixed precision and fp8 training (Transformer Engine keeps
    bf16 activations outside GEMMs), 32-bit in fp32 training."""
    return where(asv(precision) == FP32, 4.0, 2.0)


_PRECISIONS = tuple(sorted(Precision._CODES, key=Precision._CODES.get))   # names in code order


def bf16_optimizer_in_use(precision, zero, fw: Framework):
    """DeepSpeed's BF16_Optimizer (fp32 gradient buffer, optimizer sharded over data parallelism)
    runs at ZeRO stage 0 with bf16 (DeepSpeed 0.16.2 engine.py:1276-1277). At stage 1 the planner
    emits no grad_accum_dtype, so DeepSpeed's ZeRO optimizer runs instead (engine.py:1245-1248)."""
    shards = np.array([name in fw.zero0_shards_optimizer for name in _PRECISIONS])
    return (asv(zero) == ZERO0) & lookup(shards, precision)


def state_bytes_per_param(precision, fw: Framework, zero=1):
    """Bytes per parameter of (weights, gradients, optimizer state) in the framework's mixed-precision
    scheme; for 16-bit Adam 2 + 2 + 12 (Rajbhandari et al. 2020, arXiv:1910.02054, §3.1, K = 12),
    plus what the framework adds (fp32 gradient accumulation, fp32 gradient partitions)."""
    with_zero = np.array([fw.state_bytes[name] for name in _PRECISIONS])   # rows by precision code
    no_zero = np.array([fw.state_bytes_zero0[name] for name in _PRECISIONS])
    p = asv(precision)
    z0 = (asv(zero) == ZERO0) | bf16_optimizer_in_use(precision, zero, fw)
    return tuple(where(z0, lookup(no_zero[:, k], p), lookup(with_zero[:, k], p)) for k in range(3))


def model_state_bytes(params, precision, zero, shard, offload_optimizer, offload_params,
                      fw: Framework, grad_comm=0):
    """Weights, gradients and optimizer state per GPU for `params` weights held by its model-parallel
    rank; ZeRO shards the optimizer state (stage >= 1), gradients (>= 2) and weights (3) over `shard`
    data-parallel ranks (Rajbhandari et al. 2020, Fig. 1). Offloaded state leaves the GPU.

    Returns (weights, grads, optimizer) in bytes.
    """
    zero = asv(zero)
    shard = asf(shard)
    w_b, g_b, o_b = state_bytes_per_param(precision, fw, zero)
    # DeepSpeed's BF16_Optimizer shards the optimizer over data parallelism even at ZeRO stage 0.
    opt_sharded = (zero >= ZERO1) | bf16_optimizer_in_use(precision, zero, fw)
    if fw.grad_buffer_follows_comm:
        g_b = where(asv(grad_comm) != GC_FP32, minimum(g_b, 2.0), g_b)
    weights = params * where(zero >= ZERO3, w_b / shard, w_b)
    weights = where((zero >= ZERO3) & (asv(offload_params) != OFF_NONE), 0.0, weights)
    grads = params * where(zero >= ZERO2, g_b / shard, g_b)
    optimizer = params * where(opt_sharded, o_b / shard, o_b)
    optimizer = where(asv(offload_optimizer) != OFF_NONE, 0.0, optimizer)
    return weights, grads, optimizer


# DeepSpeed's gradient all-reduce buckets: engine.allreduce_no_retain collects gradients up to
# this many elements per bucket (MEMORY_OPT_ALLREDUCE_SIZE, DeepSpeed 0.16.2 runtime/engine.py:110).
ALLREDUCE_BUCKET_ELEMENTS = 5e8


def bf16_allreduce_copy_bytes(params, grad_comm):
    """Copies DeepSpeed makes when its BF16_Optimizer all-reduces the fp32 gradient buffer after the
    last backward (engine.buffered_allreduce_fallback -> allreduce_bucket, DeepSpeed 0.16.2
    runtime/engine.py:2418-2461; the same code in the 0.6 releases BLOOM trained with). The buffer is
    one flat tensor per parameter group. A bucket holding one tensor is flattened as a view; Megatron's
    weight-decay group (every weight but the biases and norms, taken here as all `params`) fills a
    bucket alone once it exceeds 5e8 elements, and below that it is concatenated with the small group
    into a new fp32 tensor (4 B per parameter). Then `tensor.to(communication_data_type)` makes a
    16-bit copy (2 B per parameter) unless gradients travel in fp32 (communication_data_type defaults
    to bf16 when bf16 is on, engine.py:871-882)."""
    params = asf(params)
    cat = where(params <= ALLREDUCE_BUCKET_ELEMENTS, 4.0, 0.0)
    cast = where(asv(grad_comm) != GC_FP32, 2.0, 0.0)
    return (cat + cast) * params


def zero0_step_copy_bytes(params, precision, zero, grad_comm, fw: Framework):
    """Bytes the ZeRO-0 optimizer step allocates on top of the optimizer state, for `params` weights
    on the GPU: BF16_Optimizer's all-reduce copies (above), or the framework's fixed copies per
    parameter (`zero0_step_copy_bytes`; DeepSpeed's FP16_Optimizer converts every fp16 gradient to
    fp32 before flattening them, fused_optimizer.py:277-291). They are made after the last backward,
    when the activations are freed but still held in the caching allocator's blocks, so they add to
    what the allocator holds (reserved, nvidia-smi), not to the peak allocation: BLOOM's nvidia-smi
    readings (benchmarks/data/bloom_chronicles.yaml) sit 2 B per parameter above the state and
    activations in its 11 BF16_Optimizer runs, and 4 B in its one FP16_Optimizer run (whose record
    says it ran on another code branch: the FP16 case rests on that one run)."""
    bf16_opt = bf16_optimizer_in_use(precision, zero, fw)
    fixed = lookup(np.array([fw.zero0_step_copy_bytes.get(n, 0.0) for n in _PRECISIONS]), precision)
    other = where((asv(zero) == ZERO0) & ~bf16_opt, fixed * asf(params), 0.0)
    return where(bf16_opt, bf16_allreduce_copy_bytes(params, grad_comm), other)


def zero_step_peak_bytes(params, zero, shard, offload_optimizer, fw: Framework):
    """Bytes of `params` weights' gradients at the ZeRO 1-3 optimizer step, on top of the optimizer state
    (DeepSpeed 0.16.2 runtime/zero/stage_1_and_2.py): the 16-bit gradient partition it steps with
    (averaged_gradients, :777-785), its flattened copy (`self.flatten(...)`, :1887) and that copy cast to
    fp32 (`.to(fp32)`, :1887-1888): 2 + 2 + 4 bytes per parameter of the rank's partition
    (`zero_step_gradient_bytes` + `zero_step_copy_bytes`). The activations, the full 16-bit gradients
    (ZeRO-1) and the gradient buckets are freed by then (the boundary backward's epilogue, :758-796).
    Stage 3 (stage3.py) steps the same way. Offloaded optimizers step on the host: 0."""
    return _zero_step_bytes(params, zero, shard, offload_optimizer,
                            fw.zero_step_gradient_bytes + fw.zero_step_copy_bytes)


def zero_step_copy_bytes(params, zero, shard, offload_optimizer, fw: Framework):
    """Of zero_step_peak_bytes, what the step allocates in new flat blocks the size of the partition
    (the flattened copy and its fp32 cast): blocks the cached activations cannot serve, so they add to
    what the caching allocator holds, as zero0_step_copy_bytes do at stage 0."""
    return _zero_step_bytes(params, zero, shard, offload_optimizer, fw.zero_step_copy_bytes)


def _zero_step_bytes(params, zero, shard, offload_optimizer, per_param):
    """`per_param` bytes per parameter of the rank's ZeRO 1-3 partition, where the step runs on the GPU."""
    on_gpu = (asv(zero) >= ZERO1) & (asv(offload_optimizer) == OFF_NONE)
    return where(on_gpu, asf(params) * per_param / asf(shard), 0.0)


def comm_buffer_bytes(zero, pp, fw: Framework):
    """Gradient-communication buffers alive at the activation peak. DeepSpeed 0.16.2 without a pipeline
    (`comm_buffers_by_zero_stage`, measured on the CPU by benchmarks/gpu/mem_trace): ZeRO-1/2 allocate two
    reduce buckets at the start of every backward (stage_1_and_2.py:2040-2051), ZeRO-3 holds one from
    initialisation (stage3.py:531-534), and stage 0's optimizers none. Under the PipelineEngine and for
    frameworks without the table, `comm_buffers` (a stand-in, see the catalog)."""
    if fw.comm_buffer_bytes_by_zero is None:
        return fw.comm_buffer_bytes + 0.0 * asf(zero)
    single = lookup(np.array(fw.comm_buffer_bytes_by_zero, dtype=float), zero)
    return where(asf(pp) <= 1, single, fw.comm_buffer_bytes)


def persistent_comm_buffer_bytes(zero, pp, fw: Framework):
    """Of comm_buffer_bytes, what is still allocated while the optimizer steps: ZeRO-3's bucket."""
    return where(asv(zero) >= ZERO3, comm_buffer_bytes(zero, pp, fw), 0.0)


def zero3_working_params(layer_params_local, mp_params, fw: Framework):
    """ZeRO-3 / FSDP gather weights just before use and prefetch the next: FSDP holds whole blocks
    (the current and the prefetched one), DeepSpeed at most stage3_max_live_parameters
    (Rajbhandari et al. 2021, arXiv:2104.07857, §6.2), never more than the model part itself."""
    live = minimum(fw.zero3_live_layers * layer_params_local, fw.zero3_live_params)
    return minimum(maximum(live, 0.0), mp_params)


def megatron_softmax_falls_back(m: ModelSpec, tokens, seq_len, tp, flash, precision, fused_max_seq):
    """Megatron's fused scaled-masked softmax runs only when FusedScaleMaskSoftmax.is_kernel_available
    says so (Megatron-DeepSpeed f4157bea megatron/model/fused_softmax.py:152-172; Megatron-LM the same
    since 7a77abd9b6, 2022-01): 16-bit scores, 16 < s <= 4096, s divisible by 4, and b x np divisible
    by the kernel's batches per block (4 for s > 128; b the micro-batch, np the heads per TP rank).
    Otherwise forward_torch_softmax runs it as eager ops in fp32. Non-flash attention only;
    `fused_max_seq` 0: the framework has no such kernel (nothing to fall back from)."""
    s = asf(seq_len)
    # b x np: tokens / s sequences per micro-batch, np the heads of one TP rank. A fraction of a
    # sequence means context parallelism, which Megatron runs with flash attention only: no softmax here.
    seqs = tokens / s
    batches = seqs * m.num_heads / asf(tp)
    per_block = where(s <= 128, 8.0, 4.0)
    fits = (s > 16) & (s <= fused_max_seq) & whole(s / 4.0) & whole(batches / per_block)
    eager = where(fits, False, fused_max_seq > 0) & whole(seqs)
    return where(flash, False, where(asv(precision) == FP32, False, eager))


# Extra bytes per attention score of the eager fallback, counted from forward_torch_softmax: the fp32
# cast (read 2, write 4), the scale (4, 4), masked_fill_ (4 + the 1-byte mask, 4), softmax (4, 4) and
# the cast back (4, 2), against the fused kernel's read 2 / write 2; backward runs the same five ops'
# gradients (6 + 12 + 9 + 8 + 6 bytes) against the fused backward's 6. Four more kernels each way.
SOFTMAX_FALLBACK_BYTES = (33.0, 35.0)
SOFTMAX_FALLBACK_KERNELS = 4.0


# What a framework's layer saves for backward beyond the reference count below (Framework.layer_saves),
# each from its source:
#   expanded_kv       K and V are repeated over all query heads before the attention kernel, which saves
#                     them so (GQA; Megatron-DeepSpeed repeat_kv, megatron/model/transformer.py:724-727)
#   attention_output  the flash kernel saves its output (b, s, h, d) for backward and the output
#                     projection its own contiguous copy of it (transformer.py:850-851, `.contiguous()`)
#   gated_activation  the gated MLP saves act(gate) for the product's backward beside gate and up
#                     (transformer.py:135-137, F.silu(x[0]) * x[1])
#   dropout_masks     each residual dropout saves a 1-byte mask even at p = 0: TorchScript's autodiff
#                     runs the scripted bias-dropout-add's dropout as native_dropout (transformer.py:879-884)
LAYER_SAVES = ("expanded_kv", "attention_output", "gated_activation", "dropout_masks")


def layer_activation_bytes(m: ModelSpec, tokens, seq_len, tp, sp, flash, precision, fp8_input_bytes=1.0,
                           fused_max_seq=0.0, saves=()):
    """Activations one layer saves for backward, per GPU, for `tokens` tokens of one micro-batch.

    Korthikanti et al. 2022 (arXiv:2205.05198) §4, Table 2: sbh(10 + 24/t + 5as/ht) bytes without
    sequence parallelism and sbh(34/t + 5as/ht) with it, generalised term by term to GQA, SwiGLU
    and dropout-free models, plus what the framework's code saves beyond that (`saves`, LAYER_SAVES).
    Returns (stored, attention_core): the attention-core part (softmax output, its dropout mask and
    output) is what selective recompute and FlashAttention avoid.
    """
    e = activation_bytes_per_element(precision)
    g = where(asv(precision) == FP8, fp8_input_bytes, e)   # GEMM inputs saved in fp8 (TE)
    h, f = m.hidden, m.ffn_hidden
    kv = h if "expanded_kv" in saves else h * m.num_kv_heads / m.num_heads
    drop = 1.0 if m.hidden_dropout > 0 or "dropout_masks" in saves else 0.0
    # Replicated across TP ranks unless sequence parallel: both norm inputs, QKV input, fc1 input,
    # two residual-dropout masks (1 byte each).
    replicated = 2.0 * h * e + 2.0 * h * g + 2.0 * h * drop
    # Split across TP ranks: Q, K, V, projection input, MLP activation inputs (gated: gate and up,
    # then the product feeding fc2), flash-attention softmax statistics (fp32 per head).
    gated = where(m.gated_mlp, 3.0 if "gated_activation" in saves else 2.0, 1.0)
    mlp = gated * f * e + f * g
    out_copy = where(flash, h * e, 0.0) if "attention_output" in saves else 0.0
    split = (h + 2.0 * kv) * e + h * g + mlp + where(flash, 4.0 * m.num_heads, 0.0) + out_copy
    attn_drop = 1.0 if m.attention_dropout > 0 else 0.0
    # Softmax output (e), its dropout mask (1 byte) and dropout output (e) per score (5as with e=2).
    # Megatron's eager fallback saves the fp32 softmax output (4 bytes) for softmax's backward, and
    # without dropout its 16-bit cast for AV's backward as well.
    fallback = megatron_softmax_falls_back(m, tokens, seq_len, tp, flash, precision, fused_max_seq)
    probs = e + where(fallback, 4.0 - e + (0.0 if attn_drop else e), 0.0)
    core = where(flash, 0.0, m.num_heads * asf(seq_len) * (probs + attn_drop * (1.0 + e)))
    tp = asf(tp)
    per_token = where(sp, (replicated + split) / tp, replicated + split / tp)
    return tokens * per_token, tokens * core / tp


def backward_workspace_bytes(m: ModelSpec, tokens, tp, precision):
    """Activation gradients alive while one layer runs backward: the output gradient and the
    gradients of the widest MLP tensors (2h + 2f', f' = 2f when gated), split over TP."""
    e = activation_bytes_per_element(precision)
    wide = (2.0 if m.gated_mlp else 1.0) * m.ffn_hidden
    return tokens * (2.0 * m.hidden + 2.0 * wide) * e / asf(tp)


def ring_allgather_buffer_bytes(m: ModelSpec, tokens, tp, cp, precision):
    """Bytes PyTorch's experimental context parallel holds while one layer's attention runs backward,
    beyond what that backward holds without it (torch 2.6 torch/distributed/tensor/experimental/
    _attention.py, _templated_ring_attention_backward). torchtitan (9dec370, models/llama/model.py)
    hands it K and V after repeat_kv, so each of Q, K and V has E = tokens x h / t elements on a GPU:
      - K and V of the whole ring, all-gathered once (the default rotate method, _AllGatherRotater):
        2 cp E in 16 bits;
      - K and V made contiguous, and the concatenation the ring sends on: 2 x 2E in 16 bits;
      - dQ, dK and dV accumulated in fp32 (convert_to_f32): 3E x 4 bytes;
      - dK and dV concatenated in fp32 for the next rank, and the pair in flight from the previous one
        (an all-to-all, _AllToAllRotater): 2 x 2E x 4 bytes.
    That is (2 cp + 4) E e + 28 E bytes; 0 without context parallelism."""
    e = activation_bytes_per_element(precision)
    elements = tokens * m.hidden / asf(tp)
    return where(asf(cp) > 1, elements * ((2.0 * asf(cp) + 4.0) * e + 28.0), 0.0)


def checkpoint_bytes(m: ModelSpec, tokens, tp, sp, precision):
    """Full recompute keeps only each layer's input, sbh x 2 bytes, split over TP with sequence
    parallelism or DeepSpeed's partition-activations (Korthikanti et al. 2022, §4.1)."""
    e = activation_bytes_per_element(precision)
    return tokens * m.hidden * e / where(sp, asf(tp), 1.0)


def stored_activation_bytes(stored, core, ckpt, recompute, layers, recomputed_layers, inflight,
                            ckpt_offload=False):
    """Activations alive at the peak of one pipeline stage.

    `inflight` micro-batches (of `layers` layers each) hold their saved tensors; the layer in
    backward additionally materialises what recompute threw away (one layer's worth), so stronger
    recompute never needs more memory (Korthikanti et al. 2022, §4-5). With `ckpt_offload` the
    checkpoints wait in host memory and only the layer being recomputed is on the GPU (DeepSpeed
    0.16.2 checkpointing.py:530-531 copies each checkpoint to the CPU, :615-617 back for its backward).
    """
    kept = where(ckpt_offload, 0.0, ckpt)
    recompute = asv(recompute)
    full_layers = where(recomputed_layers > 0, minimum(recomputed_layers, layers), layers)
    none_total = inflight * layers * (stored + core)
    selective_total = inflight * layers * stored
    full_total = inflight * (full_layers * kept + (layers - full_layers) * (stored + core))
    in_flight = where(recompute == RC_FULL, full_total, where(recompute == RC_SELECTIVE, selective_total, none_total))
    return in_flight + recompute_transient_bytes(stored, core, ckpt, recompute, layers, recomputed_layers,
                                                 ckpt_offload)


def recompute_transient_bytes(stored, core, ckpt, recompute, layers, recomputed_layers, ckpt_offload=False):
    """Of stored_activation_bytes, what only the layer in backward holds: what recompute threw away and
    brings back for it (full: the layer's saved tensors less its checkpoint; selective: its attention core)."""
    ckpt = where(ckpt_offload, 0.0, ckpt)
    recompute = asv(recompute)
    full_layers = where(recomputed_layers > 0, minimum(recomputed_layers, layers), layers)
    full = where(full_layers > 0, stored + core - ckpt, 0.0)
    return where(recompute == RC_FULL, full, where(recompute == RC_SELECTIVE, core, 0.0))


def logits_at_peak_bytes(logits, backward_transient, fw: Framework, ring=0.0):
    """What the loss's logits add to a stage's peak. Where the framework frees them before its backward
    peaks (`loss_frees_before_backward`: Megatron-DeepSpeed, traced on the CPU, benchmarks/gpu/mem_trace),
    the logits at their peak (the end of the last forward) and the backward's own transient (the layer
    being recomputed and its activation gradients, `ring` buffers included) never coexist, and only the
    part of the logits beyond that transient counts; elsewhere both count (torchtitan's long-sequence
    readings sit 14% above the model with the first reading, 4% with the second: not understood, so not
    generalised), except the context-parallel ring's buffers (ring_allgather_buffer_bytes, part of the
    workspace), which live only inside a layer's attention backward, after the logits are freed."""
    if not fw.loss_frees_before_backward:
        return maximum(logits - ring, 0.0)
    return maximum(logits - backward_transient, 0.0)


def cpu_offloaded_layers(cpu_offload_layers, layers):
    """Layers of a stage of `layers` whose saved activations wait in host memory under Megatron-Core's
    --cpu-offloading-num-layers N (it requires N < the model's layers, so one stays at least)."""
    return minimum(cpu_offload_layers, maximum(layers - 1.0, 0.0))


def offloaded_checkpoint_bytes(ckpt, layers, inflight, ckpt_offload):
    """Host bytes of one GPU's offloaded checkpoints: one per layer of each micro-batch in flight."""
    return where(ckpt_offload, inflight * layers * ckpt, 0.0)


def inflight_microbatches(pp, vpp, num_microbatches, stage):
    """Micro-batches whose activations one stage holds under 1F1B: min(p - stage, m)
    (Narayanan et al. 2021, §2.2.1). Interleaved: Megatron warms up 2(p - stage - 1) + (v - 1)p
    chunks of L/(pv) layers, plus the one in flight (Narayanan et al. 2021, §2.2.2); returned in
    units of whole stages (v chunks)."""
    pp = asf(pp)
    vpp = asf(vpp)
    m = asf(num_microbatches)
    plain = minimum(pp - stage, m)
    chunks = minimum(2.0 * (pp - stage - 1) + (vpp - 1) * pp + 1, m * vpp)
    return where(vpp > 1, chunks / vpp, maximum(plain, 1.0))


def logits_bytes(m: ModelSpec, tokens, tp, fw: Framework):
    """Output-layer logits at the loss: bf16 logits plus the fp32 copy the vocab-parallel cross
    entropy works on (Korthikanti et al. 2022, §4.3: 4sbv/t for the fp32 part). A framework whose
    loss takes another path on vocabulary-sharded logits (tp > 1) gives its own peak bytes."""
    per_element = fw.logits_bytes_per_element
    if fw.logits_bytes_per_element_tp is not None:
        per_element = where(asf(tp) > 1, fw.logits_bytes_per_element_tp, per_element)
    return tokens * m.vocab / asf(tp) * per_element


def embedding_activation_bytes(m: ModelSpec, tokens, tp, sp, precision):
    """Embedding output and its dropout mask on the first stage (Korthikanti et al. 2022, §4.3)."""
    e = activation_bytes_per_element(precision)
    drop = 1.0 if m.hidden_dropout > 0 else 0.0
    return tokens * m.hidden * (e + drop) / where(sp, asf(tp), 1.0)
