"""Collective communication times: alpha-beta model on the link tier a group spans.

Rank order (one place, reused for every group): tensor parallel fastest, then context, data,
pipeline: rank = tp_rank + t*(cp_rank + c*(dp_rank + d*pp_rank)), as Megatron-LM's
`parallel_state` and picotron's `arange(world).view(dp, pp, cp, tp)`. A group of `size` ranks
with `stride` between members has min(size, domain // stride) members in each NVLink domain.

Collectives are pipelined over two tiers, as NCCL runs them: one flat ring through every rank, whose
steps inside an NVLink domain run on NVLink and whose crossings between domains run on the NICs, each
of the domain's k GPUs driving its own NIC with 1/k of the crossing traffic (one channel per NIC);
the tiers stream chunk by chunk, so the slower tier bounds the time instead of the two adding up
(NCCL's rings over NVLink + NICs; Thakur et al. 2005 for the ring costs). Every crossing carries
(n-1)/n of the bytes, as every chunk passes every rank (`_tiers`). Each ring step costs one latency
alpha of the link it crosses, so small messages and large groups are latency-bound (the alpha-beta
model, Hockney 1994: the achieved bandwidth of an S-byte message is S / (S/B + steps * alpha)). The
ring visits every rank: of its n-1 steps (2(n-1) for all-reduce) d-1 cross domains and n-d stay on
NVLink, as NCCL's own cost model counts them (NVIDIA/nccl src/graph/tuning.cc, ncclTopoTuneModel:
`(nsteps-nInterSteps)*intraLat + nInterSteps*interLat`), so a ring over thousands of GPUs pays
milliseconds per call. All-reduce may instead use NCCL's double binary tree, whose latency is
2((n/d-1) intra + log2(d) inter) steps (same function; Sanders et al. 2009): NCCL takes the faster. Every call
also pays a fixed `collective_latency_s` (kernel launch, filling the chunk pipeline): measured NCCL
all-reduce times (nccl-tests on an 8-GPU A100 node, benchmarks/data/nccl) are t = a0 + 2(n-1) alpha
+ 2(n-1)/n S / B within 6% from 1 MiB to 1 GiB, with a0 about 40 us.
"""
from __future__ import annotations

import numpy as np

from .vec import asf, asv, ceil, clip, floor, lookup, maximum, minimum, where  # noqa: F401

from .types import ClusterSpec
from .types import FP32, GC_1BIT, GC_16BIT, GC_FP32, GC_ZEROPP  # named enum codes


# Thread blocks an NCCL collective keeps resident while it runs, one per channel. ASSUMED: 24, what
# Nsight Systems shows an FSDP-style ncclAllGather launch on H100 beside a GEMM
# (forums.developer.nvidia.com/t/compute-communication-overlap-causes-severe-gemm-performance-degradation-because-of-tail-effect/337991);
# 24 of 132 SMs is 18%, of A100's 108 22%, beside the 18.9% mean compute slowdown measured under
# overlap on A100 and H100 (Lee et al. 2025, arXiv:2507.03114, abstract).
NCCL_THREAD_BLOCKS = 24.0


def overlap_slowdown(hidden_s, cluster: ClusterSpec):
    """Seconds a collective still costs while it hides under compute: its thread blocks hold
    NCCL_THREAD_BLOCKS SMs for as long as it runs, so the compute it overlaps runs on the other SMs
    and takes (blocks / SMs) of the hidden time longer (arXiv:2507.03114 measures that slowdown)."""
    return hidden_s * min(NCCL_THREAD_BLOCKS / cluster.gpu.num_sms, 1.0)


def members_per_domain(size, stride, domain):
    """Members of a group of `size` ranks, `stride` apart, that share one NVLink domain."""
    size = asf(size)
    per = floor(domain / maximum(asf(stride), 1.0))
    return clip(per, 1.0, size)


def _ring_bandwidth_time(nbytes, n, bytes_per_s):
    """Bandwidth part of one reduce-scatter or all-gather ring over n ranks: (n-1)/n x bytes
    (Thakur et al. 2005, §4)."""
    n = asf(n)
    return (n - 1) / n * nbytes / bytes_per_s


def _call(size, cluster: ClusterSpec):
    """Fixed cost of one collective call over more than one rank."""
    return where(asf(size) > 1.0, cluster.collective_latency_s, 0.0)


def _tiers(nbytes, size, k, cluster: ClusterSpec):
    """(bandwidth time, domains) of one ring pass. The ring is flat (NCCL has no hierarchical
    reduce-scatter on NVLink + NIC systems without NVLink SHARP): every chunk passes every rank, so
    each crossing between domains carries (n-1)/n of the bytes, and the domain's k GPUs each drive
    their own NIC with 1/k of them (one channel per NIC): (n-1)/n x bytes / (k x NIC bandwidth) per
    pass. That is nccl-tests' all-reduce bus bandwidth across nodes equal to the node's NIC bandwidth:
    nodes of 8 A100 with 4 x 200 Gb/s HDR (100 GB/s) measure 86-91 GB/s on 2 nodes and 85 on 3
    (NVIDIA/nccl-tests#100, #175, #119), where a hierarchical ring would move only (d-1)/d of the
    bytes across nodes and report about twice that on 2 nodes."""
    size = asf(size)
    domains = size / k
    intra = _ring_bandwidth_time(nbytes, k, cluster.nvlink_bytes_per_s * cluster.nvlink_efficiency)
    inter = where(domains > 1.0, _ring_bandwidth_time(nbytes / k, size,
                                                      cluster.network_bytes_per_s * cluster.network_efficiency), 0.0)
    return maximum(intra, inter), domains


