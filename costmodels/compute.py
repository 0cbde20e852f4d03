"""Time of one transformer layer (and the embedding / output layers) for one micro-batch on one GPU.

Each kernel class is costed as work / achieved rate + a fixed cost per kernel:
  GEMMs         each weight GEMM from its (M, N, K) shape: tile and wave quantisation over the SMs,
                split-K, a K roll-off and the HBM roofline (costmodels/gemm.py), at
                `gemm_efficiency` x peak for a large, well-quantised GEMM;
  attention     FlashAttention FLOP at `attention_efficiency` x peak (Dao 2023, arXiv:2307.08691,
                §4.1: causal masking skips half the blocks), less the head-dim padding of the kernel
                the framework runs, or two batched GEMMs plus the s x s softmax traffic without it;
  elementwise   bytes moved at `hbm_efficiency` x HBM bandwidth (norms, activation, dropout,
                residual adds: the memory-bound ops of Korthikanti et al. 2022, §4, Table 2);
  kernels       `kernel_overhead_s` each (launch, ramp-up and tail of small kernels).
The GPU cannot run faster than the host issues kernels: `host_overhead_s` per kernel (eager
PyTorch), so a phase takes max(GPU time, host time).
Codes: precision 0 fp32 / 1 fp16 / 2 bf16 / 3 fp8; sparsity 0 dense / 1 2:4 / 2 unstructured.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .vec import asf, asv, ceil, clip, floor, lookup, maximum, minimum, where  # noqa: F401

from .attention_schedule import (deterministic_backward_extra_bytes, deterministic_backward_slowdown,
                                 dq_accumulator_copies)
from .comm import all_reduce_time, members_per_domain, overlap_slowdown
from .gemm import gemm_time, on_distinct_rows
from .memory import (SOFTMAX_FALLBACK_BYTES, SOFTMAX_FALLBACK_KERNELS, activation_bytes_per_element,
                     megatron_softmax_falls_back)
from .params import embedding_params, layer_params, output_params
from .types import ClusterSpec, Framework, ModelSpec
from .types import BF16, FP16, FP32, FP8  # named enum codes


@dataclass(frozen=True)
class PhaseTimes:
    """Seconds for one layer (or block) and one micro-batch: each field an array."""

    gemm: np.ndarray
    attention: np.ndarray
    elementwise: np.ndarray
    kernels: np.ndarray           # fixed per-kernel cost
    host: np.ndarray              # host time to issue the phase's kernels
    tp_comm: np.ndarray

    @property
    def gpu(self):
        return self.gemm + self.attention + self.elementwise + self.kernels

    @property
    def busy(self):
        """Wall time of the phase: the GPU's work and the exposed TP collectives, or the host."""
        return maximum(self.gpu + self.tp_comm, self.host)


def gemm_rate(cluster: ClusterSpec, precision):
    """Achieved FLOP/s of large GEMMs: TF32 for fp32 training, fp8 at the measured speed-up over
    bf16 (Transformer Engine keeps some GEMM work in bf16)."""
    g = cluster.gpu
    fp32 = g.peak_flop_per_s.get("tf32") or g.peak_flop_per_s.get("fp32", 0.0)
    half = g.peak_flop_per_s.get("bf16") or g.peak_flop_per_s.get("fp16", 0.0)
    fp16 = g.peak_flop_per_s.get("fp16", half)
    table = np.zeros(4)
    table[[FP32, FP16, BF16, FP8]] = [fp32, fp16, half, half * g.fp8_gemm_speedup]
    return (table * g.gemm_efficiency)[asv(precision)]


def attention_rate(cluster: ClusterSpec, precision, kernel: str = "flash-attention-2"):
    """Fused attention runs in 16-bit (TF32 in fp32 training) even when GEMMs use fp8.
    FlashAttention-2 is built on Ampere's warp-level mma.sync instructions, which leave Hopper at about
    35% of its peak (Shah et al. 2024, arXiv:2407.08608, abstract: it does not use Hopper's new
    instructions) and do not reach Blackwell's either: on a B200 it measures 350-360 TFLOP/s forward at
    head dim 128 (meta-pytorch/tritonbench PR #171) and 330-346 TFLOP/s forward + backward at head dim 64
    (Dao-AILab/flash-attention issue #1589), what it reaches on an H100. So its 16-bit rate is
    capped at `flash_attention_2_peak_flop_per_s` where the GPU file sets one; `native` kernels (cuDNN,
    triton) are built for the GPU's own tensor cores and see its peak."""
    g = cluster.gpu
    half = g.peak_flop_per_s.get("bf16") or g.peak_flop_per_s.get("fp16", 0.0)
    if kernel == "flash-attention-2" and g.flash_attention_2_peak_flop_per_s > 0.0:
        half = min(half, g.flash_attention_2_peak_flop_per_s)
    fp32 = g.peak_flop_per_s.get("tf32") or g.peak_flop_per_s.get("fp32", 0.0)
    return where(asv(precision) == FP32, fp32, half) * g.attention_efficiency


