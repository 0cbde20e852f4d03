"""Step time: pipeline schedule over per-stage micro-batch times, plus what happens once per step.

Pipeline (Narayanan et al. 2021, §2.2): with per-micro-batch stage times tau_i, 1F1B takes
sum_i tau_i + (m - 1) max_i tau_i (the fill and drain pass through every stage once, the
slowest stage then works through the remaining micro-batches); the interleaved schedule with v
chunks shrinks the fill/drain part by v: m max tau + (sum tau - max tau) / v, which for equal
stages is the bubble (p - 1)/(v m) of eq. (2).
"""
from __future__ import annotations

import numpy as np

from .vec import asf, asv, ceil, clip, floor, lookup, maximum, minimum, where  # noqa: F401

from .comm import (all_gather_time, all_to_all_time, members_per_domain, p2p_time, reduce_scatter_time,
                   all_reduce_time, ring_call_latency, ring_pass_bandwidth_time)
from .types import FP32, OFF_NONE, OFF_NVME, ZERO0  # named enum codes


def pipeline_time(tau_first, tau_mid, tau_last, pp, vpp, num_microbatches):
    """Returns (total, bottleneck tau, bottleneck stage: 0 first, 1 middle, 2 last) for one step's
    forward+backward passes: the slowest stage paces the steady state, the others fill and drain
    (Narayanan et al. 2021, §2.2; bubble (p - 1) / v of a stage for equal stages)."""
    pp = asf(pp)
    single = pp <= 1
    total_sum = where(single, tau_first, tau_first + tau_last + maximum(pp - 2, 0) * tau_mid)
    mid = where(pp > 2, tau_mid, 0.0)
    tau_max = where(single, tau_first, maximum(maximum(tau_first, tau_last), mid))
    m = asf(num_microbatches)
    v = asf(vpp)
    total = m * tau_max + (total_sum - tau_max) / v
    which = where(single, 0, where((tau_last >= tau_first) & (tau_last >= mid) & (tau_last > tau_first), 2,
                                   where(mid > maximum(tau_first, tau_last), 1, 0)))
    return total, tau_max, which


def dp_gradient_sync_time(grad_bytes, weight_bytes, zero, group, stride, cluster, bf16_optimizer=False):
    """Once per step: ZeRO-0 all-reduces gradients; ZeRO-1 reduce-scatters them and all-gathers
    the updated 16-bit weights (Rajbhandari et al. 2020, §7: same volume as all-reduce); DeepSpeed's
    BF16_Optimizer all-reduces the gradients and then all-gathers the updated weight partitions.
    Returns (gradient part, weight all-gather part)."""
    k = members_per_domain(group, stride, cluster.nvlink_domain)
    zero = asv(zero)
    full_reduce = (zero == ZERO0) | bf16_optimizer
    grads = where(full_reduce, all_reduce_time(grad_bytes, group, k, cluster),
                  reduce_scatter_time(grad_bytes, group, k, cluster))
    weights = where((zero == ZERO0) & ~np.asarray(bf16_optimizer, dtype=bool), 0.0,
                    all_gather_time(weight_bytes, group, k, cluster))
    return grads, weights


def zero3_microbatch_comm_time(weight_bytes, grad_bytes, gathers, group, stride, cluster,
                               gather_calls=1.0, reduce_calls=1.0):
    """ZeRO-3 / FSDP per micro-batch: all-gather the weights before each use (forward, backward,
    and the recompute forward) and reduce-scatter the gradients (Rajbhandari et al. 2020, §7.3:
    1.5x the all-reduce volume without recompute). Each pass fetches module by module,
    `gather_calls` collectives, and the gradients go out in `reduce_calls` buckets: every call pays
    a whole ring's latency (comm.ring_latency), which over thousands of ranks is milliseconds.
    Returns (bandwidth time, latency time)."""
    k = members_per_domain(group, stride, cluster.nvlink_domain)
    gather_calls = maximum(asf(gather_calls), 1.0)
    reduce_calls = maximum(asf(reduce_calls), 1.0)
    # all-gather moves the same bytes as reduce-scatter, in reverse (comm.all_gather_time)
    bandwidth = (gathers * ring_pass_bandwidth_time(weight_bytes, group, k, cluster)
                 + ring_pass_bandwidth_time(grad_bytes, group, k, cluster))
    latency = (gathers * gather_calls + reduce_calls) * ring_call_latency(group, k, cluster)
    return bandwidth, latency


