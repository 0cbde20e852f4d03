"""Parameter counts of a decoder-only transformer, one function per block.

h hidden, f FFN hidden, a heads, g key/value heads, V vocabulary (see types.py).
"""
from __future__ import annotations

from .types import ModelSpec


def attention_params(m: ModelSpec) -> int:
    """Q, K, V and output projections; GQA shrinks K and V to g/a of Q (Ainslie et al. 2023, §2)."""
    kv = 2 * m.hidden * m.num_kv_heads // m.num_heads
    weights = m.hidden * (m.hidden + kv) + m.hidden * m.hidden
    biases = (m.hidden + kv + m.hidden) if m.bias else 0
    return weights + biases


def mlp_params(m: ModelSpec) -> int:
    """Two h x f matrices, three with a gated unit (SwiGLU, Shazeer 2020, eq. 6)."""
    matrices = 3 if m.gated_mlp else 2
    biases = ((2 if m.gated_mlp else 1) * m.ffn_hidden + m.hidden) if m.bias else 0
    return matrices * m.hidden * m.ffn_hidden + biases


def norm_params(m: ModelSpec) -> int:
    """Two norms per layer: LayerNorm has weight and bias, RMSNorm only a weight."""
    return 2 * m.hidden * (2 if m.norm == "layernorm" else 1)


def layer_params(m: ModelSpec) -> int:
    """One transformer layer; 12h^2 + 13h for GPT with f = 4h (Narayanan et al. 2021, §3.2)."""
    return attention_params(m) + mlp_params(m) + norm_params(m)


def embedding_params(m: ModelSpec) -> int:
    """Token embedding, plus learned positions when the model has them."""
    positions = m.max_seq_len * m.hidden if m.position == "learned" else 0
    return m.vocab * m.hidden + positions


def output_params(m: ModelSpec) -> int:
    """Final norm plus the output projection (shared with the embedding when tied)."""
    final_norm = m.hidden * (2 if m.norm == "layernorm" else 1)
    return final_norm + (0 if m.tied_embeddings else m.vocab * m.hidden)


def total_params(m: ModelSpec) -> int:
    return m.num_layers * layer_params(m) + embedding_params(m) + output_params(m)


def matmul_params_per_layer(m: ModelSpec) -> int:
    """Weights that take part in a matrix multiply (what 6N counts); biases and norms excluded."""
    kv = 2 * m.hidden * m.num_kv_heads // m.num_heads
    return m.hidden * (2 * m.hidden + kv) + (3 if m.gated_mlp else 2) * m.hidden * m.ffn_hidden