def runs_deterministic_flash_backward(m: ModelSpec, gpu, fw: Framework) -> bool:
    """Whether attention backward runs FlashAttention-2's deterministic kernel: the framework asks for
    determinism (Framework.deterministic_attention) and Transformer Engine refuses its cuDNN attention
    for it, which it does before Hopper (TransformerEngine d0067d0 transformer_engine/pytorch/attention/
    dot_product_attention/utils.py:1555-1566) and on Blackwell with attention dropout
    (transformer_engine/common/fused_attn/fused_attn.cpp:480-488). On Hopper cuDNN runs, and is preferred
    (utils.py:1647-1653). A GPU file without a compute capability is taken as pre-Hopper."""
    if not fw.deterministic_attention:
        return False
    cc = gpu.compute_capability
    if 9.0 <= cc < 10.0:
        return False
    if cc >= 10.0:
        return m.attention_dropout > 0
    return True


def attention_head_dim_share(m: ModelSpec, fw: Framework) -> float:
    """Useful share of a flash kernel's work: the kernel is compiled for a few head dims and runs the
    smallest one >= the model's, padding the rest with zeros. FlashAttention-2 2.6.3 has kernels for
    32, 64, 96, 128, 160, 192, 256 (csrc/flash_attn/src/static_switch.h, HEADDIM_SWITCH), so head dim
    80 runs the 96 kernel; the triton kernel pads to the next power of two (flash_attn/flash_attn_triton.py,
    _flash_attn_forward / _flash_attn_backward: BLOCK_HEADDIM = max(next_power_of_2(d), 16)), so 96
    runs at 96/128. A head dim above every kernel, or a framework with no list (cuDNN fused attention
    takes any multiple of 8), is taken unpadded."""
    d = m.head_dim
    kernel = next((k for k in fw.attention_head_dims if k >= d), d)
    return d / kernel


def sparse_speedup(cluster: ClusterSpec, sparsity):
    """2:4 structured sparsity doubles tensor-core peak for the forward and input-gradient GEMMs
    (NVIDIA A100 whitepaper, 'Fine-grained structured sparsity'); achieved speed-up from the catalog.
    Unstructured sparsity keeps dense kernels on GPUs (background.md §3), so no speed-up."""
    s = asv(sparsity)
    gain = cluster.gpu.sparse_gemm_speedup if cluster.gpu.sparse_2to4 else 1.0
    return where(s == 1, gain, 1.0)


def _kv(m: ModelSpec) -> float:
    return m.hidden * m.num_kv_heads / m.num_heads


def layer_gemm_flop(m: ModelSpec, tokens, tp):
    """Forward FLOP of the layer's weight GEMMs on one TP rank: QKV, projection, MLP
    (Narayanan et al. 2021, eq. 3: 24 b s h^2 for GPT, here with GQA and SwiGLU)."""
    h, f = m.hidden, m.ffn_hidden
    per_token = 2.0 * (h * (h + 2.0 * _kv(m)) + h * h + (3.0 if m.gated_mlp else 2.0) * h * f)
    return tokens * per_token / asf(tp)


def layer_gemm_shapes(m: ModelSpec, tokens, tp):
    """(M, N, K) of the layer's forward weight GEMMs on one TP rank (Shoeybi et al. 2019, §3:
    QKV and fc1 split by columns, projection and fc2 by rows)."""
    h, f, tp = m.hidden, m.ffn_hidden, asf(tp)
    up = (2.0 if m.gated_mlp else 1.0) * f
    return ((tokens, (h + 2.0 * _kv(m)) / tp, h),      # QKV
            (tokens, h, h / tp),                       # attention projection
            (tokens, up / tp, h),                      # fc1 (gate and up together when gated)
            (tokens, h, f / tp))                       # fc2


