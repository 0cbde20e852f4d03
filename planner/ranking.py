"""Which layouts rank first, and which runner-ups to show.

* `rank_rows`: the tie rule (objective values within TIE are equal; then memory headroom, moving
  parts, ZeRO stage, memory, the knobs).
* `family_codes` / `family_label`: structurally different families of layouts (offload, context
  parallel, ZeRO-3, one per tp x pp).
* `alternatives`: the best, then the best of every other family, then other structures.
"""
from __future__ import annotations

import numpy as np

from search_spaces.knobs import STRUCTURAL
from search_spaces.space import KNOBS

TIE = 1e-4    # objective values within 0.01% count as equal
LOW_HEADROOM = 0.10   # among equals, layouts leaving less than this share of GPU memory free rank last


def complexity(cols: dict) -> np.ndarray:
    """Moving parts a plan adds: offload, compressed communication, context or interleaved parallelism.
    Among equally fast plans the simpler one ranks first, then the one using less memory."""
    return (cols["offload_optimizer"] + cols["offload_params"] + cols["offload_activations"] + (cols["grad_comm"] > 0)
            + (cols["cp"] > 1) + (cols["vpp"] > 1))


def rank_rows(cols, batch, values, keep):
    """Indices of the best `keep` rows. The tie rule: objective values within TIE (0.01%) are equal;
    among equals a layout with at least LOW_HEADROOM (10%) of the GPU memory free ranks first (the
    memory estimate has a few percent of error), then the simpler layout (fewer moving parts, see
    `complexity`), then the lower ZeRO stage, then the one using less memory, then the layout's knobs
    in KNOBS order."""
    scale = max(np.abs(values).min(), 1e-300)
    bucket = np.floor(values / (scale * TIE))
    peak = np.asarray(batch.peak_memory_bytes, dtype=float)
    low_headroom = np.asarray(batch.headroom_bytes, dtype=float) < LOW_HEADROOM * (peak + np.asarray(batch.headroom_bytes))
    keys = [cols[k] for k in reversed(KNOBS)] + [peak, cols["zero"], complexity(cols), low_headroom, bucket]
    idx = np.lexsort(keys)
    return idx[:keep]


# Families of structurally different layouts: the runner-ups are the best layout of each family
# other than the winner's (then the next best with another structure), so that a lead can choose.
FAMILY_OFFLOAD, FAMILY_CP, FAMILY_ZERO3 = 1, 2, 3


def family_codes(cols: dict) -> np.ndarray:
    """Offload (any), context parallel (cp > 1), ZeRO-3, else one family per (tp, pp)."""
    tp, pp = np.asarray(cols["tp"]), np.asarray(cols["pp"])
    code = 1000 + tp * 100_000 + pp
    code = np.where(np.asarray(cols["zero"]) == 3, FAMILY_ZERO3, code)
    code = np.where(np.asarray(cols["cp"]) > 1, FAMILY_CP, code)
    offload = ((np.asarray(cols["offload_optimizer"]) > 0) | (np.asarray(cols["offload_params"]) > 0)
               | (np.asarray(cols["offload_activations"]) > 0))
    return np.where(offload, FAMILY_OFFLOAD, code)


def family_label(code: int) -> str:
    code = int(code)
    fixed = {FAMILY_OFFLOAD: "offload", FAMILY_CP: "context parallel", FAMILY_ZERO3: "ZeRO-3"}
    if code in fixed:
        return fixed[code]
    return f"tp {(code - 1000) // 100_000} / pp {(code - 1000) % 100_000}"


SKELETON = STRUCTURAL       # the knob table's structural knobs


def alternatives(idx, cols, top_k, include=()) -> list[int]:
    """The best row, then the rows of `include` (shown whatever their family), then the best row of
    every other family in rank order, then rows whose structure (the knobs of SKELETON: not only the
    batch or the gradient-communication dtype) is new."""
    if not len(idx) or top_k <= 0:
        return []
    fam = family_codes(cols)
    chosen = [int(idx[0])] + [int(j) for j in include if int(j) != int(idx[0])][:top_k - 1]
    seen = {int(fam[j]) for j in chosen}
    for j in idx[1:]:
        if len(chosen) >= top_k:
            break
        if int(fam[j]) not in seen:
            seen.add(int(fam[j]))
            chosen.append(int(j))
    if len(chosen) < top_k:
        shapes = {tuple(int(cols[k][j]) for k in SKELETON) for j in chosen}
        for j in idx[1:]:
            if len(chosen) >= top_k:
                break
            shape = tuple(int(cols[k][j]) for k in SKELETON)
            if int(j) not in chosen and shape not in shapes:
                shapes.add(shape)
                chosen.append(int(j))
    position = np.empty(len(idx), dtype=np.int64)
    position[idx] = np.arange(len(idx))
    return sorted(chosen, key=lambda j: position[j])      # rank order
