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

import functools

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
    for a large, perfectly quantised, large-tile GEMM; `hbm_rate` achieved bytes/s; `elem_bytes`
    operand size. Every (tile, split-K) candidate is a row of one 2-D evaluation; the cheapest wins."""
    tm, tn, s = _CANDIDATES
    per_sm = rate / num_sms / _largest_tile_factor(tile_intensity)   # large-tile rate -> SM peak share
    reuse = tm * tn / (tm + tn)
    sm_rate = per_sm * (reuse / (reuse + tile_intensity))            # tile_rate_factor, per candidate
    ctas = np.ceil(m / tm) * np.ceil(n / tn) * s
    k_part = np.ceil(k / s)
    t = np.ceil(ctas / num_sms) * 2.0 * tm * tn * (k_part + K_FILL) / sm_rate
    # Split-K writes fp32 partial tiles and reads them back to sum them; cuBLAS splits only long K.
    t = t + np.where(s > 1, 2.0 * 4.0 * s * m * n / hbm_rate, 0.0)
    t = np.where((s > 1) & (k_part < 256), np.inf, t)
    traffic = elem_bytes * (m * k + k * n + m * n) / hbm_rate
    return np.maximum(t.min(axis=0), traffic)


# (tm, tn, split-K) of every candidate as columns shaped (candidates, 1), to broadcast over shapes.
_CANDIDATES = tuple(np.array(col, dtype=float)[:, None]
                    for col in zip(*[(tm, tn, s) for tm, tn in TILES for s in SPLIT_K]))


def _distinct_rows(*cols):
    """(distinct rows as columns, index of each row's distinct row): each column factorised on its own
    (a 1-D sort), the factor indexes combined into one integer key. Much faster than
    np.unique(axis=0), which sorts whole rows as opaque bytes."""
    key = np.zeros(cols[0].shape, dtype=np.int64)
    for col in cols:
        values, index = np.unique(col, return_inverse=True)
        key = key * len(values) + index
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    return [col[first] for col in cols], inverse


def on_distinct_rows(fn, *cols):
    """fn(*cols), evaluated once per distinct row of the broadcast columns and mapped back (the
    shapes of a batch of layouts depend on a few columns with few values). fn returns a tuple."""
    if not any(isinstance(c, np.ndarray) for c in cols):
        return fn(*cols)
    arrays = np.broadcast_arrays(*(np.asarray(c, dtype=float) for c in cols))
    shape = arrays[0].shape
    distinct, inverse = _distinct_rows(*(a.ravel() for a in arrays))
    return tuple(np.broadcast_to(np.asarray(out, dtype=float), distinct[0].shape)[inverse].reshape(shape)
                 for out in fn(*distinct))


@functools.lru_cache(maxsize=4096)
def _gemm_time_scalar(m, n, k, rate, num_sms, tile_intensity, hbm_rate, elem_bytes):
    one = np.array([m])
    return float(gemm_time_unique(one, np.array([n]), np.array([k]), rate, num_sms, tile_intensity,
                                  hbm_rate, elem_bytes)[0])


def gemm_time(m, n, k, rate, gpu, elem_bytes=2.0):
    """GEMM time for array-or-scalar shapes; evaluated once per distinct shape (a batch of layouts
    has few), then mapped back. Scalar shapes (one estimate) are cached: the function is pure."""
    hbm = gpu.hbm_bytes_per_s * gpu.hbm_efficiency
    consts = (float(gpu.num_sms), float(gpu.gemm_tile_intensity), float(hbm), float(elem_bytes))
    if not any(isinstance(x, np.ndarray) for x in (m, n, k, rate)):
        return _gemm_time_scalar(float(m), float(n), float(k), float(rate), *consts)
    mm, nn, kk, rr = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (m, n, k, rate)))
    shape = mm.shape
    (um, un, uk, ur), inverse = _distinct_rows(mm.ravel(), nn.ravel(), kk.ravel(), rr.ravel())
    t = gemm_time_unique(um, un, uk, ur, *consts)
    return t[inverse.ravel()].reshape(shape)


def gemm_efficiency_of_shape(m, n, k, gpu, peak):
    """Achieved fraction of `peak` for one shape (reporting and tests)."""
    rate = peak * gpu.gemm_efficiency
    return 2.0 * m * n * k / gemm_time(m, n, k, rate, gpu) / peak