def layer_gemm_times(m: ModelSpec, gpu, tokens, tp, rate, sparse_speedup=1.0):
    """Forward and backward seconds of the layer's weight GEMMs: forward (M, N, K), input gradient
    (M, K, N) and weight gradient (K, N, M) per GEMM; 2:4 sparsity speeds up the first two. Also the
    weight-gradient seconds of the two column-parallel GEMMs (QKV, fc1), whose input gradients are
    the layer's backward TP collectives (`backward_tp_exposed`)."""
    def times(tokens, tp, rate, speedup):
        fwd = bwd = 0.0
        wgrad = []
        for mm, nn, kk in layer_gemm_shapes(m, tokens, tp):
            w = gemm_time(kk, nn, mm, rate, gpu)
            fwd = fwd + gemm_time(mm, nn, kk, rate * speedup, gpu)
            bwd = bwd + gemm_time(mm, kk, nn, rate * speedup, gpu) + w
            wgrad.append(w)
        return fwd, bwd, wgrad[0], wgrad[2]

    return on_distinct_rows(times, tokens, tp, rate, sparse_speedup)


def backward_tp_exposed(tp_pass, wgrad_qkv, wgrad_fc1, hidden_share, sp):
    """Exposed seconds of a layer's backward TP communication, `tp_pass` seconds when run in order
    (the bytes of two all-reduces of the layer's activations).

    Without sequence parallelism it is the two input-gradient all-reduces of the column-parallel
    linears (QKV, fc1); the row-parallel ones need none. With it, each all-reduce is a reduce-scatter
    of that input gradient plus an all-gather of the row-parallel linear's output gradient (the
    backward of the forward reduce-scatter), half the time each. Megatron issues the input-gradient
    collective asynchronously and computes the same linear's weight gradient meanwhile (Megatron-LM
    d98e8a64dd megatron/core/tensor_parallel/layers.py:683-725; Transformer Engine's Linear likewise),
    so that GEMM hides up to its own duration; the all-gather is synchronous (mappings.py:372-378,
    _ReduceScatterToSequenceParallelRegion.backward -> _gather_along_first_dim) and stays exposed.
    `hidden_share` (Framework.tp_overlap) is the share of the GEMM that hides: 1 where the framework
    issues the collective asynchronously, 0 where everything runs in order."""
    hide = asf(hidden_share)
    sync = where(sp, 0.5 * tp_pass, 0.0)             # the two output-gradient all-gathers
    hideable = (tp_pass - sync) / 2.0                 # each input-gradient collective
    return (sync + maximum(hideable - hide * wgrad_qkv, 0.0)
            + maximum(hideable - hide * wgrad_fc1, 0.0))


def attention_flop(m: ModelSpec, tokens, seq_len, tp, flash):
    """Forward FLOP of QK^T and AV on one TP rank: 4 s h per token (Narayanan et al. 2021, eq. 3);
    FlashAttention with a causal mask computes about half (Dao 2023, §3.1)."""
    causal = where(flash, 0.5, 1.0)
    return 4.0 * tokens * asf(seq_len) * m.hidden * causal / asf(tp)


def layer_elementwise_bytes(m: ModelSpec, tokens, seq_len, tp, sp, flash, precision):
    """Forward bytes of the memory-bound ops on one GPU: norms and residual dropout-adds on the
    h-wide stream (split over TP only with sequence parallelism), the activation function, RoPE
    and QKV layout copies (split over TP), and the s x s score traffic without FlashAttention
    (the tensors of Korthikanti et al. 2022, Table 2, each read and written once)."""
    e = activation_bytes_per_element(precision)
    h, f, kv = m.hidden, m.ffn_hidden, _kv(m)
    drop = 1.0 if m.hidden_dropout > 0 else 0.0
    stream = (10.0 * h) * e + 2.0 * h * drop
    act = where(m.gated_mlp, 3.0 * f, 2.0 * f) * e
    rope = 2.0 * (h + kv) * e if m.position == "rope" else 0.0
    copies = 2.0 * (h + 2.0 * kv) * e
    attn_drop = 1.0 if m.attention_dropout > 0 else 0.0
    scores = m.num_heads * asf(seq_len) * (4.0 * e + attn_drop * (2.0 * e + 1.0))
    tp = asf(tp)
    split = act + rope + copies + where(flash, 0.0, scores)
    return tokens * (where(sp, stream / tp, stream) + split / tp)


