"""Plan -> Megatron-DeepSpeed `pretrain_gpt.py` arguments, DeepSpeed JSON and environment.

Pure functions; argument names are exactly those of microsoft/Megatron-DeepSpeed
megatron/arguments.py (recorded in tests/data/megatron_ds_flags.txt) and the JSON keys those of
DeepSpeed's config parser. See ../shared/megatron_deepspeed.md §2-5 for each mapping.
"""
from __future__ import annotations

from dataclasses import dataclass

from costmodels.errors import SpecError
from costmodels.types import GradComm, Layout, ModelSpec, Offload, Precision, Recompute

# 2024-10-18, the parent of the FPDT change (676a482c), after which grouped-query attention and
# rotary embeddings break (transformer.py:734-739 splits q/k/v in thirds; rotary_pos_embedding.py:39
# returns (cos, sin)); flags recorded at this commit in tests/data/megatron_ds_flags.txt.
MEGATRON_DEEPSPEED_COMMIT = "6acc370a41440098031227e881bd9f1f23aa369e"
DEEPSPEED_REQUIREMENT = "deepspeed>=0.16.2,<0.19"     # 0.19 removed deepspeed.compression (training.py:57)
DEEPSPEED_TESTED = "0.16.2"
BUCKET_ELEMENTS = 500_000_000                         # what the cost model's comm_buffers assume


@dataclass(frozen=True)
class Job:
    argv: tuple[str, ...]          # pretrain_gpt.py arguments, "$VARS" left for the shell
    ds_config: dict
    env: dict                      # variables every rank needs
    train_iters: int


def tokenizer_args(model: ModelSpec) -> list[str]:
    """Placeholders the user fills in: GPT-2 BPE for GPT-style vocabularies, a Hugging Face tokenizer
    for large vocabularies (Llama 3), SentencePiece otherwise."""
    if model.vocab >= 100_000:
        return ["--tokenizer-type", "HFTokenizer", "--tokenizer-model", "$TOKENIZER_MODEL"]
    if model.gated_mlp or model.position == "rope":
        return ["--tokenizer-type", "GPTSentencePieceTokenizer", "--tokenizer-model", "$TOKENIZER_MODEL"]
    return ["--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", "$VOCAB_FILE", "--merge-file", "$MERGE_FILE"]