def ring_latency(size, k, cluster: ClusterSpec):
    """Latency of one ring pass over `size` ranks, `k` per domain: n-d NVLink steps and d-1 network
    steps (NCCL src/graph/tuning.cc, ncclTopoTuneModel, ring latency)."""
    size = asf(size)
    domains = size / asf(k)
    return (size - domains) * cluster.nvlink_latency_s + (domains - 1.0) * cluster.network_latency_s


def ring_pass_bandwidth_time(nbytes, size, k, cluster: ClusterSpec):
    """Bandwidth part of one reduce-scatter or all-gather ring pass (no latency)."""
    return _tiers(nbytes, size, k, cluster)[0]


def ring_call_latency(size, k, cluster: ClusterSpec):
    """Latency of one reduce-scatter or all-gather call: its ring steps plus the per-call cost."""
    return ring_latency(size, k, cluster) + _call(size, cluster)


def reduce_scatter_time(nbytes, size, k, cluster: ClusterSpec):
    """Reduce-scatter of `nbytes` (the full, unsharded size) over `size` ranks, `k` per domain:
    pipelined tiers plus one latency per ring step (NCCL runs reduce-scatter and all-gather as
    rings only)."""
    return ring_pass_bandwidth_time(nbytes, size, k, cluster) + ring_call_latency(size, k, cluster)


def all_gather_time(nbytes, size, k, cluster: ClusterSpec):
    """All-gather moves the same bytes as reduce-scatter, in reverse (Thakur et al. 2005, §4)."""
    return reduce_scatter_time(nbytes, size, k, cluster)


def all_reduce_time(nbytes, size, k, cluster: ClusterSpec):
    """All-reduce = reduce-scatter + all-gather: 2(n-1)/n x bytes (Patarasuk & Yuan 2009, §3); the
    ring pays its latency twice, the double binary tree 2((k-1) NVLink + log2(d) network) steps
    (NCCL src/graph/tuning.cc, ncclTopoTuneModel); NCCL picks the faster."""
    bw, domains = _tiers(nbytes, size, k, cluster)
    ring = 2.0 * ring_latency(size, k, cluster)
    tree = 2.0 * ((asf(k) - 1.0) * cluster.nvlink_latency_s
                  + np.log2(maximum(domains, 1.0)) * cluster.network_latency_s)
    return 2.0 * bw + minimum(ring, tree) + _call(size, cluster)


def all_to_all_time(nbytes, size, k, cluster: ClusterSpec):
    """All-to-all of `nbytes` per GPU over `size` ranks, `k` per domain: (n-1)/n of the data leaves
    each GPU, (n-k)/n of it across domains on the GPU's NIC (Thakur et al. 2005, §5, pairwise
    exchange); the two tiers run concurrently."""
    size = asf(size)
    intra = (k - 1) / size * nbytes / (cluster.nvlink_bytes_per_s * cluster.nvlink_efficiency)
    inter = (size - k) / size * nbytes / (cluster.network_bytes_per_s * cluster.network_efficiency)
    latency = (size - 1) * where(size > k, cluster.network_latency_s, cluster.nvlink_latency_s)
    return maximum(intra, inter) + latency + _call(size, cluster)


def p2p_time(nbytes, crosses_domain, cluster: ClusterSpec):
    """One point-to-point send between adjacent pipeline stages."""
    nvl = nbytes / (cluster.nvlink_bytes_per_s * cluster.nvlink_efficiency) + cluster.nvlink_latency_s
    net = nbytes / (cluster.network_bytes_per_s * cluster.network_efficiency) + cluster.network_latency_s
    return where(crosses_domain, net, nvl)


def grad_comm_bytes_per_param(grad_comm, precision):
    """Bytes per gradient on the wire: fp32 (4), 16-bit (2), ZeRO++ int4 quantised gradients
    (0.5; Wang et al. 2023, arXiv:2306.10209, §3.3), 1-bit Adam (1/8 plus fp32 scales;
    Tang et al. 2021, arXiv:2102.02888, §3)."""
    return _GRAD_WIRE_BYTES[asv(grad_comm)]


_GRAD_WIRE_BYTES = np.zeros(4)
_GRAD_WIRE_BYTES[[GC_FP32, GC_16BIT, GC_ZEROPP, GC_1BIT]] = [4.0, 2.0, 0.5, 0.125]


def zeropp_quantisation_bytes_per_param(grad_comm, gathers):
    """HBM bytes of ZeRO++'s quantise / dequantise kernels per local parameter and micro-batch: each
    qwZ gather quantises the 16-bit shard (read 2, write 1) and dequantises what arrives (read 1,
    write 2); qgZ quantises the 16-bit gradient to int4 and dequantises the reduced result (read 2,
    write 0.5, twice: its all-to-all runs in two hops; Wang et al. 2023, arXiv:2306.10209, §3.1-3.3).
    Memory-bound, so the kernels run at HBM bandwidth. Zero without ZeRO++."""
    return where(asv(grad_comm) == GC_ZEROPP, asf(gathers) * 6.0 + 2.0 * 2.5, 0.0)


def weight_gather_bytes_per_param(grad_comm, precision):
    """ZeRO-3 / ZeRO-1,2 weight all-gather: the working dtype, or int8 with ZeRO++ qwZ
    (Wang et al. 2023, arXiv:2306.10209, §3.1)."""
    base = where(asv(precision) == FP32, 4.0, 2.0)
    return where(asv(grad_comm) == GC_ZEROPP, 1.0, base)
