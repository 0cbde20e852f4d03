"""Array-or-scalar helpers: the formulas run on numpy arrays (a batch of layouts) and on plain
Python numbers (one layout) alike; plain numbers skip numpy's per-call overhead."""
from __future__ import annotations

import math

import numpy as np


_ND = np.ndarray


def where(cond, a, b):
    # explicit isinstance checks: this runs thousands of times per scalar estimate
    if isinstance(cond, _ND) or isinstance(a, _ND) or isinstance(b, _ND):
        return np.where(cond, a, b)
    return a if cond else b


def maximum(a, b):
    if isinstance(a, _ND) or isinstance(b, _ND):
        return np.maximum(a, b)
    return a if a >= b else b


def minimum(a, b):
    if isinstance(a, _ND) or isinstance(b, _ND):
        return np.minimum(a, b)
    return a if a <= b else b


def clip(x, lo, hi):
    if isinstance(x, _ND) or isinstance(lo, _ND) or isinstance(hi, _ND):
        return np.clip(x, lo, hi)
    return min(max(x, lo), hi)


def ceil(x):
    return np.ceil(x) if isinstance(x, np.ndarray) else float(math.ceil(x))


def floor(x):
    return np.floor(x) if isinstance(x, np.ndarray) else float(math.floor(x))


def whole(x):
    """x is a whole number (for whole-number floats, `x / d` whole is `x % d == 0`, ten times faster
    on arrays than numpy's float modulo)."""
    if isinstance(x, np.ndarray):
        return np.floor(x) == x
    return math.floor(x) == x


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
