"""FlashAttention-2's deterministic backward: fewer, longer thread blocks, so fewer waves are full.

FlashAttention-2's backward runs one thread block (CTA) per (key block of kBlockN = 128 keys, batch,
head); each CTA walks the query blocks that see its keys (all of them, or those at and after its keys
under a causal mask) and adds its share of dQ into a shared fp32 accumulator with atomics
(Dao-AILab/flash-attention 0251105a, csrc/flash_attn/src/flash_bwd_launch_template.h:72-125,
run_flash_bwd_seqk_parallel; flash_bwd_kernel.h:823-835). Atomics make the sum's order, and so its
rounding, vary from run to run. Deterministic mode (flash-attn >= 2.4.1; what Transformer Engine runs
when determinism is asked for and its cuDNN attention is refused, transformer_engine/pytorch/attention/
dot_product_attention/utils.py:1516-1524) instead launches only ceil(SMs / (batch x heads)) CTAs per
(batch, head), each walking every gridDim-th key block and accumulating into its own dQ copy,
summed afterwards (flash_api.cpp:925-930). With b x h = 32 on an A100's 108 SMs that is 4 CTAs per head,
128 CTAs of 16 key blocks each: two waves, the second 20/108 full, where 2,048 short CTAs pack the SMs
evenly. The hdim <= 128 backward kernels ask for 144 KiB of shared memory or more
(flash_bwd_launch_template.h:247-248), so one CTA runs per SM.

`deterministic_backward_slowdown` simulates both launches on the GPU's SMs: CTAs dispatched in launch
order (key block fastest, then batch, then head) to whichever SM frees first, each taking time in
proportion to the query blocks it walks (kBlockM = 64; Flash_bwd_kernel_traits<128, 64, 128, ...>), and
returns the ratio of the two makespans. No fitted constant: the ratio follows from the grid, the mask
and the SM count (data sheet). The extra dQ copies (zeroed, then read once to sum them) are memory
traffic, `deterministic_backward_extra_bytes`.
"""
from __future__ import annotations

import functools
import heapq
import math

import numpy as np

from .gemm import on_distinct_rows

BLOCK_N = 128        # key block of the backward CTA (flash_bwd_launch_template.h:248, hdim 128)
BLOCK_M = 64         # query block it walks


def _block_work(n_blocks: int, causal: bool) -> np.ndarray:
    """Query blocks each key block walks: all of them, or under a causal mask those at and after it."""
    m_blocks = n_blocks * BLOCK_N // BLOCK_M
    j = np.arange(n_blocks)
    return (m_blocks - j * BLOCK_N // BLOCK_M).astype(float) if causal else np.full(n_blocks, float(m_blocks))


def _makespan(durations, sms: int) -> float:
    """Greedy list schedule: each CTA, in launch order, starts on the SM that frees first."""
    free = [0.0] * min(sms, len(durations))
    heapq.heapify(free)
    end = 0.0
    for d in durations:
        t = heapq.heappop(free) + d
        end = max(end, t)
        heapq.heappush(free, t)
    return end


@functools.lru_cache(maxsize=1024)
def _slowdown(batch_heads: int, n_blocks: int, sms: int, causal: bool) -> float:
    work = _block_work(n_blocks, causal)
    regular = _makespan(np.tile(work, batch_heads), sms)
    splits = min(n_blocks, -(-sms // batch_heads))              # ceil(SMs / (b h)), at most one per block
    per_cta = np.array([work[x::splits].sum() for x in range(splits)])
    deterministic = _makespan(np.tile(per_cta, batch_heads), sms)
    return deterministic / regular


def deterministic_backward_slowdown(batch_heads, seq_len, num_sms, causal=True):
    """Wall time of FlashAttention-2's deterministic backward over its regular one, for `batch_heads`
    (micro-batch x query heads on the GPU) and `seq_len` keys; arrays or scalars. 1 for a sequence of
    one key block."""
    def fn(bh, s):
        out = np.empty(len(bh))
        for i, (b, n) in enumerate(zip(bh, s)):
            blocks = max(1, math.ceil(n / BLOCK_N))
            out[i] = _slowdown(max(1, int(round(b))), blocks, int(num_sms), bool(causal))
        return (out,)

    bh = np.atleast_1d(np.asarray(batch_heads, dtype=float))
    s = np.atleast_1d(np.asarray(seq_len, dtype=float))
    result = on_distinct_rows(fn, bh, s)[0]
    if np.ndim(batch_heads) == 0 and np.ndim(seq_len) == 0:
        return float(np.asarray(result).ravel()[0])
    return result


def dq_accumulator_copies(batch_heads, num_sms):
    """fp32 dQ accumulators of FlashAttention-2's deterministic backward: ceil(SMs / (b h)) per
    (batch, head) (flash_api.cpp:925-930, nsplits); `batch_heads` is sequences x heads on the GPU."""
    return np.ceil(num_sms / np.maximum(np.asarray(batch_heads, dtype=float), 1.0))


def deterministic_backward_extra_bytes(batch_heads, seq_len, head_dim, num_sms):
    """HBM bytes the deterministic backward adds: ceil(SMs / (b h)) fp32 dQ copies of seq x head_dim per
    (batch, head) are zeroed, and read back once to sum them, where the regular backward keeps one
    (flash_api.cpp:925-930; convert_dQ over nsplits)."""
    bh = np.maximum(np.asarray(batch_heads, dtype=float), 1.0)
    splits = dq_accumulator_copies(bh, num_sms)
    return 2.0 * (splits - 1.0) * bh * np.asarray(seq_len, dtype=float) * head_dim * 4.0
