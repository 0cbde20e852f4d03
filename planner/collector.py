"""Keeps the best scored layouts across chunks (lattice) or batches of trials (Optuna): those that
fit, ranked by the first objective, the best of every family and the Pareto candidates."""
from __future__ import annotations

import numpy as np

from .objectives import objective_values, pareto_front
from .ranking import family_codes, rank_rows

KEEP = 512                     # best layouts kept per chunk for ranking and runner-ups


class EstimateColumns:
    """Attribute access over a dict of estimate columns (what objectives.objective_values expects)."""

    def __init__(self, d):
        self.__dict__.update(d)
        self.columns = d

    def __len__(self):
        return len(self.columns["step_time_s"])


class Collector:
    """Counts the layouts scored and fitting; keeps the rows worth ranking."""

    def __init__(self, settings, request, cluster):
        self.s, self.req, self.cluster = settings, request, cluster
        self.kept: list[dict] = []
        self.scored = self.fitting = 0

    def add(self, cols: dict, batch):
        n = len(batch)
        self.scored += n
        # The search proposes layouts that fit with the caching allocator's cache; a tight one (runs
        # only when the allocator gives its cache back) is estimated, not proposed.
        fits = np.asarray(batch.fits_with_cache)
        self.fitting += int(fits.sum())
        if not fits.any():
            return
        sel = np.flatnonzero(fits)
        sub_cols = {k: v[sel] for k, v in cols.items()}
        sub = {k: np.asarray(v)[sel] for k, v in batch.columns.items()}
        objs = [objective_values(o, EstimateColumns(sub), self.req.total_tokens, self.cluster.price_per_gpu_hour,
                                 sub["num_gpus"]) for o in self.s.objectives]
        order = rank_rows(sub_cols, EstimateColumns(sub), objs[0], len(sel))
        pick = set(order[:KEEP].tolist())
        _, first = np.unique(family_codes(sub_cols)[order], return_index=True)
        pick |= set(order[first].tolist())                 # the best of every family, for the runner-ups
        if len(objs) == 2:
            pick |= set(pareto_front(objs[0], objs[1]).tolist())
        pick = np.array(sorted(pick), dtype=np.int64)
        self.kept.append({"cols": {k: v[pick] for k, v in sub_cols.items()},
                          "est": {k: v[pick] for k, v in sub.items()},
                          "obj": [o[pick] for o in objs]})

    def merged(self):
        """(knob columns, estimate columns, objective arrays) of every kept row, or None."""
        if not self.kept:
            return None
        cols = {k: np.concatenate([p["cols"][k] for p in self.kept]) for k in self.kept[0]["cols"]}
        est = {k: np.concatenate([p["est"][k] for p in self.kept]) for k in self.kept[0]["est"]}
        objs = [np.concatenate([p["obj"][i] for p in self.kept]) for i in range(len(self.s.objectives))]
        return cols, est, objs
