"""Search orchestration: the layouts of a model on a cluster, best first.

Flow: build_space -> CP-SAT enumerates the feasible lattice (core x categorical, cross rules in
numpy) -> the lattice is scored in chunks (planner.lattice), or, above LATTICE_LIMIT layouts,
sampled by an Optuna study (planner.optuna_search) -> a Collector keeps what fits ->
planner.ranking orders it and picks the runner-ups -> every emitted plan is checked again by CP-SAT
-> planner.explain says why the best wins. planner.infeasible says why nothing came out.
"""
from __future__ import annotations

import time
from dataclasses import replace

from costmodels.errors import SpecError
from costmodels.estimate import estimate
from costmodels.types import ClusterSpec, ModelSpec
from costmodels.units import GiB
from search_spaces import cpsat
from search_spaces.constraints import Ctx
from search_spaces.frameworks import RulesProfile
from search_spaces.space import KNOBS, SearchRequest, build_space

from .collector import Collector, EstimateColumns
from .explain import why_best
from .infeasible import nothing_fits, rules_conflict
from .lattice import count_lattice, score_lattice, values_to_layout
from .optuna_search import run_study, seed_layouts
from .objectives import pareto_front
from .ranking import alternatives, family_codes, family_label, rank_rows
from .result import Plan, SearchResult
from .settings import SearchSettings
from .measured import measured_first
from .ties import safe_first

LATTICE_LIMIT = 4_000_000      # layouts scored exhaustively (about 10 s of estimates); above this Optuna samples
EXPAND_LIMIT = 200_000_000     # sub-lattice combinations the lattice filters by the cross rules (~30 s)
PARETO_SHOWN = 50              # layouts of a Pareto front kept in the result
CANDIDATES_SHOWN = 400         # (tokens/s/GPU, memory) points sampled for the report's scatter plot


def search(model: ModelSpec, cluster: ClusterSpec, profile: RulesProfile, request: SearchRequest,
           settings: SearchSettings = SearchSettings()) -> SearchResult:
    """The best `settings.top_k` plans (and a Pareto front for two objectives); raises
    InfeasibleError when no layout satisfies the rules or none fits in memory."""
    t0 = time.perf_counter()
    if cluster.num_gpus != request.num_gpus:
        cluster = replace(cluster, num_gpus=request.num_gpus)
    space = build_space(model, cluster, request)
    cost_fw = profile.load_cost_profile()
    core, cat, cross, truncated = cpsat.sub_lattices(space, profile.all_rules)
    if not len(core["tp"]) or not len(cat["zero"]):
        raise rules_conflict(space, profile, request)
    product = len(core["tp"]) * len(cat["zero"])
    counted = []          # count_lattice's (count, exact), when auto asked for it: the Optuna path reuses it

    def satisfying():
        counted.append(count_lattice(space, core, cat, cross))
        return counted[-1][0]
    method = choose_method(settings.method, product, truncated, satisfying)
    collector = Collector(settings, request, cluster)
    study_info = None
    if method == "lattice":
        lattice = score_lattice(space, cost_fw, collector, core, cat, cross, settings.progress)
        if lattice == 0:
            raise rules_conflict(space, profile, request)
    else:
        seeds = seed_layouts(space, cost_fw, core, cat, cross)
        lattice, exact = counted[-1] if counted else count_lattice(space, core, cat, cross)   # as the lattice path counts
        study_info = {**run_study(space, profile, cost_fw, settings, collector, seeds),
                      "layouts_satisfying_rules_exact": exact and not truncated}
    merged = collector.merged()
    if merged is None:
        raise nothing_fits(model, cluster, profile, request, space)
    cols, est, objs = merged
    idx = rank_rows(cols, EstimateColumns(est), objs[0], len(objs[0]))
    fams = family_codes(cols)

    def plan_at(rank, j, objective, check=True, family=""):
        values = {k: int(cols[k][j]) for k in KNOBS}
        return make_plan(rank, values, space, profile, cost_fw, objective, check=check, family=family)

    displaced, safety = None, ""
    if settings.objectives[0] != "memory":   # the memory objective already ranks by headroom
        idx, displaced, safety = safe_first(
            idx, est, cluster.gpu.hbm_bytes,
            lambda j: plan_at(0, j, tuple(float(o[j]) for o in objs), check=False),
            model, cluster, cost_fw, shown=settings.top_k > 1)
    measured_why = ""
    if settings.measured and settings.objectives[0] != "memory":
        idx, measured_why = measured_first(
            idx, lambda j: values_to_layout({k: int(cols[k][j]) for k in KNOBS}),
            lambda j: float(est["tokens_per_step"][j]), settings.measured)
    include = () if displaced is None else (displaced,)
    plans = tuple(plan_at(i + 1, j, tuple(float(o[j]) for o in objs), family=family_label(fams[j]))
                  for i, j in enumerate(alternatives(idx, cols, settings.top_k, include)))
    pareto = ()
    if len(objs) == 2:
        pareto = tuple(plan_at(0, j, (float(objs[0][j]), float(objs[1][j])), check=False)
                       for j in pareto_front(objs[0], objs[1])[:PARETO_SHOWN])
    why = [w for w in (measured_why, safety) if w] + why_best(plans[0], profile, space, Ctx(model, cluster, request.num_gpus),
                                                  cost_fw)
    return SearchResult(model=model, cluster=cluster, profile=profile, request=request, settings=settings,
                        plans=plans, pareto=pareto, method=method, considered=space.size(), checked=product,
                        lattice=lattice, scored=collector.scored, fitting=collector.fitting,
                        seconds=time.perf_counter() - t0, why=tuple(why), study=study_info,
                        candidates=scatter_points(idx, est))


