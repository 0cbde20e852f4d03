"""flash_attn stand-in: flash_attn_varlen_func on PyTorch's FlashAttention-2 kernels (see ../README.md)."""
__version__ = "2.0.0+torch-sdpa-stand-in"
