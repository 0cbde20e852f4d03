"""Stand-in for Megatron's compiled masked softmax module (megatron/fused_kernels, scaled_masked_softmax_cuda),
used by benchmarks/gpu/host_time only: FusedScaleMaskSoftmax.is_kernel_available asks it how many attention
batches one CUDA block takes (megatron/model/fused_softmax.py:161, 217-221). Its rule, as in
megatron/fused_kernels/scaled_masked_softmax.h:419-431: 128 threads per block, warps of
min(32, 2**ceil(log2(sk))) threads, 2 rows per warp up to 128 keys, else 1."""


def get_batch_per_block(query_seq_len, key_seq_len, batches, attn_heads):
    log2_elements = max(0, (key_seq_len - 1).bit_length())
    next_power_of_two = 1 << log2_elements
    warp_size = next_power_of_two if next_power_of_two < 32 else 32
    batches_per_warp = 2 if next_power_of_two <= 128 else 1
    warps_per_block = 128 // warp_size
    return warps_per_block * batches_per_warp