def choose_method(asked: str, product: int, truncated: bool, satisfying=None) -> str:
    """lattice or optuna: `auto` scores the lattice unless more than LATTICE_LIMIT layouts satisfy the
    rules (`satisfying()`, a count sampled by count_lattice, asked only when the sub-lattices combine
    to more than that before the cross rules), it combines more than EXPAND_LIMIT, or CP-SAT truncated
    a sub-lattice. Many --seq-len and --recompute-layers values combine to 13 M layouts of which the
    cross rules keep 1%: the lattice scores them all in 5 s, an Optuna study of 3,000 trials took
    minutes. `exhaustive` is the lattice's old name."""
    if asked == "auto":
        if truncated or product > EXPAND_LIMIT:
            return "optuna"
        fits = product <= LATTICE_LIMIT or (satisfying is not None and satisfying() <= LATTICE_LIMIT)
        return "lattice" if fits else "optuna"
    if asked == "exhaustive":
        return "lattice"
    if asked not in ("lattice", "optuna"):
        raise SpecError(f"unknown search method '{asked}': use auto, lattice or optuna")
    return asked


def make_plan(rank, values, space, profile, cost_fw, objective, check=True, family="") -> Plan:
    """The Plan of one row of knob values, estimated; `check`: CP-SAT confirms it keeps every rule."""
    layout = values_to_layout(values)
    if check:
        broken = cpsat.check(space, profile.all_rules, {k: int(values[k]) for k in KNOBS})
        if broken:   # would be a bug: the lattice and the rules disagree
            raise AssertionError(f"plan breaks {', '.join(r.name for r in broken)}")
    return Plan(rank=rank, layout=layout, estimate=estimate(space.model, space.cluster, cost_fw, layout),
                objective=objective, family=family)


def scatter_points(idx, est) -> tuple:
    """[tokens/s/GPU, GiB] of up to CANDIDATES_SHOWN ranked layouts that fit, evenly sampled."""
    sample = idx[:: max(1, len(idx) // CANDIDATES_SHOWN)][:CANDIDATES_SHOWN]
    points = sorted({(round(float(est["tokens_per_s_per_gpu"][j]), 1),
                      round(float(est["peak_memory_bytes"][j]) / GiB, 3)) for j in sample})
    return tuple([tps, gib] for tps, gib in points)


__all__ = ["search", "choose_method", "make_plan", "LATTICE_LIMIT", "EXPAND_LIMIT"]
