"""FLOP counts per token and per step.

Model FLOPs follow Narayanan et al. 2021 (arXiv:2104.04473) eq. (3) without its recompute term,
i.e. Korthikanti et al. 2022 (arXiv:2205.05198) eq. (7), generalised to GQA and SwiGLU: three
passes (forward, two backward GEMMs) over 2 FLOP per matmul weight per token, plus the attention
score and value products over the full s x s matrix (4sh per layer per token, forward).
Functions accept numpy arrays for `seq_len` (broadcasting).
"""
from __future__ import annotations


from .vec import asf, asv, ceil, clip, floor, lookup, maximum, minimum, where  # noqa: F401

from .params import matmul_params_per_layer
from .types import ModelSpec


def forward_matmul_flop_per_token(m: ModelSpec) -> float:
    """2 FLOP per weight of every layer's matmuls plus the output layer (Kaplan et al. 2020, Table 1)."""
    return 2.0 * (m.num_layers * matmul_params_per_layer(m) + m.vocab * m.hidden)


def forward_attention_flop_per_token(m: ModelSpec, seq_len):
    """QK^T and attention x V: 2 * 2 * s * h per layer per token (Narayanan et al. 2021, eq. 3)."""
    return 4.0 * m.num_layers * asf(seq_len) * m.hidden


def model_flop_per_token(m: ModelSpec, seq_len):
    """Forward + backward = 3x forward (Narayanan et al. 2021, §5.1); no recompute counted."""
    return 3.0 * (forward_matmul_flop_per_token(m) + forward_attention_flop_per_token(m, seq_len))


def narayanan_flop_per_step(m: ModelSpec, global_batch, seq_len):
    """Narayanan et al. 2021 eq. (3), with recompute: 96 B s l h^2 (1 + s/6h + V/16lh); GPT only."""
    B, s = asf(global_batch), asf(seq_len)
    l, h, V = m.num_layers, m.hidden, m.vocab
    return 96.0 * B * s * l * h * h * (1.0 + s / (6.0 * h) + V / (16.0 * l * h))


def recompute_flop_per_token(m: ModelSpec, seq_len, recompute_code, recomputed_share=1.0):
    """Extra forward work: full recompute repeats the layers' forward (Chen et al. 2016, §3);
    selective repeats only the attention core (Korthikanti et al. 2022, §4.2)."""
    code = asv(recompute_code)
    layers_fwd = 2.0 * m.num_layers * matmul_params_per_layer(m) + forward_attention_flop_per_token(m, seq_len)
    full = layers_fwd * recomputed_share
    selective = forward_attention_flop_per_token(m, seq_len)
    return where(code == 2, full, where(code == 1, selective, 0.0))
