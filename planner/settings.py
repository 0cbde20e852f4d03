"""What a search is asked to do: the objectives, how many plans, which method, the Optuna study."""
from __future__ import annotations

from dataclasses import dataclass

USER_CACHE = "user-cache"     # storage placeholder: an SQLite file in ~/.cache, made only if Optuna runs


@dataclass(frozen=True)
class SearchSettings:
    objectives: tuple[str, ...] = ("time",)
    top_k: int = 5
    method: str = "auto"                 # auto | lattice | optuna | exhaustive (the lattice, by its old name)
    storage: str | None = None           # Optuna storage URL (SQLite file or RDB), or USER_CACHE
    study_name: str | None = None
    seed: int = 0
    trials: int = 3000
    progress: object = None              # callable(done, total, best_value) or None
    notify: object = None                # callable(line): one-line notices ("resumed study ..."), or None
    measured: dict = None                # {layout key: measured step s} of a calibration's runs (planner.measured)
