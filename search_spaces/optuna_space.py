"""Optuna encoding of the space: define-by-run suggestions over the fixed knob domains.

Each knob is one `suggest_categorical` over its domain (the same domain CP-SAT uses, fixed per
name so that TPE's per-parameter models stay valid); dp follows from the GPU count. A trial that
breaks rules is kept, with the number of broken rules as an Optuna constraint, so the sampler
learns where the feasible region lies.

Trials store knob values as people write them (PARAMS_ENCODING): enum knobs by name ("bf16",
"cpu", "selective"), on/off knobs as true/false, numbers as numbers, so a stored study reads well
in optuna-dashboard. The rest of the search works on integer codes: `suggest_layout` and
`params_to_values` give codes, `seed_params` takes them.
"""
from __future__ import annotations

import numpy as np

from .constraints import Ctx
from .layouts import data_parallel
from .space import BOOLS, CORE_KNOBS, ENUMS, KNOBS, Space

SUGGESTED = tuple(k for k in KNOBS if k != "dp")
PARAMS_ENCODING = "labels"      # recorded in a study's attributes; older studies stored integer codes


def to_param(name: str, code) -> int | bool | str:
    """A knob's integer code -> its stored value (enum name, true/false or the number)."""
    if name in ENUMS:
        return ENUMS[name].from_code(int(code)).value
    if name in BOOLS:
        return bool(code)
    return int(code)


def from_param(name: str, value) -> int:
    """A stored value -> the knob's integer code (inverse of `to_param`)."""
    if name in ENUMS:
        return ENUMS[name](value).code
    return int(bool(value)) if name in BOOLS else int(value)


def _with_dp(values: dict, space: Space) -> dict:
    values["dp"] = data_parallel(space.request.num_gpus, values["tp"], values["pp"], values["cp"])
    return values


def suggest_layout(trial, space: Space) -> dict:
    """Knob values (integer codes) for one trial; dp = GPUs / (tp * pp * cp), 0 if not whole."""
    values = {}
    for name in SUGGESTED:
        domain = space.domain(name)
        if len(domain) == 1:
            values[name] = int(domain[0])
        else:
            choices = [to_param(name, v) for v in domain]
            values[name] = from_param(name, trial.suggest_categorical(name, choices))
    return _with_dp(values, space)


def params_to_values(params: dict, space: Space) -> dict:
    """A trial's stored params (possibly from another process) -> knob values (integer codes)."""
    values = {}
    for name in SUGGESTED:
        values[name] = from_param(name, params[name]) if name in params else int(space.domain(name)[0])
    return _with_dp(values, space)


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
    """Knob values (integer codes) -> params for `study.enqueue_trial` (only knobs with a choice)."""
    return {k: to_param(k, values[k]) for k in SUGGESTED if len(space.domain(k)) > 1}


__all__ = ["suggest_layout", "params_to_values", "broken_rules", "seed_params", "to_param", "from_param",
           "PARAMS_ENCODING", "CORE_KNOBS"]
