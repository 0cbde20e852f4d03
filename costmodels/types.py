"""Core types: small frozen dataclasses in SI units, and the structure-of-arrays twin of `Layout`.

Symbols used across the cost models (Narayanan et al. 2021; Korthikanti et al. 2022):
  L layers, h hidden, f FFN hidden, a query heads, g key/value heads, V vocabulary,
  s sequence length, b micro-batch, t tensor-parallel, p pipeline-parallel, d data-parallel,
  c context-parallel, v virtual stages per pipeline rank, m micro-batches per step.
"""
from __future__ import annotations

import datetime
from dataclasses import dataclass, field, fields, replace
from enum import Enum
from typing import Mapping, get_type_hints

import numpy as np

from .errors import SpecError, leading_zero_hint
from .units import currency_problem

MAX_LAYERS = 10_000                # transformer layers of a model (real ones: up to a few hundred)


class _Coded(str, Enum):
    """A string enum with a fixed integer code (its class's `_CODES` table, not its declaration order),
    so numpy arrays can carry it and reordering the members changes no estimate."""

    @property
    def code(self) -> int:
        return type(self)._CODES[self.value]

    @classmethod
    def parse(cls, value) -> "_Coded":
        if isinstance(value, cls):
            return value
        text = str(value).strip().lower()
        for member in cls:
            if text == member.value or text in getattr(member, "_aliases", ()):
                return member
        aliases = cls._ALIASES.get(text) if hasattr(cls, "_ALIASES") else None
        if aliases is not None:
            return cls(aliases)
        known = ", ".join(m.value for m in cls)
        raise SpecError(f"unknown {cls.__name__.lower()} '{value}': use one of {known}")

    @classmethod
    def from_code(cls, code: int) -> "_Coded":
        for value, c in cls._CODES.items():
            if c == int(code):
                return cls(value)
        raise SpecError(f"unknown {cls.__name__.lower()} code {code!r}")


class Precision(_Coded):
    FP32 = "fp32"
    FP16 = "fp16"
    BF16 = "bf16"
    FP8 = "fp8"


Precision._CODES = {"fp32": 0, "fp16": 1, "bf16": 2, "fp8": 3}
Precision._ALIASES = {"float32": "fp32", "float16": "fp16", "half": "fp16", "bfloat16": "bf16",
                      "fp8-hybrid": "fp8", "fp8_e4m3": "fp8"}


class Recompute(_Coded):
    NONE = "none"
    SELECTIVE = "selective"
    FULL = "full"


Recompute._CODES = {"none": 0, "selective": 1, "full": 2}
Recompute._ALIASES = {"false": "none", "off": "none", "no": "none", "true": "full",
                      "checkpoint-activations": "full"}


class Offload(_Coded):
    NONE = "none"
    CPU = "cpu"
    NVME = "nvme"


Offload._CODES = {"none": 0, "cpu": 1, "nvme": 2}
Offload._ALIASES = {"false": "none", "off": "none", "no": "none"}


class Sparsity(_Coded):
    DENSE = "dense"
    TWO_FOUR = "2:4"
    UNSTRUCTURED = "unstructured"


Sparsity._CODES = {"dense": 0, "2:4": 1, "unstructured": 2}
Sparsity._ALIASES = {"none": "dense", "false": "dense", "off": "dense", "no": "dense", "2to4": "2:4",
                     "structured": "2:4"}


class GradComm(_Coded):
    """How data-parallel gradients (and ZeRO-3 weights) travel."""

    FP32 = "fp32"          # fp32 all-reduce / reduce-scatter (DeepSpeed default for bf16)
    BF16 = "bf16"          # communication_data_type bf16 (fp16 for fp16 training)
    ZEROPP = "zeropp"      # ZeRO++: int8 weights all-gather, int4 gradient reduce-scatter
    ONEBIT = "1bit"        # 1-bit Adam / 0-1 Adam error-compensated compression


GradComm._CODES = {"fp32": 0, "bf16": 1, "zeropp": 2, "1bit": 3}

class ZeroStage(_Coded):
    """ZeRO stage: what data parallelism shards. An integer in case files, the CLI and plan.json
    (`Layout.zero`); its code is the stage number, so codes are ordered (ZERO2 and above shard the
    gradients, ZERO3 the weights too)."""

    NONE = "0"             # plain data parallelism: every rank holds everything
    OPTIMIZER = "1"        # optimizer state sharded
    GRADIENTS = "2"        # ... and gradients
    WEIGHTS = "3"          # ... and weights (gathered per layer when used)


ZeroStage._CODES = {"0": 0, "1": 1, "2": 2, "3": 3}

