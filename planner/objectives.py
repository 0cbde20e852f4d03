"""Objectives (time, time-to-train, cost, memory) as arrays over a BatchEstimate, and Pareto fronts."""
from __future__ import annotations

import numpy as np

from costmodels.errors import SpecError
from costmodels.units import HOUR

OBJECTIVES = {
    "time": "seconds per token (= fastest step for a fixed batch; highest tokens/s)",
    "throughput": "same as time",
    "time-to-train": "wall time to train the token budget",
    "cost": "GPU-hours x price per GPU-hour to train the token budget",
    "memory": "largest memory headroom per GPU",
}


def parse_objectives(text: str) -> tuple[str, ...]:
    items = [t.strip() for t in str(text).split(",")]
    if len(items) > 1 and not all(items):          # 'time,' and ',time' (as --tp 1,,2 is refused)
        raise SpecError(f"--objective {str(text)[:40]!r} has an empty item; write one objective or two "
                        "separated by a comma, e.g. time,memory")
    names = tuple(t for t in items if t)
    if not names or len(names) > 2:
        raise SpecError("--objective takes one objective or two separated by a comma "
                        f"(a Pareto front); known: {', '.join(OBJECTIVES)}")
    for n in names:
        if n not in OBJECTIVES:
            raise SpecError(f"unknown objective '{n}'; known: {', '.join(OBJECTIVES)}")
    if len(set(names)) != len(names):
        raise SpecError(f"--objective names {names[0]} twice; a Pareto front needs two different objectives")
    return names


def objective_values(name: str, batch, total_tokens: float, price: float, num_gpus) -> np.ndarray:
    """Lower is better for every objective."""
    per_token = batch.step_time_s / batch.tokens_per_step
    if name in ("time", "throughput"):
        return per_token
    tokens = total_tokens or 1e12
    seconds = per_token * tokens
    if name == "time-to-train":
        return seconds
    if name == "cost":
        return seconds * np.asarray(num_gpus, float) / HOUR * (price or 1.0)
    if name == "memory":
        return -batch.headroom_bytes.astype(float)
    raise SpecError(f"unknown objective '{name}'")


def pareto_front(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Indices of the points no other point beats in both (lower is better), sorted by `a`."""
    idx = np.lexsort((b, a))
    front, best_b = [], np.inf
    for i in idx:
        if b[i] < best_b:
            front.append(i)
            best_b = b[i]
    return np.array(front, dtype=np.int64)