def elementwise_backward_passes():
    """Backward bytes of the memory-bound ops per forward byte: a forward op reads its input and
    writes its output (2 tensors, what `layer_elementwise_bytes` counts); its backward reads the
    saved input and the output gradient and writes the input gradient (3 tensors): layer norm
    (apex / TE fused layer-norm backward: x, dy -> dx), GeLU / SwiGLU (x, dy -> dx), softmax
    (y, dy -> dx), dropout (mask, dy -> dx). So 3/2 of the forward traffic."""
    return 1.5


def grad_accumulation_bytes(n_params, fw: Framework, tp, bytes_per_param=None):
    """Bytes moved per micro-batch to accumulate the weight gradients of `n_params` parameters (a
    layer's, the embedding's, the output layer's; each split 1/tp) outside the weight-gradient GEMM:
    `bytes_per_param` (default fw.grad_accumulation_bytes: a read of the new gradient and of the
    accumulator, a write of the accumulator; 0 where the GEMM accumulates in its epilogue, Megatron's
    gradient accumulation fusion). The layout decides the bytes (layout_time.grad_accumulation_bytes_per_param:
    none under ZeRO-3, more under DeepSpeed's BF16_Optimizer)."""
    b = fw.grad_accumulation_bytes if bytes_per_param is None else bytes_per_param
    return n_params * b / asf(tp)


# Fill kernels per layer and micro-batch under PyTorch's deterministic mode (`deterministic_fill_bytes`):
# forward the 7 outputs below plus 5 small ones (2 norms' mean and rstd, the softmax statistics),
# backward the 9 input gradients and 4 weight gradients plus 8 small ones (2 norms' dgamma and dbeta,
# 4 bias gradients); 3 more forward for the GQA copies of q, k and v, and 4 more each way where
# flash-attn 2 runs (its layout copies, its output and dout copies, dK / dV over all heads, dQ accumulator).
DETERMINISTIC_FILL_KERNELS = (12.0, 21.0)
DETERMINISTIC_FILL_KERNELS_GQA = 3.0
DETERMINISTIC_FILL_KERNELS_FLASH2 = (4.0, 4.0)


def _gqa_copies(m: ModelSpec) -> bool:
    """Whether q, k and v are copied out of the fused QKV before attention (GQA / MQA layouts)."""
    return m.num_kv_heads < m.num_heads


def deterministic_fill_kernels(m: ModelSpec, flash2=False):
    """Fill kernels per layer and micro-batch, (forward, backward) (DETERMINISTIC_FILL_KERNELS*)."""
    fa2 = where(flash2, 1.0, 0.0)
    gqa = DETERMINISTIC_FILL_KERNELS_GQA if _gqa_copies(m) else 0.0
    return (DETERMINISTIC_FILL_KERNELS[0] + gqa + fa2 * DETERMINISTIC_FILL_KERNELS_FLASH2[0],
            DETERMINISTIC_FILL_KERNELS[1] + fa2 * DETERMINISTIC_FILL_KERNELS_FLASH2[1])


