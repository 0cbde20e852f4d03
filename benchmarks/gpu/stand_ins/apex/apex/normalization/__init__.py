"""apex.normalization stand-in: RMSNorm and LayerNorm modules on PyTorch's own kernels."""
import torch
from torch.nn import functional as F

from .fused_layer_norm import FusedLayerNormAffineFunction  # noqa: F401


class FusedRMSNorm(torch.nn.Module):
    """RMSNorm with a weight, as apex.normalization.FusedRMSNorm (elementwise_affine=True). Megatron passes
    sequence_parallel, which is recorded on the weight as megatron/model/rmsnorm.py does."""

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, sequence_parallel=False, **_):
        super().__init__()
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(normalized_shape)
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(self.normalized_shape))
        self.sequence_parallel = sequence_parallel
        setattr(self.weight, "sequence_parallel", sequence_parallel)

    def forward(self, x):
        return F.rms_norm(x, self.normalized_shape, self.weight.to(x.dtype), self.eps)


MixedFusedRMSNorm = FusedRMSNorm


class FusedLayerNorm(torch.nn.LayerNorm):
    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, **_):
        super().__init__(normalized_shape, eps=eps, elementwise_affine=elementwise_affine)


MixedFusedLayerNorm = FusedLayerNorm