def optimizer_step_time(local_params, cluster, precision):
    """Adam on the GPU is memory-bound: read fp32 master, moments and gradient, write them back
    and the 16-bit copy, plus the gradient-norm pass: about 38 bytes per local parameter
    (fused multi-tensor Adam; Rajbhandari et al. 2020 count 16 bytes of state per parameter)."""
    gpu = cluster.gpu
    bytes_per_param = where(asv(precision) == FP32, 32.0, 38.0)
    return local_params * bytes_per_param / (gpu.hbm_bytes_per_s * gpu.hbm_efficiency)


def offloaded_optimizer_time(local_params, offload, cluster):
    """ZeRO-Offload (Ren et al. 2021, arXiv:2101.06840, §4): gradients go down and 16-bit weights
    come back over PCIe (4 + 2 bytes per parameter), Adam runs on the CPU at DeepSpeedCPUAdam
    speed shared by the node's GPUs; ZeRO-Infinity (Rajbhandari et al. 2021, arXiv:2104.07857,
    §5) also streams the 12 bytes of optimizer state from and back to NVMe."""
    per_gpu_cpu_rate = cluster.cpu_adam_params_per_s / cluster.gpus_per_node
    cpu = local_params / per_gpu_cpu_rate
    pcie = local_params * 6.0 / cluster.pcie_bytes_per_s
    nvme_rate = max(cluster.nvme_bytes_per_s, 1.0) / cluster.gpus_per_node
    nvme = where(asv(offload) == OFF_NVME, local_params * 24.0 / nvme_rate, 0.0)
    return where(asv(offload) != OFF_NONE, cpu + pcie + nvme, 0.0)


def cp_exchange_time(kv_bytes, cp, stride, attention_time, cluster):
    """Ring attention (Liu et al. 2023, arXiv:2310.01889, §3): cp - 1 steps each passing one K/V
    block to the next rank, overlapped with the attention of the block in hand; only the
    excess is exposed."""
    cp = asf(cp)
    k = members_per_domain(cp, stride, cluster.nvlink_domain)
    inside = k >= cp
    rate = where(inside, cluster.nvlink_bytes_per_s * cluster.nvlink_efficiency,
                    cluster.network_bytes_per_s * cluster.network_efficiency)
    latency = where(inside, cluster.nvlink_latency_s, cluster.network_latency_s)
    comm = (cp - 1) * (kv_bytes / rate + latency)
    return where(cp > 1, maximum(comm - attention_time, 0.0), 0.0)


def ring_allgather_exchange_time(kv_bytes, dkv_bytes, cp, stride, fwd_attention, bwd_attention, cluster):
    """(forward, backward) exposed seconds of PyTorch's context-parallel attention for one layer (torch 2.6
    torch/distributed/tensor/experimental/_attention.py): `kv_bytes` of K and V per rank, all-gathered once
    per pass (_AllGatherRotater) and waited on after the first of the cp blocks' attention; in backward,
    after each block, dK and dV (`dkv_bytes`, fp32) go on to the next rank (_AllToAllRotater, a
    permutation: one point-to-point send), waited on after the next block, the last after the loop. Each
    block is 1/cp of the layer's attention (the load-balanced split)."""
    cp = asf(cp)
    k = members_per_domain(cp, stride, cluster.nvlink_domain)
    gather = all_gather_time(cp * kv_bytes, cp, k, cluster)
    dkv = p2p_time(dkv_bytes, k < cp, cluster)
    block_f, block_b = fwd_attention / cp, bwd_attention / cp
    fwd = maximum(gather - block_f, 0.0)
    bwd = maximum(gather - block_b, 0.0) + (cp - 1.0) * maximum(dkv - block_b, 0.0) + dkv
    return where(cp > 1, fwd, 0.0), where(cp > 1, bwd, 0.0)


def ulysses_exchange_time(qkv_bytes, out_bytes, cp, stride, cluster):
    """DeepSpeed-Ulysses (Jacobs et al. 2023, arXiv:2309.14509, §3.1): an all-to-all turns the
    sequence-split Q, K, V into head-split ones before attention and another turns the output
    back; not overlapped with compute."""
    cp = asf(cp)
    k = members_per_domain(cp, stride, cluster.nvlink_domain)
    t = all_to_all_time(qkv_bytes, cp, k, cluster) + all_to_all_time(out_bytes, cp, k, cluster)
    return where(cp > 1, t, 0.0)
