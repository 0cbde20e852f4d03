"""Time of one GEMM from its shape (M x N output, K inner), not from one shape-independent efficiency.

A GEMM kernel runs one thread block (CTA) per output tile of tm x tn; the tiles run in waves of one
per SM (NVIDIA, "Matrix Multiplication Background User's Guide", sections "Tile quantization" and
"Wave quantization"). Four physical effects follow, none with a fitted constant of its own:

* wave quantisation: ceil(tiles / SMs) waves each take one tile's time, so a GEMM with 24 tiles on
  108 SMs runs at 22% of the machine;
* tile quantisation: a partial edge tile costs a whole one;
* smaller tiles reuse operands less: a tm x tn tile does tm.tn/(tm+tn) FLOP per byte it stages through
  shared memory; with `tile_intensity` I0 = tensor-core FLOP per clock per SM / shared-memory bytes per
  clock per SM (data-sheet figures, per GPU generation) the tile reaches I / (I + I0) of the SM's rate;
* K roll-off: each tile first fills a software pipeline (4 stages of 32-deep K slices in CUTLASS's
  default SM80/SM90 configurations) before it computes: time ~ K + 128.

cuBLAS picks among tiles and split-K factors (split-K cuts K over more CTAs when there are fewer tiles
than SMs, then sums the fp32 partial tiles through HBM); the cheapest candidate is taken, as its
heuristics aim to. The result is bounded below by the roofline: operands and output read / written
once at the achieved HBM bandwidth (Williams et al. 2009, CACM 52(4)). `gemm_efficiency` (fitted per
GPU family) is then the rate of a perfectly quantised, large-tile GEMM, the same for every shape.
"""
from __future__ import annotations

import numpy as np

# (tm, tn) output tiles cuBLAS / CUTLASS choose among on Ampere and Hopper (CUTLASS default
# threadblock shapes for SM80 / SM90 tensor-core GEMMs). ASSUMED: the candidate set.
TILES = ((256, 128), (128, 256), (128, 128), (128, 64), (64, 128), (64, 64))
SPLIT_K = (1, 2, 4, 8)
K_FILL = 128.0        # ASSUMED: 4 pipeline stages x 32-deep K slices (CUTLASS SM80 defaults)


def tile_rate_factor(tm: float, tn: float, tile_intensity: float) -> float:
    """Fraction of the SM's tensor-core rate a tm x tn tile sustains: I / (I + I0), I = tm.tn/(tm+tn)."""
    reuse = tm * tn / (tm + tn)
    return reuse / (reuse + tile_intensity)


def _largest_tile_factor(tile_intensity: float) -> float:
    return max(tile_rate_factor(tm, tn, tile_intensity) for tm, tn in TILES)


def gemm_time_unique(m, n, k, rate, num_sms, tile_intensity, hbm_rate, elem_bytes):
    """Seconds for GEMMs of shapes (m, n, k) (1-D float arrays of equal length) at `rate` FLOP/s
    for a large, perfectly quantised GEMM; `hbm_rate` achieved bytes/s; `elem_bytes` operand size."""
    best = np.full(m.shape, np.inf)
    per_sm = rate / num_sms / _largest_tile_factor(tile_intensity)   # large-tile rate -> SM peak share
    for tm, tn in TILES:
        tiles = np.ceil(m / tm) * np.ceil(n / tn)
        sm_rate = per_sm * tile_rate_factor(tm, tn, tile_intensity)
        for s in SPLIT_K:
            ctas = tiles * s
            waves = np.ceil(ctas / num_sms)
            k_part = np.ceil(k / s)
            t = waves * 2.0 * tm * tn * (k_part + K_FILL) / sm_rate
            if s > 1:   # fp32 partial tiles written and read back, then summed
                t = t + 2.0 * 4.0 * s * m * n / hbm_rate
                t = np.where(k_part >= 256, t, np.inf)   # cuBLAS splits only long K
            best = np.minimum(best, t)
    traffic = elem_bytes * (m * k + k * n + m * n) / hbm_rate
    return np.maximum(best, traffic)


def gemm_time(m, n, k, rate, gpu, elem_bytes=2.0):
    """GEMM time for array-or-scalar shapes; evaluated once per distinct shape (a batch of layouts
    has few), then mapped back."""
    scalar = not any(isinstance(x, np.ndarray) for x in (m, n, k, rate))
    mm, nn, kk, rr = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (m, n, k, rate)))
    shape = mm.shape
    keys = np.stack([mm.ravel(), nn.ravel(), kk.ravel(), rr.ravel()], axis=1)
    uniq, inverse = np.unique(keys, axis=0, return_inverse=True)
    hbm = gpu.hbm_bytes_per_s * gpu.hbm_efficiency
    t = gemm_time_unique(uniq[:, 0], uniq[:, 1], uniq[:, 2], uniq[:, 3], float(gpu.num_sms),
                         float(gpu.gemm_tile_intensity), hbm, elem_bytes)
    out = t[inverse.ravel()].reshape(shape)
    return float(out) if scalar else out


def gemm_efficiency_of_shape(m, n, k, gpu, peak):
    """Achieved fraction of `peak` for one shape (reporting and tests)."""
    rate = peak * gpu.gemm_efficiency
    return 2.0 * m * n * k / gemm_time(m, n, k, rate, gpu) / peak
