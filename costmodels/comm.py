"""Collective communication times: alpha-beta model on the link tier a group spans.

Rank order (one place, reused for every group): tensor parallel fastest, then context, data,
pipeline: rank = tp_rank + t*(cp_rank + c*(dp_rank + d*pp_rank)), as Megatron-LM's
`parallel_state` and picotron's `arange(world).view(dp, pp, cp, tp)`. A group of `size` ranks
with `stride` between members has min(size, domain // stride) members in each NVLink domain.

Collectives are hierarchical: a ring inside each NVLink domain, then a ring across domains in
which every GPU drives its own NIC with 1/k of the data (Thakur et al. 2005 for the ring costs;
NCCL's multi-rail rings behave the same way).
"""
from __future__ import annotations

import numpy as np

from .vec import asf, asv, ceil, clip, floor, lookup, maximum, minimum, where  # noqa: F401

from .types import ClusterSpec


def members_per_domain(size, stride, domain):
    """Members of a group of `size` ranks, `stride` apart, that share one NVLink domain."""
    size = asf(size)
    per = floor(domain / maximum(asf(stride), 1.0))
    return clip(per, 1.0, size)


def _ring_phase(nbytes, n, bytes_per_s, latency_s):
    """One reduce-scatter or all-gather ring over n ranks: (n-1)/n x bytes at the link rate
    plus (n-1) hop latencies (Thakur et al. 2005, §4)."""
    n = asf(n)
    return (n - 1) * (nbytes / (n * bytes_per_s) + latency_s)   # 0 for a group of one


def reduce_scatter_time(nbytes, size, k, cluster: ClusterSpec):
    """Reduce-scatter of `nbytes` (the full, unsharded size) over `size` ranks, `k` per domain."""
    size = asf(size)
    domains = size / k
    intra = _ring_phase(nbytes, k, cluster.nvlink_bytes_per_s * cluster.nvlink_efficiency,
                        cluster.nvlink_latency_s)
    inter = _ring_phase(nbytes / k, domains, cluster.network_bytes_per_s * cluster.network_efficiency,
                        cluster.network_latency_s)
    return intra + inter


def all_gather_time(nbytes, size, k, cluster: ClusterSpec):
    """All-gather moves the same bytes as reduce-scatter, in reverse (Thakur et al. 2005, §4)."""
    return reduce_scatter_time(nbytes, size, k, cluster)


def all_reduce_time(nbytes, size, k, cluster: ClusterSpec):
    """All-reduce = reduce-scatter + all-gather: 2(n-1)/n x bytes (Patarasuk & Yuan 2009, §3)."""
    return 2.0 * reduce_scatter_time(nbytes, size, k, cluster)


def all_to_all_time(nbytes, size, k, cluster: ClusterSpec):
    """All-to-all of `nbytes` per GPU over `size` ranks, `k` per domain: (n-1)/n of the data leaves
    each GPU, (n-k)/n of it across domains on the GPU's NIC (Thakur et al. 2005, §5, pairwise
    exchange); the two tiers run concurrently."""
    size = asf(size)
    intra = (k - 1) / size * nbytes / (cluster.nvlink_bytes_per_s * cluster.nvlink_efficiency)
    inter = (size - k) / size * nbytes / (cluster.network_bytes_per_s * cluster.network_efficiency)
    latency = (size - 1) * where(size > k, cluster.network_latency_s, cluster.nvlink_latency_s)
    return maximum(intra, inter) + latency


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


_GRAD_WIRE_BYTES = np.array([4.0, 2.0, 0.5, 0.125])   # by GradComm code: fp32, bf16, zeropp, 1bit


def weight_gather_bytes_per_param(grad_comm, precision):
    """ZeRO-3 / ZeRO-1,2 weight all-gather: the working dtype, or int8 with ZeRO++ qwZ
    (Wang et al. 2023, arXiv:2306.10209, §3.1)."""
    base = where(asv(precision) == 0, 4.0, 2.0)
    return where(asv(grad_comm) == 2, 1.0, base)
