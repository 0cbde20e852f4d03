"""Optuna encoding of the space: define-by-run suggestions over the fixed knob domains.

Each knob is one `suggest_categorical` over its domain (the same domain CP-SAT uses, fixed per
name so that TPE's per-parameter models stay valid); dp follows from the GPU count. A trial that
breaks rules is kept, with the number of broken rules as an Optuna constraint, so the sampler
learns where the feasible region lies.
"""
from __future__ import annotations

import numpy as np

from .constraints import Ctx
from .layouts import data_parallel
from .space import CORE_KNOBS, KNOBS, Space

SUGGESTED = tuple(k for k in KNOBS if k != "dp")


def suggest_layout(trial, space: Space) -> dict:
    """Knob values (integer codes) for one trial; dp = GPUs / (tp * pp * cp), 0 if not whole."""
    values = {}
    for name in SUGGESTED:
        domain = space.domain(name)
        values[name] = int(domain[0]) if len(domain) == 1 else int(trial.suggest_categorical(name, list(domain)))
    values["dp"] = data_parallel(space.request.num_gpus, values["tp"], values["pp"], values["cp"])
    return values


def params_to_values(params: dict, space: Space) -> dict:
    """A trial's stored params (possibly from another process) -> knob values."""
    values = {}
    for name in SUGGESTED:
        domain = space.domain(name)
        values[name] = int(params.get(name, domain[0]))
    values["dp"] = data_parallel(space.request.num_gpus, values["tp"], values["pp"], values["cp"])
    return values


def broken_rules(rows: list[dict], ctx: Ctx, rules) -> np.ndarray:
    """Number of rules each row breaks (vectorised over rows)."""
    cols = {k: np.array([r[k] for r in rows], dtype=np.int64) for k in KNOBS}
    safe = dict(cols)
    safe["dp"] = np.maximum(cols["dp"], 1)          # rules divide by dp; the world rule catches 0
    count = np.zeros(len(rows), dtype=np.int64)
    for rule in rules:
        count += ~np.broadcast_to(rule.holds(ctx, safe), count.shape)
    count += cols["dp"] == 0
    return count


def seed_params(values: dict, space: Space) -> dict:
    """Knob values -> params for `study.enqueue_trial` (only knobs with a choice)."""
    return {k: int(values[k]) for k in SUGGESTED if len(space.domain(k)) > 1}


__all__ = ["suggest_layout", "params_to_values", "broken_rules", "seed_params", "CORE_KNOBS"]
