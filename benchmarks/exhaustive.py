"""A slow reference for the planner's optimum: every combination of the knob domains, the rules
checked row by row, scalar estimates (no CP-SAT, no vectorisation). Used by tests/planner/test_search.py
and benchmarks/search.py; not part of the planner."""
from __future__ import annotations

import itertools

import numpy as np

from costmodels.estimate import estimate
from search_spaces.constraints import Ctx
from search_spaces.frameworks import RulesProfile
from search_spaces.layouts import data_parallel
from search_spaces.space import KNOBS, Space

from planner.lattice import values_to_layout


def exhaustive_reference(space: Space, profile: RulesProfile, objective: str = "time"):
    """The best layout of `space` that fits (with the caching allocator's cache, as the search requires:
    a tight layout is not proposed) and its objective value (time per token, or minus the memory
    headroom), found by trying every combination."""
    cost_fw = profile.load_cost_profile()
    ctx = Ctx(space.model, space.cluster, space.request.num_gpus)
    names = [k for k in KNOBS if k != "dp"]
    best, best_value = None, np.inf
    for combo in itertools.product(*(space.domain(k) for k in names)):
        values = dict(zip(names, combo))
        values["dp"] = data_parallel(space.request.num_gpus, values["tp"], values["pp"], values["cp"])
        if not values["dp"]:
            continue
        cols = {k: np.array([values[k]]) for k in KNOBS}
        if not all(bool(np.asarray(r.holds(ctx, cols)).reshape(-1)[0]) for r in profile.all_rules):
            continue
        layout = values_to_layout(values)
        est = estimate(space.model, space.cluster, cost_fw, layout)
        if not est.fits or est.tight:
            continue
        value = {"time": est.step_time_s / est.tokens_per_step,
                 "memory": -est.headroom_bytes}.get(objective, est.step_time_s / est.tokens_per_step)
        if value < best_value:
            best, best_value = layout, value
    return best, best_value