def deterministic_fill_bytes(m: ModelSpec, tokens, tp, precision, flash2=False, dq_splits=1.0):
    """HBM bytes PyTorch writes into fresh allocations of one layer and micro-batch under
    `torch.use_deterministic_algorithms(True)`, (forward, backward). With it every CUDA `at::empty`
    / `empty_like` / `empty_strided` (and so `zeros`, `clone`, `.contiguous()`) is filled with NaN
    before use (`fill_uninitialized_memory`, on by default; aten/src/ATen/native/cuda/TensorFactories.cu
    `empty_cuda`, `empty_strided_cuda` -> `fill_empty_deterministic_`; the PyTorch documentation of
    torch.utils.deterministic.fill_uninitialized_memory: "detrimental to performance"); Megatron's
    --deterministic-mode turns it on and leaves the fill on (Megatron-LM d98e8a64dd
    megatron/training/determinism.py:158). Structured ATen ops and torch.compile'd kernels (Megatron's
    bias-GeLU and bias-dropout-add, `jit_fuser`) allocate without it (torchgen/dest/
    register_dispatch_key.py gen_empty_impl_names: at::detail::empty_cuda), so what is counted is what
    Transformer Engine and the attention kernels allocate (at::empty / torch::empty:
    transformer_engine/pytorch/csrc/common.cpp allocateTorchTensor / allocateSpace, extensions/gemm.cpp,
    normalization.cpp, attention.cpp; Megatron-Core's TE layer spec, no sequence parallelism).
    16-bit elements per token: forward the two norm outputs (h each), QKV (h + 2 kv) / tp, attention
    h / tp, the projection's and fc2's partial sums (h each) and fc1 (f, 2f gated) / tp; with GQA the
    query reshape and TE's contiguous K and V copies (h + 2 kv) / tp (Megatron-LM attention.py
    get_query_key_value_tensors; TE dot_product_attention/utils.py get_qkv_layout). Backward the input
    gradients of the same GEMMs, norms and attention, 4 h + (2 h + 2 kv + f) / tp, and the weight
    gradients TE allocates per micro-batch without gradient-accumulation fusion (the layer's 16-bit
    parameters / tp; TE module/linear.py: out=None unless fuse_wgrad_accumulation). Where flash-attn 2
    runs (`flash2`): forward TE's contiguous q, k, v and output copies (2 h + 2 kv) / tp (TE
    backends.py), backward the contiguous dout h / tp, dK and dV over all query heads 2 h / tp
    (flash_api.cpp mha_bwd, dk_expanded / dv_expanded) and the fp32 dQ accumulator, `dq_splits` copies
    of h / tp (torch::zeros: filled, then zeroed). Counted, not fitted; small tensors (norm statistics,
    bias gradients) are left out of the bytes and counted as kernels (DETERMINISTIC_FILL_KERNELS)."""
    e = activation_bytes_per_element(precision)
    h, f, kv = m.hidden, m.ffn_hidden, _kv(m)
    f1 = where(m.gated_mlp, 2.0 * f, f)
    tp = asf(tp)
    gqa = (h + 2.0 * kv) if _gqa_copies(m) else 0.0
    fa2 = where(flash2, 1.0, 0.0)
    fwd = tokens * e * (4.0 * h + (2.0 * h + 2.0 * kv + f1 + gqa + fa2 * (2.0 * h + 2.0 * kv)) / tp)
    bwd = (tokens * e * (4.0 * h + (2.0 * h + 2.0 * kv + f + fa2 * 3.0 * h) / tp)
           + fa2 * tokens * asf(dq_splits) * h / tp * 4.0 + layer_params(m) * e / tp)
    return fwd, bwd


def _kernel_counts(m: ModelSpec, flash):
    """Kernels one layer issues in eager Megatron (ParallelTransformerLayer, as in Megatron-LM 2021-22
    and Megatron-DeepSpeed; counted, not fitted). Forward: 2 norms, 4 weight GEMMs (biases folded
    into addmm or the fused bias-GeLU / bias-dropout-add), 2 residual bias-dropout-adds (+1 random
    mask each with dropout), the activation (gated: silu and mul), attention as 1 fused kernel + 2
    layout copies, or 3 transposes, QK^T, fused softmax, AV and 1 permute (+2 for attention dropout),
    RoPE on q and k (4 eager ops each). Backward: 2 GEMMs per weight GEMM, 2 per norm (input grad,
    weight-grad reduction), 1 per elementwise op, flash backward 1 (+ its dQ accumulation 1), 1 bias
    reduction per bias, 1 gradient-accumulation add per parameter tensor."""
    drop = 1.0 if m.hidden_dropout > 0 else 0.0
    attn_drop = 1.0 if m.attention_dropout > 0 else 0.0
    rope = 8.0 if m.position == "rope" else 0.0
    act = 2.0 if m.gated_mlp else 1.0
    attn_fwd = where(flash, 3.0, 7.0 + 2.0 * attn_drop)
    elementwise_fwd = 2.0 + 2.0 + 2.0 * drop + act + rope
    fwd = 4.0 + elementwise_fwd + attn_fwd
    params = 4.0 + (2.0 if m.norm == "layernorm" else 1.0) * 2.0 + (4.0 if m.bias else 0.0)
    biases = 4.0 if m.bias else 0.0
    attn_bwd = where(flash, 4.0, 7.0 + 2.0 * attn_drop)
    bwd = 8.0 + 2.0 * 2.0 + (elementwise_fwd - 2.0) + attn_bwd + biases + params
    return fwd, bwd


