"""Layout <-> knob values, the one converter pair, and the data-parallel degree.

Knob values are the search's integers (enum knobs as their codes, booleans as 0/1), keyed by the
knob names of the table in knobs.py; a column holds one such value per layout.
"""
from __future__ import annotations

import numpy as np

from costmodels.types import Layout, LayoutBatch, Sparsity

from .knobs import BOOL, ENUM, KNOBS, SEARCHED, TABLE


def data_parallel(num_gpus: int, tp: int, pp: int, cp: int) -> int:
    """dp = GPUs / (tp * pp * cp); 0 when that is not whole."""
    mp = tp * pp * cp
    return num_gpus // mp if num_gpus % mp == 0 else 0


def sparsity_density(sparsity):
    """Kept weights: 2:4 sparsity keeps half."""
    return np.where(np.asarray(sparsity) == Sparsity.TWO_FOUR.code, 0.5, 1.0)


def layout_values(layout: Layout) -> dict[str, int]:
    """A Layout -> its knob values (integers)."""
    return {k.name: int(getattr(layout, k.name).code if k.kind == ENUM else getattr(layout, k.name))
            for k in SEARCHED}


def values_to_layout(values: dict) -> Layout:
    """Knob values -> a Layout; density follows from sparsity, the pipeline splits evenly."""
    kwargs = {}
    for k in SEARCHED:
        v = int(values[k.name])
        kwargs[k.name] = k.enum.from_code(v) if k.kind == ENUM else bool(v) if k.kind == BOOL else v
    kwargs["density"] = float(sparsity_density(kwargs["sparsity"].code))
    return Layout(**kwargs)


def layout_columns(layout: Layout) -> dict[str, np.ndarray]:
    """A Layout as one-row columns (the rules' input), with its pipeline split (not searched)."""
    cols = {k: np.array([v], dtype=np.int64) for k, v in layout_values(layout).items()}
    for name in ("first_stage_layers", "last_stage_layers"):
        cols[name] = np.array([getattr(layout, name)], dtype=np.int64)
    return cols


def columns_to_batch(cols: dict) -> LayoutBatch:
    """Columns of knob values -> a LayoutBatch, as `values_to_layout` does row by row."""
    out = {k: np.asarray(v, dtype=np.int64) for k, v in cols.items() if k in KNOBS}
    for k in SEARCHED:
        if k.kind == BOOL:
            out[k.name] = out[k.name].astype(bool)
    out["density"] = sparsity_density(out["sparsity"])
    n = len(out["tp"])
    for k in TABLE:
        if not k.searched and k.name not in out:      # the search splits stages evenly
            out[k.name] = np.full(n, k.default, dtype=np.int64)
    return LayoutBatch(out)