# Named codes for the vectorised cost model (costmodels/ compares arrays of codes against these).
FP32, FP16, BF16, FP8 = (Precision._CODES[v] for v in ("fp32", "fp16", "bf16", "fp8"))
RC_NONE, RC_SELECTIVE, RC_FULL = (Recompute._CODES[v] for v in ("none", "selective", "full"))
OFF_NONE, OFF_CPU, OFF_NVME = (Offload._CODES[v] for v in ("none", "cpu", "nvme"))
GC_FP32, GC_16BIT, GC_ZEROPP, GC_1BIT = (GradComm._CODES[v] for v in ("fp32", "bf16", "zeropp", "1bit"))
ZERO0, ZERO1, ZERO2, ZERO3 = (ZeroStage._CODES[v] for v in ("0", "1", "2", "3"))


GradComm._ALIASES = {"fp16": "bf16", "half": "bf16", "zero++": "zeropp", "onebit": "1bit",
                     "1-bit": "1bit"}


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A decoder-only transformer. Sizes are counts, `max_seq_len` in tokens."""

    name: str
    num_layers: int
    hidden: int
    ffn_hidden: int
    num_heads: int
    num_kv_heads: int
    vocab: int
    max_seq_len: int
    gated_mlp: bool = False            # SwiGLU: three h*f matrices instead of two
    tied_embeddings: bool = False
    norm: str = "layernorm"            # layernorm | rmsnorm
    position: str = "learned"          # learned | rope | alibi
    bias: bool = True                  # biases in the linear layers
    hidden_dropout: float = 0.0
    attention_dropout: float = 0.0
    rope_theta: float = 10000.0        # RoPE base (Llama 3: 500000)
    source: str = ""

    def __post_init__(self):
        if not isinstance(self.name, str) or "\0" in self.name or not self.name.strip() or len(self.name) > 200:
            hint = ("; YAML read it as a number or a date: write the name in quotes"
                    if isinstance(self.name, (int, float, datetime.date)) and not isinstance(self.name, bool) else "")
            raise SpecError(f"model name: expected a non-empty string of at most 200 characters without NUL, "
                            f"got {str(self.name)[:40]!r}{hint}")
        for name in ("gated_mlp", "tied_embeddings", "bias"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise SpecError(f"model '{self.name}': {name} must be true or false, got {getattr(self, name)!r}")
        for name in ("hidden_dropout", "attention_dropout", "rope_theta"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
                    or not np.isfinite(value):
                raise SpecError(f"model '{self.name}': {name} must be a finite number, got {value!r}")
        if not 1.0 <= self.rope_theta <= 1e12:
            raise SpecError(f"model '{self.name}': rope_theta must be between 1 and 10^12 (RoPE bases of real "
                            f"models are 10^4-10^8), got {self.rope_theta!r}")
        for name in ("num_layers", "hidden", "ffn_hidden", "num_heads", "num_kv_heads", "vocab",
                     "max_seq_len"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
                raise SpecError(f"model '{self.name}': {name} must be a positive integer, got {value!r}{leading_zero_hint(value)}")
            if value > 10**9:
                raise SpecError(f"model '{self.name}': {name} = {value} is beyond any real model (max 10^9)")
        if self.num_layers > MAX_LAYERS:
            # the deepest published transformers have a few hundred layers; a search over 10^9 of them ran
            # for minutes before it said that none fits
            raise SpecError(f"model '{self.name}': num_layers = {self.num_layers} is beyond any real model "
                            f"(max {MAX_LAYERS:,})")
        if self.hidden % self.num_heads:
            raise SpecError(f"model '{self.name}': hidden {self.hidden} is not divisible by "
                            f"{self.num_heads} heads; pick heads that divide hidden")
        if self.num_heads % self.num_kv_heads:
            raise SpecError(f"model '{self.name}': {self.num_heads} heads are not divisible by "
                            f"{self.num_kv_heads} key/value heads")
        if self.norm not in ("layernorm", "rmsnorm"):
            raise SpecError(f"model '{self.name}': norm must be layernorm or rmsnorm, got {self.norm!r}")
        if self.position not in ("learned", "rope", "alibi"):
            raise SpecError(f"model '{self.name}': position must be learned, rope or alibi")
        for name in ("hidden_dropout", "attention_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise SpecError(f"model '{self.name}': {name} must be in [0, 1)")

    @property
    def head_dim(self) -> int:
        return self.hidden // self.num_heads


@dataclass(frozen=True, slots=True)
class GPU:
    """One accelerator: data-sheet peaks plus the efficiency constants fitted for it."""

    name: str
    hbm_bytes: float
    hbm_bytes_per_s: float
    peak_flop_per_s: Mapping[str, float]       # dense peak per precision: fp32, tf32, fp16, bf16, fp8
    sparse_2to4: bool                          # tensor cores double throughput for 2:4 weights
    nvlink_bytes_per_s: float                  # per GPU, one direction
    nvlink_domain: int                         # GPUs reachable over NVLink
    network_bytes_per_s: float                 # per GPU NIC, one direction (typical system)
    pcie_bytes_per_s: float                    # per GPU to host, one direction
    gemm_efficiency: float                     # best sustained fraction of peak for large GEMMs
    attention_efficiency: float                # fused/flash attention kernels, fraction of peak
    hbm_efficiency: float                      # achieved fraction of HBM bandwidth, streaming kernels
    kernel_overhead_s: float                   # fixed cost per kernel (launch, ramp-up, tail wave)
    fp8_gemm_speedup: float = 1.0              # achieved fp8/bf16 GEMM speed ratio (< peak ratio)
    sparse_gemm_speedup: float = 1.0           # achieved 2:4-sparse/dense GEMM speed ratio
    num_sms: int = 108                         # streaming multiprocessors (data sheet): GEMM wave quantisation
    gemm_tile_intensity: float = 16.0          # tensor FLOP/clk/SM over shared-memory B/clk/SM (costmodels/gemm.py)
    # The 16-bit peak FlashAttention-2's kernels can use: they are built on Ampere's warp-level mma.sync
    # instructions, which Blackwell runs at about Hopper's rate, not at its own tensor-core peak.
    # 0: the GPU's own peak (Ampere, Hopper).
    flash_attention_2_peak_flop_per_s: float = 0.0
    # CUDA compute capability (8.0 Ampere, 9.0 Hopper, 10.0 Blackwell; data sheet): which attention
    # kernels a framework may run here (compute.runs_deterministic_flash_backward). 0: not stated.
    compute_capability: float = 0.0
    source: str = ""

    def supports(self, precision: "Precision") -> bool:
        return self.peak_flop_per_s.get(precision.value, 0.0) > 0.0

    @property
    def supports_flash(self) -> bool:
        """FlashAttention runs here: it needs an Ampere-or-newer GPU, which the catalog tells by a bf16
        tensor-core peak. The one place the search space, the rules and the spec defaults ask."""
        return self.peak_flop_per_s.get("bf16", 0.0) > 0.0

    def peak(self, precision: "Precision") -> float:
        key = "tf32" if precision is Precision.FP32 and self.peak_flop_per_s.get("tf32") else precision.value
        return float(self.peak_flop_per_s.get(key, 0.0))


# FlashAttention-2 has kernels for head dims up to 256 and refuses larger ones ("FlashAttention forward
# only supports head dimension at most 256": Dao-AILab/flash-attention csrc/flash_attn/flash_api.cpp,
# mha_fwd / mha_bwd TORCH_CHECK); PyTorch's flash SDPA backend has the same limit.
MAX_FLASH_HEAD_DIM = 256


def flash_attention_runs(model: "ModelSpec", gpu: "GPU") -> bool:
    """FlashAttention can train this model on this GPU: an Ampere-or-newer GPU and a head dim the
    kernels have (at most MAX_FLASH_HEAD_DIM)."""
    return gpu.supports_flash and model.head_dim <= MAX_FLASH_HEAD_DIM


# The largest "node" a cluster spec may name: one NVLink rack of 72 GPUs (GB200 NVL72) treated as a node.
# Servers hold 4-16 GPUs (GB200 compute tray 4, DGX / HGX 8, DGX-2 16).
MAX_GPUS_PER_NODE = 72


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    """GPUs and the links between them; per-GPU bandwidths are one direction."""

    gpu: GPU
    num_gpus: int
    gpus_per_node: int
    nvlink_domain: int                 # GPUs per NVLink domain (a node, or an NVL72 rack)
    nvlink_bytes_per_s: float
    network_bytes_per_s: float         # per GPU
    nvlink_efficiency: float = 0.8     # achieved NCCL bus bandwidth / link rate inside the domain
    network_efficiency: float = 0.85   # achieved bus bandwidth / NIC line rate
    nvlink_latency_s: float = 5e-6     # per-hop latency inside the domain
    collective_latency_s: float = 0.0  # per NCCL collective call: launch and pipeline fill
    network_latency_s: float = 10e-6   # per-hop latency over InfiniBand / RoCE
    pcie_bytes_per_s: float = 25e9
    host_memory_bytes: float = 1024 * 2**30       # per node
    nvme_bytes: float = 0.0                       # per node
    nvme_bytes_per_s: float = 0.0                 # per node, read+write aggregate
    cpu_adam_params_per_s: float = 1.0e9          # per node, DeepSpeedCPUAdam throughput
    price_per_gpu_hour: float = 0.0
    price_currency: str = ""                      # of the price, as written ('' when not stated)
    name: str = ""

    def __post_init__(self):
        if self.num_gpus <= 0 or self.gpus_per_node <= 0:
            raise SpecError("cluster: num_gpus and gpus_per_node must be positive")
        problem = currency_problem(self.price_currency)     # it is printed into report.md and plan.json
        if problem:
            raise SpecError(f"cluster price_currency: {problem}")
        if self.gpus_per_node > MAX_GPUS_PER_NODE:
            raise SpecError(f"cluster: gpus_per_node {self.gpus_per_node} is more GPUs than one host holds (at most "
                            f"{MAX_GPUS_PER_NODE}, a GB200 NVL72 rack counted as one node); give the GPUs per "
                            f"server, e.g. 8 for a DGX / HGX")
        if self.num_gpus > 10_000_000:
            raise SpecError(f"cluster: {self.num_gpus} GPUs is beyond any real cluster (max 10^7)")
        if self.num_gpus > self.gpus_per_node and self.num_gpus % self.gpus_per_node:
            raise SpecError(f"cluster: {self.num_gpus} GPUs is not a whole number of "
                            f"{self.gpus_per_node}-GPU nodes")
        if self.nvlink_domain <= 0:
            raise SpecError("cluster: nvlink_domain must be positive")

    @property
    def num_nodes(self) -> int:
        return max(1, -(-self.num_gpus // self.gpus_per_node))


@dataclass(frozen=True, slots=True)
class Framework:
    """How a training framework behaves where the cost depends on its implementation: a *cost profile*
    (catalog frameworks/*.yaml). The rules a search follows are a separate *rules profile*
    (search_spaces/frameworks.py RulesProfile), which names the cost profile it is scored with."""

    name: str
    dp_overlap: float                  # share of the DP gradient reduction hidden behind backward (ZeRO >= 1)
    dp_overlap_zero0: float            # same for plain data parallelism (ZeRO-0)
    dp_overlap_pipelined: float        # same, when pipeline parallelism is used
    tp_overlap: float                  # share of a weight-gradient GEMM that hides its backward TP collective
    pp_scatter_gather: bool            # pipeline sends split over the TP ranks and all-gathered on receipt
    pp_overlap: float                  # share of interleaved (vpp > 1) pipeline sends hidden behind compute
    attention_speedup: float           # fused-attention kernel speed relative to FlashAttention-2
    context_parallel: str              # "ulysses" (all-to-all over heads), "ring" (K/V passed around) or
                                       # "ring_allgather" (PyTorch's: K/V all-gathered, fp32 gradients passed around)
    offload_overlap: float             # share of CPU/NVMe parameter traffic hidden behind compute
    zero3_gather_efficiency: float     # achieved / ideal bandwidth of ZeRO-3 parameter gathers
    zero3_overlap: float               # share of ZeRO-3 gathers hidden behind compute
    param_gather_overlap: float        # share of the ZeRO-1/2 weight all-gather hidden (next forward)
    zero3_live_layers: float           # ZeRO-3 / FSDP: layers of gathered weights alive at once
    zero3_live_params: float           # ... capped at this many parameters (DeepSpeed max_live_parameters)
    grad_buffer_follows_comm: bool     # 16-bit gradient buffer when gradients are reduced in 16 bits
    saved_activation_factor: float     # saved activations relative to eager PyTorch (compilers recompute)
    fp8_saved_input_bytes: float       # bytes per saved GEMM input under fp8 (1: Transformer Engine)
    iteration_overhead_s: float        # per optimizer step: logging, grad-norm, loss-scale checks
    microbatch_overhead_s: float       # host time per micro-batch outside the layers: batch, loss, engine calls
    host_overhead_s: float             # CPU time to issue one GPU kernel (eager PyTorch)
    elementwise_traffic: float         # memory traffic of non-GEMM ops relative to unfused eager
    state_bytes: Mapping[str, tuple]   # precision -> bytes per parameter (weights, grads, optimizer), ZeRO >= 1
    state_bytes_zero0: Mapping[str, tuple]   # the same without ZeRO (plain data parallelism)
    allocator_fragmentation: float     # reserved / allocated of the caching allocator
    cuda_context_bytes: float          # CUDA context, cuBLAS/NCCL workspaces outside PyTorch
    comm_buffer_bytes: float           # NCCL / bucket buffers held during the step
    logits_bytes_per_element: float    # peak bytes per logit during the loss (bf16 + fp32 copy)
    # ... when tp > 1 and the loss runs another code path on vocabulary-sharded logits (torchtitan's
    # loss_parallel: DTensor's decomposed log-softmax); None: the same as logits_bytes_per_element
    logits_bytes_per_element_tp: float | None = None
    zero0_shards_optimizer: tuple[str, ...] = ()   # precisions whose ZeRO-0 optimizer still shards (BF16_Optimizer)
    # bytes per parameter the ZeRO-0 optimizer step copies, by precision (memory.zero0_step_copy_bytes)
    zero0_step_copy_bytes: Mapping[str, float] = field(default_factory=dict)
    zero3_recompute_gathers: float = 1.0   # extra ZeRO-3 gathers of a layer for its recompute forward
    fsdp_pp_unsharded: bool = False    # FSDP with PP: stage weights stay gathered, fp32 grads accumulate unsharded
    cpu_offloading: bool = False       # has Megatron-Core's layer activation offload (Layout.cpu_offload_layers)
    fused_softmax_max_seq: float = 0.0     # Megatron's fused scaled-masked softmax: longest sequence; 0: none
    zero3_gathers_per_layer: float = 1.0   # ZeRO-3 / FSDP all-gather calls per layer and pass (fetch granularity)
    zero3_reduce_bucket_params: float = 0.0   # ZeRO-3 gradient reduce-scatter bucket; 0: one call per gather unit
    # Work each ZeRO-3 call does per data-parallel rank (DeepSpeed v0.3.13; catalog megatron-lm.yaml):
    # host time in counted kernels (x host_overhead_s) and copy kernels (x the GPU's kernel_overhead_s).
    zero3_rank_loop_host: float = 0.0
    zero3_rank_loop_copies: float = 0.0
    zero3_reduce_tensors_per_layer: float = 0.0   # reduce-scatter calls per layer (one per tensor); 0: buckets
    # Host time of ZeRO-3's per-module hooks (DeepSpeed's fetch / release around every submodule), per module
    # the layer runs and per forward / backward pass, in counted kernels (x host_overhead_s); 0: none
    zero3_module_hooks_forward: float = 0.0
    zero3_module_hooks_backward: float = 0.0
    # What one layer saves for backward beyond the reference count (memory.layer_activation_bytes,
    # LAYER_SAVES): "expanded_kv", "attention_output", "gated_activation", "dropout_masks"
    layer_saves: tuple[str, ...] = ()
    # The loss's logits are freed before the backward's recompute and workspace peak, so only the larger
    # of the two counts at a stage's peak (memory.logits_at_peak_bytes); False: both are counted
    loss_frees_before_backward: bool = False
    # Communication buffers at the activation peak by ZeRO stage (0-3) of a job without a pipeline
    # (memory.comm_buffer_bytes); None: comm_buffer_bytes for every stage
    comm_buffer_bytes_by_zero: tuple | None = None
    # ZeRO 1-3 optimizer step, bytes per parameter over the ZeRO shard on top of the optimizer state
    # (memory.zero_step_peak_bytes): the gradient partition it steps with, and the flat copies it makes
    zero_step_gradient_bytes: float = 0.0
    zero_step_copy_bytes: float = 0.0
    grad_accumulation_bytes: float = 0.0      # bytes per parameter per micro-batch of gradient accumulation
    # ... more under ZeRO-2 / ZeRO-3: DeepSpeed's gradient path every micro-batch (bucket copy, scaling, casts,
    # partition accumulation), "zero2/fp32/each" ... "zero3/16bit/partition": bytes per parameter on every rank,
    # and bytes per parameter of the rank's 1/dp share; empty: none
    zero_gradient_bytes: Mapping[str, float] = field(default_factory=dict)
                                              # outside the weight-gradient GEMM (0: fused into it)
    # "flash-attention-2": FlashAttention-2's sm80 kernels (capped on Blackwell by
    # GPU.flash_attention_2_peak_flop_per_s); "native": kernels built for each GPU's own tensor cores
    # (cuDNN fused attention, triton), at the GPU's peak.
    attention_kernel: str = "flash-attention-2"
    # Deterministic attention backward asked for (Megatron-Core --deterministic-mode with
    # NVTE_ALLOW_NONDETERMINISTIC_ALGO=0): compute.runs_deterministic_flash_backward
    deterministic_attention: bool = False
    # PyTorch's deterministic mode fills each fresh allocation with NaN (torch.use_deterministic_algorithms,
    # fill_uninitialized_memory on; Megatron --deterministic-mode): compute.deterministic_fill_bytes
    fills_uninitialized_memory: bool = False
    # DeepSpeed's PipelineEngine: a stage's pipeline transfers (send / receive of an activation and of
    # a gradient) run one after another instead of a send and a receive side by side, and a stage
    # gathers its own sent activation back over TP before backward: layout_time.pipeline_transfer_counts,
    # pipeline_regather_counts
    pp_blocking_p2p: bool = False
    attention_head_dims: tuple[int, ...] = ()  # head dims the flash kernel is built for (smallest >= d runs);
                                              # empty: any head dim runs unpadded
    source: str = ""


@dataclass(frozen=True, slots=True)
class TrainingSpec:
    """What the user wants to train: the token budget and the software that runs it."""

    total_tokens: float = 0.0
    framework: str = "megatron-deepspeed"


@dataclass(frozen=True, slots=True)
class Layout:
    """One way to train the model; world size = tp * pp * dp * cp."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    vpp: int = 1
    mbs: int = 1
    gbs: int = 1
    seq_len: int = 2048
    zero: int = 1
    offload_optimizer: Offload = Offload.NONE
    offload_params: Offload = Offload.NONE
    offload_activations: Offload = Offload.NONE   # full recompute's checkpoints in host memory (--checkpoint-in-cpu)
    recompute: Recompute = Recompute.NONE
    recompute_layers: int = 0          # full recompute: layers per stage recomputed; 0 = all
    first_stage_layers: int = 0        # uneven pipeline (Megatron-Core): layers on the first stage; 0 = even
    last_stage_layers: int = 0         # ... and on the last stage; 0 = even
    cpu_offload_layers: int = 0        # Megatron-Core --cpu-offloading-num-layers: these layers' saved activations wait in host memory; 0 = off
    sequence_parallel: bool = False
    tp_comm_overlap: bool = False      # Megatron-Core --tp-comm-overlap (TE userbuffers); needs sequence parallelism
    flash_attention: bool = True
    precision: Precision = Precision.BF16
    sparsity: Sparsity = Sparsity.DENSE
    density: float = 1.0               # kept weights; 2:4 is 0.5
    grad_comm: GradComm = GradComm.FP32

    def __post_init__(self):
        for name in ("tp", "pp", "dp", "cp", "vpp", "mbs", "gbs", "seq_len"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise SpecError(f"layout: {name} must be a positive integer, got {value!r}{leading_zero_hint(value)}")
            if value > 10**9:
                raise SpecError(f"layout: {name} = {value} is beyond any real layout (max 10^9)")
        if self.zero not in ZeroStage._CODES.values():
            raise SpecError(f"layout: zero stage must be 0, 1, 2 or 3, got {self.zero!r}")
        zero_means = {"recompute_layers": "all layers", "cpu_offload_layers": "off"}
        for name in ("first_stage_layers", "last_stage_layers", "recompute_layers", "cpu_offload_layers"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value <= 10**9:
                raise SpecError(f"layout: {name} must be a whole number from 0 to 10^9 (0 = "
                                f"{zero_means.get(name, 'even split')}), got {value!r}")
        if self.offload_activations is Offload.NVME:
            raise SpecError("layout: activation checkpoints go to host memory only (DeepSpeed --checkpoint-in-cpu); "
                            "use offload_activations: cpu")
        if not 0.0 < self.density <= 1.0:
            raise SpecError(f"layout: density must be in (0, 1], got {self.density}")
        if self.gbs % (self.mbs * self.dp):
            raise SpecError(f"layout: global batch {self.gbs} is not divisible by micro batch "
                            f"{self.mbs} x dp {self.dp}; use a multiple of {self.mbs * self.dp}")

    @property
    def world(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

    @property
    def num_microbatches(self) -> int:
        return self.gbs // (self.mbs * self.dp)

    def replace(self, **changes) -> "Layout":
        return replace(self, **changes)

    def as_dict(self) -> dict:
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = value.value if isinstance(value, Enum) else value
        return out


LAYOUT_FIELDS = tuple(f.name for f in fields(Layout))
# How each field is stored in a LayoutBatch column, read off Layout's annotations (no second table).
_FIELD_TYPES = get_type_hints(Layout)
_ENUM_FIELDS = {n: t for n, t in _FIELD_TYPES.items() if isinstance(t, type) and issubclass(t, _Coded)}
_BOOL_FIELDS = {n for n, t in _FIELD_TYPES.items() if t is bool}
_FLOAT_FIELDS = {n for n, t in _FIELD_TYPES.items() if t is float}


@dataclass(frozen=True)
class LayoutBatch:
    """Structure of arrays: one numpy column per `Layout` field (enums as integer codes)."""

    columns: Mapping[str, np.ndarray] = field(default_factory=dict)

    def __post_init__(self):
        lengths = {len(np.atleast_1d(v)) for v in self.columns.values()}
        if len(lengths) > 1:
            raise ValueError(f"LayoutBatch columns differ in length: {lengths}")

    def __getattr__(self, name):
        columns = object.__getattribute__(self, "columns")
        if name in columns:
            return columns[name]
        raise AttributeError(name)

    def __len__(self) -> int:
        return len(next(iter(self.columns.values())))

    @classmethod
    def from_columns(cls, size: int | None = None, **columns) -> "LayoutBatch":
        """Build from arrays or scalars; missing fields take `Layout`'s defaults."""
        defaults = Layout()
        n = size or max((len(np.atleast_1d(v)) for v in columns.values()), default=1)
        out = {}
        for name in LAYOUT_FIELDS:
            value = columns.get(name, getattr(defaults, name))
            if name in _ENUM_FIELDS and not isinstance(value, np.ndarray):
                value = _ENUM_FIELDS[name].parse(value).code
            dtype = np.float64 if name in _FLOAT_FIELDS else (bool if name in _BOOL_FIELDS else np.int64)
            arr = np.asarray(value, dtype=dtype)
            out[name] = np.broadcast_to(arr, (n,)).copy() if arr.ndim == 0 or len(arr) != n else arr
        return cls(out)

    @classmethod
    def from_layouts(cls, layouts) -> "LayoutBatch":
        layouts = list(layouts)
        cols = {}
        for name in LAYOUT_FIELDS:
            values = [getattr(l, name) for l in layouts]
            if name in _ENUM_FIELDS:
                values = [v.code for v in values]
            cols[name] = np.asarray(values, dtype=np.float64 if name in _FLOAT_FIELDS
                                    else (bool if name in _BOOL_FIELDS else np.int64))
        return cls(cols)

    def layout(self, i: int) -> Layout:
        kwargs = {}
        for name in LAYOUT_FIELDS:
            value = self.columns[name][i]
            if name in _ENUM_FIELDS:
                value = _ENUM_FIELDS[name].from_code(value)
            elif name in _BOOL_FIELDS:
                value = bool(value)
            elif name in _FLOAT_FIELDS:
                value = float(value)
            else:
                value = int(value)
            kwargs[name] = value
        return Layout(**kwargs)

    def take(self, index) -> "LayoutBatch":
        return LayoutBatch({k: v[index] for k, v in self.columns.items()})


# The items of MemoryBreakdown alive together at the activation peak (MemoryBreakdown.activation_peak)
ACTIVATION_PEAK_PARTS = ("weights", "grads", "optimizer", "activations", "logits", "comm_buffers", "workspace")


@dataclass(frozen=True, slots=True)
class MemoryBreakdown:
    """Bytes per GPU on the stage that peaks."""

    weights: float
    grads: float
    optimizer: float
    activations: float
    logits: float
    comm_buffers: float
    workspace: float
    step_copies: float                  # the optimizer step's gradient copies (DeepSpeed) that need new blocks, held on top
    fragmentation: float
    cuda_context: float
    # Live tensors while the optimizer steps, when that is another moment than the activation peak
    # (DeepSpeed ZeRO 1-3: the state, the gradient partition and its fp32 copy, after the activations and
    # the gradient buckets are freed; memory.zero_step_peak_bytes); 0: no such moment is modelled.
    step_peak: float = 0.0

    @property
    def model_states(self) -> float:
        return self.weights + self.grads + self.optimizer

    @property
    def activation_peak(self) -> float:
        """Live tensors at the activation peak (the end of the last forward / the start of backward)."""
        return sum(getattr(self, part) for part in ACTIVATION_PEAK_PARTS)

    @property
    def allocated(self) -> float:
        """Live tensors at the peak (what torch.cuda.max_memory_allocated reports): the activation peak
        or the optimizer step's, whichever is larger."""
        return max(self.activation_peak, self.step_peak)

    @property
    def reserved(self) -> float:
        """What PyTorch's caching allocator holds (torch.cuda.max_memory_reserved): the activation peak's
        allocation, its cache, and the optimizer step's copies that need new blocks."""
        return self.activation_peak + self.fragmentation + self.step_copies

    @property
    def total(self) -> float:
        """Whole-process device memory (what nvidia-smi shows) when the GPU has room for the
        allocator's cache."""
        return self.reserved + self.cuda_context

    @property
    def required(self) -> float:
        """What must fit in HBM for the process to run: live tensors at the larger of the activation
        peak and the optimizer step's (the step's copies are made after the activations are freed), and
        the CUDA context. PyTorch's caching allocator gives its cache back before it fails an
        allocation (c10/cuda/CUDACachingAllocator.cpp: on a failed cudaMalloc it frees cached blocks
        that are not split and retries), so this, not `total`, is the limit; it is a necessary
        condition, not a sufficient one: the free parts of split blocks cannot be given back, so
        between this and `total` the job runs with allocator retries and an OOM risk."""
        return self.allocated + self.cuda_context


@dataclass(frozen=True, slots=True)
class TimeBreakdown:
    """Seconds per optimizer step; the parts add up to `step`."""

    compute: float
    recompute: float
    tp_comm: float
    cp_comm: float
    pp_comm: float
    bubble: float
    dp_comm: float
    zero_comm: float
    offload: float
    optimizer: float
    overhead: float

    @property
    def step(self) -> float:
        return sum(getattr(self, f.name) for f in fields(self))


def _plain(value):
    """numpy scalars -> Python numbers (JSON-ready); Python numbers unchanged."""
    return value.item() if isinstance(value, np.generic) else value


@dataclass(frozen=True, slots=True)
class Estimate:
    memory: MemoryBreakdown
    time: TimeBreakdown
    model_flop_per_step: float          # 6N-style model FLOPs incl. attention, no recompute
    hardware_flop_per_step: float       # what the GPUs execute, incl. recompute
    tokens_per_step: float
    num_gpus: int
    hbm_bytes: float
    peak_flop_per_s: float              # dense peak of the layout's precision, per GPU
    stage_layers: tuple[int, ...] = ()  # transformer layers per pipeline stage
    host_fits: bool = True              # offloaded state fits in host memory / NVMe

    @property
    def step_time_s(self) -> float:
        return self.time.step

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_step / self.time.step

    @property
    def tokens_per_s_per_gpu(self) -> float:
        return self.tokens_per_s / self.num_gpus

    @property
    def model_flop_per_s_per_gpu(self) -> float:
        return self.model_flop_per_step / self.time.step / self.num_gpus

    @property
    def mfu(self) -> float:
        return self.model_flop_per_s_per_gpu / self.peak_flop_per_s

    @property
    def hfu(self) -> float:
        return self.hardware_flop_per_step / self.time.step / self.num_gpus / self.peak_flop_per_s

    @property
    def peak_memory_bytes(self) -> float:
        return self.memory.total

    @property
    def headroom_bytes(self) -> float:
        return self.hbm_bytes - self.memory.total

    @property
    def required_memory_bytes(self) -> float:
        return self.memory.required

    @property
    def fits(self) -> bool:
        """The job runs: what it cannot do without fits in HBM (MemoryBreakdown.required); with a
        negative headroom it runs without the allocator's usual cache (`tight`)."""
        return self.memory.required <= self.hbm_bytes and self.host_fits

    @property
    def tight(self) -> bool:
        """Fits, but not with the caching allocator's cache: allocator retries, OOM risk."""
        return self.fits and self.memory.total > self.hbm_bytes

    def time_to_train_s(self, tokens: float) -> float:
        return tokens / self.tokens_per_s

    def to_dict(self) -> dict:
        """Headline numbers and both breakdowns (SI units: seconds, bytes, FLOP), JSON-ready."""
        mem = {f.name: _plain(getattr(self.memory, f.name)) for f in fields(self.memory)}
        mem.update(allocated=_plain(self.memory.allocated), reserved=_plain(self.memory.reserved),
                   total=_plain(self.memory.total))
        time = {f.name: _plain(getattr(self.time, f.name)) for f in fields(self.time)}
        time["step"] = _plain(self.time.step)
        return {
            "step_time_s": _plain(self.step_time_s),
            "tokens_per_s": _plain(self.tokens_per_s),
            "tokens_per_s_per_gpu": _plain(self.tokens_per_s_per_gpu),
            "model_tflops_per_gpu": _plain(self.model_flop_per_s_per_gpu / 1e12),
            "mfu": _plain(self.mfu),
            "hfu": _plain(self.hfu),
            "peak_memory_bytes": _plain(self.peak_memory_bytes),
            "peak_memory_gib": _plain(self.peak_memory_bytes / 2**30),
            "hbm_bytes": _plain(self.hbm_bytes),
            "headroom_bytes": _plain(self.headroom_bytes),
            "required_memory_bytes": _plain(self.required_memory_bytes),
            "fits": bool(self.fits),
            "tight": bool(self.tight),
            "host_memory_fits": bool(self.host_fits),
            "num_gpus": _plain(self.num_gpus),
            "tokens_per_step": _plain(self.tokens_per_step),
            "model_flop_per_step": _plain(self.model_flop_per_step),
            "hardware_flop_per_step": _plain(self.hardware_flop_per_step),
            "memory_breakdown_bytes": mem,
            "time_breakdown_s": time,
            "stage_layers": [_plain(x) for x in self.stage_layers],
        }

    def __repr__(self) -> str:
        from .units import fmt_bytes, fmt_seconds

        return (f"Estimate(step {fmt_seconds(self.step_time_s)}, {self.tokens_per_s_per_gpu:,.0f} tokens/s/GPU, "
                f"MFU {self.mfu * 100:.1f}%, memory {fmt_bytes(self.memory.total)} of {fmt_bytes(self.hbm_bytes)}"
                f"{'' if self.fits else ', does not fit'}, {self.num_gpus} GPUs)")