def zero3_hooked_modules(flash):
    """Submodules one Megatron ParallelTransformerLayer runs per pass, each of which DeepSpeed's ZeRO-3
    hooks before and after it runs, forward and backward (DeepSpeed 0.16.2 runtime/zero/parameter_offload.py
    _register_hooks_recursively: every submodule): the layer, its 2 norms, the attention with its QKV and
    output Linear and its core (FlashSelfAttention; without flash, CoreAttention with its
    FusedScaleMaskSoftmax and Dropout modules), the MLP with its 2 Linear (Megatron-DeepSpeed 6acc370a
    megatron/model/transformer.py ParallelTransformerLayer, ParallelAttention, CoreAttention, ParallelMLP)."""
    return where(flash, 10.0, 12.0)


def zero3_hooked_model_modules(m: ModelSpec):
    """The same outside the layers, once per micro-batch: GPTModel, its TransformerLanguageModel, the
    Embedding with its word embeddings, position module (learned positions, or RotaryEmbedding) and
    dropout, the ParallelTransformer, its final norm, and an untied output layer
    (megatron/model/gpt_model.py, language_model.py)."""
    return 8.0 + (0.0 if m.tied_embeddings else 1.0)


def tp_exposed_share(tp, pipelined):
    """Share of a TP collective left exposed when it is pipelined with its GEMM (Megatron-Core
    --tp-comm-overlap, Transformer Engine userbuffers): the GEMM is split into tp chunks and each
    chunk's all-gather / reduce-scatter step runs beside another chunk's GEMM, so one of the tp steps
    stays on the critical path (Wang et al. 2023, "Overlap communication with dependent computation
    via decomposition", ASPLOS '23, §3; TE pytorch/module/base.py initialize_ub, ring-exchange
    split-pipelined AG and RS). Not pipelined: all of it."""
    return where(pipelined, 1.0 / asf(tp), 1.0)