def vocab_divisor(vocab: int, tp: int) -> int:
    return -(-vocab // (128 * tp)) * 128


def model_args(model: ModelSpec, seq_len: int, tp: int = 1) -> list[str]:
    a = ["--num-layers", model.num_layers, "--hidden-size", model.hidden,
         "--ffn-hidden-size", model.ffn_hidden, "--num-attention-heads", model.num_heads]
    if model.num_kv_heads != model.num_heads:
        a += ["--num-key-value-heads", model.num_kv_heads]
    a += ["--seq-length", seq_len, "--max-position-embeddings", max(seq_len, model.max_seq_len)]
    # Megatron pads the tokenizer's vocabulary to a multiple of this x tp (tokenizer.py:57-68); this
    # divisor makes the padded size at least the model's, even where the tokenizer reports fewer
    # (Hugging Face vocab_size excludes added tokens, tokenizer.py:574-576).
    a += ["--make-vocab-size-divisible-by", vocab_divisor(model.vocab, tp)]
    if model.gated_mlp:
        a += ["--swiglu"]
    if model.position == "rope":
        a += ["--use-rotary-position-embeddings"]
        if model.rope_theta != 10000.0:
            a += ["--rotary-position-embeddings-theta", rope_theta_arg(model)]
    if model.norm == "rmsnorm":
        a += ["--normalization", "rmsnorm"]
    if not model.bias:
        a += ["--disable-bias-linear"]
    if not model.tied_embeddings:
        a += ["--untie-embeddings-and-output-weights"]
    if model.gated_mlp or model.position == "rope":
        a += ["--no-query-key-layer-scaling"]
    a += ["--attention-dropout", model.attention_dropout, "--hidden-dropout", model.hidden_dropout]
    return [str(x) for x in a]


def layout_args(layout: Layout) -> list[str]:
    l = layout
    a = ["--tensor-model-parallel-size", l.tp, "--pipeline-model-parallel-size", l.pp]
    if l.pp == 1:
        a += ["--no-pipeline-parallel"]        # GPTModel + DeepSpeedEngine (ZeRO 0-3, TE), arguments.py:954
    if l.cp > 1:
        a += ["--ds-sequence-parallel-size", l.cp]
    a += ["--micro-batch-size", l.mbs, "--global-batch-size", l.gbs]
    if l.sequence_parallel and l.tp > 1:
        a += ["--sequence-parallel"]
    if l.flash_attention:
        # FlashAttention replaces the softmax, so Megatron's fused softmax kernels are never called; left on,
        # they are JIT-compiled at start (initialize.py:_compile_dependencies -> fused_kernels.load, with
        # -gencode for sm_70, which CUDA 13's nvcc no longer builds: the job then fails to start).
        a += ["--use-flash-attn-v2", "--no-masked-softmax-fusion"]
    else:
        a += ["--attention-softmax-in-fp32"]
    if l.recompute is Recompute.FULL:
        if l.recompute_layers:
            a += ["--recompute-granularity", "full", "--recompute-method", "block",
                  "--recompute-num-layers", l.recompute_layers]
        else:
            a += ["--checkpoint-activations", "--checkpoint-num-layers", 1]
    elif l.recompute is Recompute.SELECTIVE:
        a += ["--recompute-granularity", "selective"]
    if l.precision is Precision.BF16:
        a += ["--bf16"]
    elif l.precision is Precision.FP16:
        a += ["--fp16"]
    elif l.precision is Precision.FP8:
        a += ["--bf16", "--fp8-hybrid", "--transformer-impl", "transformer_engine"]
    # Megatron's gradient-accumulation fusion is a no-op at the pinned commit (the fused weight-gradient
    # GEMM is commented out, core/tensor_parallel/layers.py:360-368), yet left on it makes every linear
    # layer require apex's fused_weight_gradient_mlp_cuda extension (layers.py:592-600) or the job stops.
    a += ["--no-gradient-accumulation-fusion"]
    if l.offload_optimizer is not Offload.NONE:
        a += ["--cpu-optimizer"]               # DeepSpeedCPUAdam, needed for ZeRO-Offload (engine.py:1298)
    if l.offload_params is not Offload.NONE:
        a += ["--remote-device", l.offload_params.value]
    return [str(x) for x in a]


DEFAULT_TRAIN_ITERS = 100_000     # without a token budget: a placeholder the report says to replace


def rope_theta_arg(model: ModelSpec) -> int:
    """The RoPE base as Megatron-DeepSpeed takes it: an integer (f4157bea megatron/arguments.py:635,
    --rotary-position-embeddings-theta type=int). A fractional base would be cut silently, so it is
    refused."""
    if model.rope_theta != int(model.rope_theta):
        raise SpecError(f"model '{model.name}': rope_theta {model.rope_theta!r} is not a whole number, and "
                        "Megatron-DeepSpeed's --rotary-position-embeddings-theta takes an integer "
                        "(arguments.py:635); round it in the model file")
    return int(model.rope_theta)


def lr_schedule(train_iters: int) -> dict:
    """The learning-rate schedule written into launch.sh: a common default for decoder LLMs (cosine
    decay to a tenth, warm-up over 1% of the steps, at most 2,000), not tuned for the model. The warm-up
    stays below the steps: Megatron-DeepSpeed asserts lr_warmup_steps < lr_decay_steps (f4157bea
    megatron/optimizer_param_scheduler.py:30, both in samples, decay = train_iters), so a one-step job
    has none."""
    return {"lr": "3.0e-4", "min_lr": "3.0e-5", "decay_style": "cosine",
            "warmup_iters": max(0, min(2000, max(1, train_iters // 100), train_iters - 1)), "weight_decay": "0.1",
            "adam_beta1": "0.9", "adam_beta2": "0.95"}


def training_args(train_iters: int) -> list[str]:
    lr = lr_schedule(train_iters)
    return ["--train-iters", str(train_iters), "--lr", lr["lr"], "--min-lr", lr["min_lr"],
            "--lr-decay-style", lr["decay_style"], "--lr-warmup-iters", str(lr["warmup_iters"]),
            "--weight-decay", lr["weight_decay"], "--adam-beta1", lr["adam_beta1"], "--adam-beta2",
            lr["adam_beta2"], "--init-method-std", "0.02",
            "--seed", "1234", "--log-interval", "10", "--eval-interval", "1000", "--eval-iters", "10",
            "--save-interval", "1000", "--split", "949,50,1", "--num-workers", "2",
            "--distributed-backend", "nccl", "--data-path", "$DATA_PATH", "--save", "$CHECKPOINT_PATH",
            "--load", "$CHECKPOINT_PATH"]


def deepspeed_args(layout: Layout) -> list[str]:
    a = ["--deepspeed", "--deepspeed_config", "$DS_CONFIG", "--zero-stage", str(layout.zero)]
    if layout.recompute is Recompute.FULL and not layout.recompute_layers:
        a += ["--deepspeed-activation-checkpointing"]
        if layout.offload_activations is not Offload.NONE:
            # deepspeed.checkpointing.configure(checkpoint_in_cpu=...) (initialize.py:186-194); the flag
            # overrides the JSON activation_checkpointing block, so it is set here.
            a += ["--checkpoint-in-cpu"]
    return a


def ds_config(layout: Layout) -> dict:
    """DeepSpeed JSON consistent with the flags (megatron_deepspeed.md §4: JSON micro and global batch
    must equal the flags; the stage must equal --zero-stage)."""
    l = layout
    cfg = {
        "train_batch_size": l.gbs,
        "train_micro_batch_size_per_gpu": l.mbs,
        "gradient_accumulation_steps": l.gbs // (l.mbs * l.dp),
        "gradient_clipping": 1.0,
        "steps_per_print": 10,
        "wall_clock_breakdown": False,
        "prescale_gradients": False,
    }
    zero = {"stage": l.zero, "overlap_comm": True, "contiguous_gradients": True,
            "reduce_bucket_size": BUCKET_ELEMENTS}
    if l.zero in (1, 2):
        zero.update(reduce_scatter=True, allgather_partitions=True, allgather_bucket_size=BUCKET_ELEMENTS)
    if l.zero == 3:
        zero.update(stage3_prefetch_bucket_size=50_000_000, stage3_param_persistence_threshold=100_000,
                    stage3_max_live_parameters=1_000_000_000, stage3_max_reuse_distance=1_000_000_000,
                    stage3_gather_16bit_weights_on_model_save=True)
        if l.grad_comm is GradComm.ZEROPP:
            zero.update(zero_quantized_weights=True, zero_quantized_gradients=True)
    if l.offload_optimizer is not Offload.NONE:
        off = {"device": l.offload_optimizer.value, "pin_memory": True}
        if l.offload_optimizer is Offload.NVME:
            off["nvme_path"] = "/local_nvme"
        zero["offload_optimizer"] = off
    if l.offload_params is not Offload.NONE:
        off = {"device": l.offload_params.value, "pin_memory": True}
        if l.offload_params is Offload.NVME:
            off["nvme_path"] = "/local_nvme"
        zero["offload_param"] = off
    if l.zero > 0 or l.offload_optimizer is not Offload.NONE:
        cfg["zero_optimization"] = zero
        cfg["zero_allow_untested_optimizer"] = True
    else:
        cfg["zero_optimization"] = {"stage": 0}
    if Offload.NVME in (l.offload_optimizer, l.offload_params):
        cfg["aio"] = {"block_size": 1048576, "queue_depth": 8, "single_submit": False,
                      "overlap_events": True, "thread_count": 1}
    if l.precision in (Precision.BF16, Precision.FP8):
        cfg["bf16"] = {"enabled": True}
        if l.zero == 0:
            # ZeRO-0 with bf16 needs fp32 gradient accumulation: DeepSpeed then uses its BF16_Optimizer
            # (engine.py:1276-1277; fp32 master sharded over dp, full fp32 gradient buffer, gradients
            # all-reduced after the last backward with no overlap: bf16_optimizer.py:321-346).
            # At ZeRO-1 the planner leaves grad_accum_dtype unset, so DeepSpeed picks its ZeRO optimizer
            # (engine.py:1245-1248): 4 + 14/dp bytes per parameter instead of 8 + 12/dp.
            cfg["data_types"] = {"grad_accum_dtype": "fp32"}
    elif l.precision is Precision.FP16:
        cfg["fp16"] = {"enabled": True, "loss_scale": 0, "initial_scale_power": 16, "loss_scale_window": 1000,
                       "hysteresis": 2, "min_loss_scale": 1}
    # DeepSpeed reduces bf16 gradients in bf16 unless told otherwise (engine.py:871-882); with
    # Ulysses it uses seq_parallel_comm_data_type instead (engine.py:1208-1209).
    if l.grad_comm is GradComm.BF16:
        comm = "fp16" if l.precision is Precision.FP16 else "bf16"
    elif l.grad_comm is GradComm.ZEROPP:
        comm = None
    else:
        comm = "fp32"
    if comm:
        cfg["communication_data_type"] = comm
        if l.cp > 1:
            cfg["seq_parallel_comm_data_type"] = comm
    return cfg


# Why each variable of `environment` is set (report.md; .deepspeed_env itself cannot hold comments).
ENV_REASONS = {
    "CUDA_DEVICE_MAX_CONNECTIONS": "one hardware queue, so tensor-parallel communication is issued in "
                                   "order with the GEMMs it overlaps (Megatron requires it for "
                                   "--sequence-parallel, arguments.py:403-411)",
}


def environment(layout: Layout) -> dict:
    env = {}
    if layout.tp > 1 or layout.sequence_parallel:
        env["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"      # required by --sequence-parallel (arguments.py:403-411)
    return env


def build_job(model: ModelSpec, layout: Layout, total_tokens: float = 0.0) -> Job:
    tokens_per_step = layout.gbs * layout.seq_len
    train_iters = int(-(-total_tokens // tokens_per_step)) if total_tokens else DEFAULT_TRAIN_ITERS
    argv = (model_args(model, layout.seq_len, layout.tp) + tokenizer_args(model) + layout_args(layout)
            + training_args(train_iters) + deepspeed_args(layout))
    return Job(argv=tuple(argv), ds_config=ds_config(layout), env=environment(layout), train_iters=train_iters)


PROBE_ITERS = 20     # steps each probe candidate runs: enough to pass warm-up and see a steady step time


def probe_job(model: ModelSpec, layout: Layout, train_iters: int = PROBE_ITERS) -> Job:
    """The job of one probe candidate: the same arguments as launch.sh's, but a few iterations, a log line
    every iteration and no checkpoint (pretrain saves one after training when --save is set:
    training.py:245). The memory report (utils.py report_memory) is printed after the first logged
    iteration without any flag. Megatron's finer timers stay off (--timing-log-level 0, the default, as
    in launch.sh): at level 2 the forward-compute, backward-compute and batch-generator timers run
    (training.py:706-707, core/pipeline_parallel/schedules.py:183, 248), and each of their starts and
    stops synchronises the device (timers.py:85, 95), about 6 times per micro-batch, only where the job
    runs without a pipeline (DeepSpeed's PipelineEngine has none of them): the probe would time something
    else than launch.sh, and pp 1 candidates slower than the others."""
    job = build_job(model, layout, 0.0)
    argv, out, i = list(job.argv), [], 0
    replace = {"--train-iters": str(train_iters), "--log-interval": "1",
               "--lr-warmup-iters": str(lr_schedule(train_iters)["warmup_iters"])}
    while i < len(argv):
        a = argv[i]
        if a in ("--save", "--load", "--save-interval"):
            i += 2
            continue
        if a in replace:
            out += [a, replace[a]]
            i += 2
            continue
        out.append(a)
        i += 1
    return Job(argv=tuple(out), ds_config=job.ds_config, env=job.env, train_iters=train_iters)
