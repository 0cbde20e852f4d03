"""A batch of layouts read as numbers, and how its pipeline splits the model: layers and parameters
of the first, a middle and the last stage.

Every value is a float (one layout, the scalar fast path) or a float array with one row per layout;
the frozen dataclasses here carry those values between the steps of `estimate._estimate_chunk`.
"""
from __future__ import annotations

from dataclasses import dataclass

from .vec import asf, ceil, maximum, minimum, where

from . import memory, params
from .types import ModelSpec
from .types import OFF_NONE, RC_FULL, RC_NONE, ZERO1  # named codes


@dataclass(frozen=True, slots=True)
class Knobs:
    """The layouts' knobs: degrees and sizes as floats, enums as integer codes, and what follows at once."""

    tp: object
    pp: object
    dp: object
    cp: object
    vpp: object
    mbs: object
    gbs: object
    seq: object
    zero: object
    precision: object
    recompute: object
    recompute_layers: object
    first_stage_layers: object      # as floats; 0 = even split
    last_stage_layers: object
    sp: object                      # sequence parallelism in effect (asked for, and tp > 1)
    tp_pipelined: object            # TP collectives pipelined with their GEMMs (--tp-comm-overlap, with sp)
    flash: object
    sparsity: object
    grad_comm: object
    offload_optimizer: object
    offload_params: object
    ckpt_offload: object            # full recompute's layer checkpoints go to host memory
    cpu_offload_layers: object      # Megatron-Core activation offload: layers whose saved activations go to host
    n_micro: object                 # micro-batches per step
    tokens: object                  # tokens of one micro-batch on one GPU
    shard: object                   # ZeRO / distributed-optimizer shard group
    act_bytes: object               # bytes per activation element


def read_knobs(lb) -> Knobs:
    """`lb` (a LayoutBatch, or one Layout read like one) as numbers."""
    tp, pp, dp, cp, vpp = asf(lb.tp), asf(lb.pp), asf(lb.dp), asf(lb.cp), asf(lb.vpp)
    sp = lb.sequence_parallel & (tp > 1)
    mbs, gbs, seq = asf(lb.mbs), asf(lb.gbs), asf(lb.seq_len)
    return Knobs(tp=tp, pp=pp, dp=dp, cp=cp, vpp=vpp, mbs=mbs, gbs=gbs, seq=seq,
                 zero=lb.zero, precision=lb.precision, recompute=lb.recompute,
                 recompute_layers=lb.recompute_layers,
                 first_stage_layers=asf(lb.first_stage_layers), last_stage_layers=asf(lb.last_stage_layers),
                 sp=sp, tp_pipelined=lb.tp_comm_overlap & sp, flash=lb.flash_attention, sparsity=lb.sparsity,
                 grad_comm=lb.grad_comm, offload_optimizer=lb.offload_optimizer, offload_params=lb.offload_params,
                 ckpt_offload=((lb.offload_activations != OFF_NONE) & (lb.recompute == RC_FULL)
                               & (lb.recompute_layers == 0)),
                 # Megatron-Core's activation offload exists with pp 1 and no recompute only
                 # (search_spaces.frameworks.cpu_offload_error); elsewhere it does nothing
                 cpu_offload_layers=where((asf(lb.pp) == 1) & (lb.recompute == RC_NONE)
                                          & (lb.offload_activations == OFF_NONE), asf(lb.cpu_offload_layers), 0.0),
                 n_micro=gbs / (mbs * dp),
                 tokens=mbs * seq / cp,
                 shard=dp * cp,
                 act_bytes=memory.activation_bytes_per_element(lb.precision))


@dataclass(frozen=True, slots=True)
class Stages:
    """Transformer layers on the first stage, on each middle stage and on the last stage."""

    first: object
    mid: object
    last: object
    uneven: object                  # Megatron-Core's uneven split was asked for


def stage_layers(m: ModelSpec, k: Knobs) -> Stages:
    """How the pipeline splits the model's layers over its stages."""
    pp = k.pp
    # Layers per stage as DeepSpeed's partition_balanced (and Megatron, where they divide evenly)
    # assigns them: ceil(L / p) on every stage but the last, which takes what remains.
    layers = ceil(m.num_layers / pp)
    layers_last = where(pp > 1, m.num_layers - (pp - 1) * layers, layers)
    # Megatron-Core's uneven split (--decoder-first/last-pipeline-num-layers): the first and last
    # stages hold the given counts, the middle stages share the rest evenly. `layers` is then the
    # middle stages' count, `layers_first` the first stage's.
    first_set, last_set = k.first_stage_layers, k.last_stage_layers
    uneven = (first_set > 0) | (last_set > 0)
    layers_first = where(first_set > 0, first_set, layers)
    layers_last = where(last_set > 0, last_set, where(uneven, layers, layers_last))
    mid_rest = m.num_layers - layers_first - layers_last
    layers = where(uneven, where(pp > 2, mid_rest / maximum(pp - 2.0, 1.0), layers_first), layers)
    layers_first = where(uneven, layers_first, layers)
    return Stages(first=layers_first, mid=layers, last=layers_last, uneven=uneven)


def recomputed_layers(k: Knobs, n_layers):
    """Layers of a stage of `n_layers` that full recomputation recomputes (recompute_layers; 0: all)."""
    return where(k.recompute_layers > 0, minimum(k.recompute_layers, n_layers), n_layers)


@dataclass(frozen=True, slots=True)
class StageParams:
    """Parameters of one layer and of each kind of stage (before the TP split), and per GPU."""

    layer: object
    first: object
    mid: object
    last: object
    per_gpu: object                 # weights per GPU of the biggest stage
    local: object                   # of those, the ones this GPU's optimizer updates (its ZeRO-1+ shard)


def stage_params(m: ModelSpec, k: Knobs, stages: Stages) -> StageParams:
    """Parameters each stage holds: its layers, the embedding on the first, the output layer on the last."""
    pp = k.pp
    layer_p = params.layer_params(m)
    first_p = stages.first * layer_p + params.embedding_params(m) + where(pp <= 1, params.output_params(m), 0.0)
    mid_p = stages.mid * layer_p
    last_out = params.output_params(m) + (m.vocab * m.hidden if m.tied_embeddings else 0.0)
    last_p = stages.last * layer_p + where(pp <= 1, params.embedding_params(m) + params.output_params(m), last_out)
    stage_p = maximum(maximum(first_p, last_p), where(pp > 2, mid_p, 0.0)) / k.tp   # weights per GPU, biggest stage
    local = stage_p / where(k.zero >= ZERO1, k.shard, 1.0)
    return StageParams(layer=layer_p, first=first_p, mid=mid_p, last=last_p, per_gpu=stage_p, local=local)