def layer_phases(m: ModelSpec, cluster: ClusterSpec, fw: Framework, *, tokens, seq_len, tp, sp,
                 flash, precision, sparsity, tp_pipelined=False, grad_bytes_per_param=None):
    """Forward, backward and attention-core-only (selective recompute) phases of one layer."""
    gpu = cluster.gpu
    rate = gemm_rate(cluster, precision)
    speed = sparse_speedup(cluster, sparsity)
    gemm_f = layer_gemm_flop(m, tokens, tp)
    attn_f = attention_flop(m, tokens, seq_len, tp, flash)
    elem = layer_elementwise_bytes(m, tokens, seq_len, tp, sp, flash, precision) * fw.elementwise_traffic
    bw = gpu.hbm_bytes_per_s * gpu.hbm_efficiency
    # Non-flash attention runs as batched GEMMs at GEMM efficiency; flash at its own.
    # (fp32 training runs them at the fp16 rate where the GPU has one, else at its fp32 rate.)
    batched = gemm_rate(cluster, where(asv(precision) == FP32, FP16, precision))
    attn_rate = where(flash, attention_rate(cluster, precision, fw.attention_kernel) * fw.attention_speedup
                      * attention_head_dim_share(m, fw),
                      where(batched > 0, batched, gemm_rate(cluster, precision)))
    n_fwd, n_bwd = _kernel_counts(m, flash)
    # Megatron's fused softmax unavailable for this shape: eager fp32 ops instead (memory.py)
    fallback = megatron_softmax_falls_back(m, tokens, seq_len, tp, flash, precision, fw.fused_softmax_max_seq)
    scores = tokens * m.num_heads * asf(seq_len) / asf(tp)
    fb_fwd = where(fallback, SOFTMAX_FALLBACK_BYTES[0] * scores, 0.0)
    fb_bwd = where(fallback, SOFTMAX_FALLBACK_BYTES[1] * scores, 0.0)
    n_fwd = n_fwd + where(fallback, SOFTMAX_FALLBACK_KERNELS, 0.0)
    n_bwd = n_bwd + where(fallback, SOFTMAX_FALLBACK_KERNELS, 0.0)
    # TP: two all-reduces (or reduce-scatter + all-gather with SP, same bytes) per layer pass
    # (Shoeybi et al. 2019, §3, Fig. 4; Korthikanti et al. 2022, §4.2.2).
    e = activation_bytes_per_element(precision)
    k_tp = members_per_domain(tp, 1, cluster.nvlink_domain)
    tp_pass = 2.0 * all_reduce_time(tokens * m.hidden * e, tp, k_tp, cluster)
    exposed = tp_exposed_share(tp, tp_pipelined)
    host = fw.host_overhead_s
    gemm_fwd, gemm_bwd, wgrad_qkv, wgrad_fc1 = layer_gemm_times(m, gpu, tokens, tp, rate, speed)
    # Backward: pipelined (userbuffers) leaves 1/tp exposed; otherwise what the weight-gradient
    # GEMMs do not hide (`backward_tp_exposed`), plus the slowdown NCCL's SMs cause to those GEMMs
    # while the rest hides (comm.overlap_slowdown). The smaller of the two.
    in_order = backward_tp_exposed(tp_pass, wgrad_qkv, wgrad_fc1, fw.tp_overlap, sp)
    bwd_tp = minimum(tp_pass * exposed, in_order + overlap_slowdown(tp_pass - in_order, cluster))
    # PyTorch's deterministic mode fills every fresh allocation (`deterministic_fill_bytes`); where
    # flash-attn 2 runs the deterministic backward (A100; Blackwell with dropout), its copies too.
    flash2 = runs_deterministic_flash_backward(m, gpu, fw)
    if flash2 or fw.fills_uninitialized_memory:
        batch_heads = maximum(tokens / asf(seq_len), 1.0) * m.num_heads / asf(tp)
    fill_fwd, fill_bwd = 0.0, 0.0
    if fw.fills_uninitialized_memory:
        fa2 = flash & flash2
        fill_fwd, fill_bwd = deterministic_fill_bytes(m, tokens, tp, precision, fa2,
                                                      dq_accumulator_copies(batch_heads, gpu.num_sms))
        k_fwd, k_bwd = deterministic_fill_kernels(m, fa2)
        n_fwd, n_bwd = n_fwd + k_fwd, n_bwd + k_bwd
    fwd = PhaseTimes(gemm=gemm_fwd, attention=attn_f / attn_rate, elementwise=(elem + fb_fwd + fill_fwd) / bw,
                     kernels=n_fwd * gpu.kernel_overhead_s, host=(n_fwd + 2) * host, tp_comm=tp_pass * exposed)
    # Sequence parallelism saves the sharded layer-norm outputs, so backward all-gathers them again for
    # the weight-gradient GEMMs (Korthikanti et al. 2022, §4.2.2); Megatron issues that all-gather
    # asynchronously and runs the input-gradient GEMM meanwhile (tensor_parallel/layers.py,
    # LinearWithGradAccumulationAndAsyncCommunication.backward), so it is not charged.
    # Backward: input- and weight-gradient GEMMs (2x forward; 2:4 speeds up only the former),
    # attention backward 2.5x its forward with FlashAttention (recomputes QK^T; Dao 2023, §3.1.2), 2x
    # without; elementwise ops read the saved input and the output gradient and write one gradient
    # (`elementwise_backward_passes`).
    # FlashAttention-2's deterministic backward packs the SMs less evenly and sums per-CTA dQ copies
    # (costmodels/attention_schedule.py); the layer's sequences x heads on this GPU set its grid.
    det_slow, det_bytes = 1.0, 0.0
    if flash2:
        det_slow = where(flash, deterministic_backward_slowdown(batch_heads, seq_len, gpu.num_sms), 1.0)
        det_bytes = where(flash, deterministic_backward_extra_bytes(batch_heads, seq_len, m.head_dim,
                                                                    gpu.num_sms), 0.0)
    bwd = PhaseTimes(gemm=gemm_bwd,
                     attention=attn_f * where(flash, 2.5, 2.0) * det_slow / attn_rate,
                     elementwise=(elementwise_backward_passes() * elem + fb_bwd + det_bytes + fill_bwd
                                  + grad_accumulation_bytes(layer_params(m), fw, tp, grad_bytes_per_param)) / bw,
                     kernels=n_bwd * gpu.kernel_overhead_s,
                     host=(n_bwd + 2) * host,
                     tp_comm=bwd_tp)
    core_elem = where(flash, 0.0, tokens * m.num_heads * asf(seq_len) * 4.0 * e
                         / asf(tp)) * fw.elementwise_traffic + fb_fwd       # selective recompute reruns the softmax
    core_kernels = where(flash, 1.0, 3.0) + where(fallback, SOFTMAX_FALLBACK_KERNELS, 0.0)
    core = PhaseTimes(gemm=0.0 * gemm_f, attention=attn_f / attn_rate, elementwise=core_elem / bw,
                      kernels=core_kernels * gpu.kernel_overhead_s,
                      host=core_kernels * host, tp_comm=0.0 * gemm_f)
    return fwd, bwd, core


