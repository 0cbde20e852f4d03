"""apex.normalization.fused_layer_norm stand-in (imported by megatron/model/fused_layer_norm.py)."""
import torch
from torch.nn import functional as F


class FusedLayerNormAffineFunction:
    """apply(input, weight, bias, normalized_shape, eps[, memory_efficient]) as apex's autograd function;
    autograd comes from F.layer_norm itself."""

    @staticmethod
    def apply(input, weight, bias, normalized_shape, eps, *_):
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        return F.layer_norm(input, tuple(normalized_shape), weight, bias, eps)


class FusedRMSNormAffineFunction:
    @staticmethod
    def apply(input, weight, normalized_shape, eps, *_):
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        return F.rms_norm(input, tuple(normalized_shape), weight, eps)


__all__ = ["FusedLayerNormAffineFunction", "FusedRMSNormAffineFunction", "torch"]
