"""Stand-in for Megatron's compiled causal softmax kernel (megatron/fused_kernels,
scaled_upper_triang_masked_softmax_cuda), used by benchmarks/gpu/host_time only: one PyTorch op each way,
as the CUDA kernel is one launch each way (megatron/model/fused_softmax.py:17-37, ScaledUpperTriangMaskedSoftmax).
The scale and the causal mask are not applied: the host-time run measures the host's side, not the values."""
import torch


def forward(inputs, scale):
    return torch.softmax(inputs, -1)


def backward(output_grads, softmax_results, scale):
    return torch._softmax_backward_data(output_grads, softmax_results, -1, softmax_results.dtype)