def output_layer_phases(m: ModelSpec, cluster: ClusterSpec, fw: Framework, *, tokens, tp, sp, precision,
                        grad_bytes_per_param=None):
    """Final norm, output projection 2 b s h V / t (Narayanan et al. 2021, eq. 3, V/16lh term) and
    the vocab-parallel cross entropy over fp32 logits (read/write passes over b s V / t elements)."""
    gpu = cluster.gpu
    rate = gemm_rate(cluster, where(asv(precision) == FP8, BF16, precision))  # Megatron keeps the output layer in bf16
    e = activation_bytes_per_element(precision)
    flop = 2.0 * tokens * m.hidden * m.vocab / asf(tp)
    logits = tokens * m.vocab / asf(tp)
    bw = gpu.hbm_bytes_per_s * gpu.hbm_efficiency
    fwd_bytes = logits * (e + 12.0) + tokens * m.hidden * 2.0 * e
    bwd_bytes = (logits * (e + 8.0) + tokens * m.hidden * 3.0 * e
                 + grad_accumulation_bytes(output_params(m), fw, tp, grad_bytes_per_param))
    zero = 0.0 * flop
    n_v = m.vocab / asf(tp)
    gemm_fwd, gemm_bwd = on_distinct_rows(
        lambda t, nv, r: (gemm_time(t, nv, m.hidden, r, gpu),
                          gemm_time(t, m.hidden, nv, r, gpu) + gemm_time(m.hidden, nv, t, r, gpu)),
        tokens, n_v, rate)
    fwd = PhaseTimes(gemm=gemm_fwd + zero, attention=zero,
                     elementwise=fwd_bytes / bw,
                     kernels=6.0 * gpu.kernel_overhead_s + zero, host=8.0 * fw.host_overhead_s + zero,
                     tp_comm=zero)
    bwd = PhaseTimes(gemm=gemm_bwd + zero, attention=zero, elementwise=bwd_bytes / bw,
                     kernels=6.0 * gpu.kernel_overhead_s + zero, host=8.0 * fw.host_overhead_s + zero,
                     tp_comm=zero)
    return fwd, bwd


def embedding_phases(m: ModelSpec, cluster: ClusterSpec, fw: Framework, *, tokens, tp, sp, precision,
                     grad_bytes_per_param=None):
    """Embedding lookup (+ positions) and its gradient scatter: memory-bound, b s h elements;
    the vocab-parallel lookup ends in an all-reduce over TP (Shoeybi et al. 2019, §3)."""
    gpu = cluster.gpu
    e = activation_bytes_per_element(precision)
    nbytes = tokens * m.hidden * e
    bw = gpu.hbm_bytes_per_s * gpu.hbm_efficiency
    k_tp = members_per_domain(tp, 1, cluster.nvlink_domain)
    comm = all_reduce_time(nbytes, tp, k_tp, cluster)
    zero = 0.0 * nbytes
    fwd = PhaseTimes(gemm=zero, attention=zero, elementwise=3.0 * nbytes / bw,
                     kernels=3.0 * gpu.kernel_overhead_s + zero, host=4.0 * fw.host_overhead_s + zero,
                     tp_comm=comm)
    grads = grad_accumulation_bytes(embedding_params(m), fw, tp, grad_bytes_per_param)
    bwd = PhaseTimes(gemm=zero, attention=zero, elementwise=(3.0 * nbytes + grads) / bw,
                     kernels=3.0 * gpu.kernel_overhead_s + zero, host=4.0 * fw.host_overhead_s + zero,
                     tp_comm=zero)
    return fwd, bwd
