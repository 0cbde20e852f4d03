"""Array-or-scalar helpers: the formulas run on numpy arrays (a batch of layouts) and on plain
Python numbers (one layout) alike; plain numbers skip numpy's per-call overhead."""
from __future__ import annotations

import math

import numpy as np


def _any_array(*xs) -> bool:
    return any(isinstance(x, np.ndarray) for x in xs)


def where(cond, a, b):
    if _any_array(cond, a, b):
        return np.where(cond, a, b)
    return a if cond else b


def maximum(a, b):
    if _any_array(a, b):
        return np.maximum(a, b)
    return a if a >= b else b


def minimum(a, b):
    if _any_array(a, b):
        return np.minimum(a, b)
    return a if a <= b else b


def clip(x, lo, hi):
    if _any_array(x, lo, hi):
        return np.clip(x, lo, hi)
    return min(max(x, lo), hi)


def ceil(x):
    return np.ceil(x) if isinstance(x, np.ndarray) else float(math.ceil(x))


def floor(x):
    return np.floor(x) if isinstance(x, np.ndarray) else float(math.floor(x))


def asf(x):
    """Float array, or a Python float for a scalar."""
    if isinstance(x, np.ndarray):
        return x.astype(float, copy=False)
    return float(x)


def asv(x):
    """Arrays stay arrays; scalars (numbers, numpy scalars) become Python numbers."""
    if isinstance(x, np.ndarray):
        return x if x.ndim else x.item()
    if isinstance(x, np.generic):
        return x.item()
    return x


def lookup(table, index):
    """table[index] for an integer code (Python value) or an array of codes."""
    if isinstance(index, np.ndarray):
        return np.asarray(table)[index]
    return table[int(index)]
