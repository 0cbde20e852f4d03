"""Search orchestration: CP-SAT lattice + vectorised scoring, or an Optuna study when too large.

Flow: build_space -> CP-SAT enumerates the feasible lattice (core x categorical, cross rules in
numpy) -> estimate_batch scores it in chunks -> mask what fits -> rank -> top K; every emitted plan
is checked again by CP-SAT. When the lattice exceeds LATTICE_LIMIT layouts an Optuna study (TPE,
NSGA-II for two objectives) samples the same knobs, seeded with good layouts, with a fixed seed.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import os
import socket
import time
import warnings
from dataclasses import dataclass, field, replace

import numpy as np

from costmodels.errors import InfeasibleError, SpecError
from costmodels.estimate import estimate, estimate_batch
from costmodels.types import ClusterSpec, Estimate, Layout, LayoutBatch, ModelSpec, Sparsity
from costmodels.units import GiB, fmt_bytes
from search_spaces import cpsat
from search_spaces.constraints import Ctx
from search_spaces.frameworks import RulesProfile
from search_spaces.space import ENUMS, KNOBS, SearchRequest, Space, build_space

from .rank import objective_values, pareto_front

USER_CACHE = "user-cache"     # storage placeholder: an SQLite file in ~/.cache, made only if Optuna runs
LATTICE_LIMIT = 4_000_000      # layouts scored exhaustively; above this Optuna samples
SCORE_CHUNK = 400_000          # layouts per estimate_batch call (bounds memory)
KEEP = 512                     # best layouts kept per chunk for ranking and runner-ups


@dataclass(frozen=True)
class SearchSettings:
    objectives: tuple[str, ...] = ("time",)
    top_k: int = 5
    method: str = "auto"                 # auto | lattice | optuna | exhaustive (reference)
    storage: str | None = None           # Optuna storage URL (SQLite file or RDB)
    study_name: str | None = None
    seed: int = 0
    trials: int = 3000
    progress: object = None              # callable(done, total, best_value) or None


@dataclass(frozen=True)
class Plan:
    rank: int
    layout: Layout
    estimate: Estimate
    objective: tuple[float, ...]
    family: str = ""             # structural family (see family_codes): "tp 8 / pp 16", "ZeRO-3", ...

    def to_dict(self) -> dict:
        """rank, family, layout (plan.json keys), estimate (Estimate.to_dict) and objective values."""
        from .output import layout_dict

        return {"rank": self.rank, "family": self.family, "layout": layout_dict(self.layout),
                "estimate": self.estimate.to_dict(), "objective": [float(v) for v in self.objective]}

    def __repr__(self) -> str:
        from .text import layout_line

        return f"Plan(#{self.rank}: {layout_line(self.layout)}; {self.estimate!r})"


@dataclass
class PlanResult:
    model: ModelSpec
    cluster: ClusterSpec
    profile: RulesProfile
    request: SearchRequest
    settings: SearchSettings
    plans: list[Plan]                    # best first (top K)
    pareto: list[Plan]
    method: str
    considered: int                      # layouts in the search space (product of the domains)
    checked: int                         # layouts CP-SAT's sub-lattices combine to (rules checked in numpy)
    lattice: int                         # layouts satisfying every rule
    scored: int                          # layouts estimated
    fitting: int                         # of those, fitting in memory
    seconds: float
    why: list[str] = field(default_factory=list)
    study: dict | None = None
    candidates: list = field(default_factory=list)   # [tokens/s/GPU, GiB] of scored layouts that fit
    notes: list = field(default_factory=list)        # defaults and roundings applied to the inputs
    warnings: list = field(default_factory=list)     # advice.PlanWarning: what limits the plan, the fix
    currency: str = ""                               # of cluster.price_per_gpu_hour, as the user gave it

    @property
    def best(self) -> Plan:
        return self.plans[0]

    @property
    def runner_ups(self) -> list[Plan]:
        return self.plans[1:]

    @property
    def error_bands(self) -> dict:
        """80% bands of the best and the runner-ups, ties within model error, OOM risk (planner/ties.py):
        {"layout", "estimate", "runner_ups": [{"rank", "tie", "estimate"}], "ties"}."""
        from .ties import result_data
        return result_data(self)

    def to_dict(self) -> dict:
        """The JSON object of `planner plan --json` (plan.json without the emitted job)."""
        from .output import plan_to_dict

        return plan_to_dict(self)

    def write(self, out, force: bool = False, launcher: str = "deepspeed", probe: int = 0):
        """Write the job directory (launch.sh, ds_config.json, plan.json, report.md, figures) to `out`,
        atomically; an existing `out` is replaced only with `force`. Returns its path."""
        from .emit.writer import write_plan
        from .output import check_out_dir

        check_out_dir(out, force)
        return write_plan(self, out, force=force, launcher=launcher, probe=probe)

    def __repr__(self) -> str:
        head = (f"PlanResult({self.model.name} on {self.cluster.num_gpus} x {self.cluster.gpu.name}, "
                f"{self.profile.name}: ")
        if not self.plans:
            return head + "no plan)"
        return (head + f"best {self.best!r}; {len(self.runner_ups)} runner-ups, "
                f"{len(self.warnings)} warnings, {self.fitting:,} fitting layouts of {self.lattice:,})")


# ---- helpers -----------------------------------------------------------------------------------

def columns_to_batch(cols: dict) -> LayoutBatch:
    out = {k: np.asarray(v, dtype=np.int64) for k, v in cols.items() if k in KNOBS}
    out["sequence_parallel"] = out["sequence_parallel"].astype(bool)
    out["flash_attention"] = out["flash_attention"].astype(bool)
    out["density"] = np.where(out["sparsity"] == Sparsity.TWO_FOUR.code, 0.5, 1.0)
    n = len(out["tp"])
    for name in ("first_stage_layers", "last_stage_layers"):      # the search splits stages evenly
        out[name] = np.zeros(n, dtype=np.int64)
    return LayoutBatch(out)


def values_to_layout(values: dict) -> Layout:
    kwargs = {}
    for k in KNOBS:
        v = int(values[k])
        if k in ENUMS:
            v = ENUMS[k].from_code(v)
        elif k in ("sequence_parallel", "flash_attention"):
            v = bool(v)
        kwargs[k] = v
    kwargs["density"] = 0.5 if kwargs["sparsity"] is Sparsity.TWO_FOUR else 1.0
    return Layout(**kwargs)


def _tie_columns(cols: dict) -> list[np.ndarray]:
    return [cols[k] for k in reversed(KNOBS)]


TIE = 1e-4    # objective values within 0.01% count as equal
TIGHT_MEMORY = 0.10   # among equals, layouts leaving less than this share of GPU memory free rank last


def complexity(cols: dict) -> np.ndarray:
    """Moving parts a plan adds: offload, compressed communication, context or interleaved parallelism.
    Among equally fast plans the simpler one ranks first, then the one using less memory."""
    return (cols["offload_optimizer"] + cols["offload_params"] + (cols["grad_comm"] > 0)
            + (cols["cp"] > 1) + (cols["vpp"] > 1))


def _rank(cols, batch, values, keep):
    """Indices of the best `keep` rows. The tie rule: objective values within TIE (0.01%) are equal;
    among equals a layout with at least TIGHT_MEMORY (10%) of the GPU memory free ranks first (the
    memory estimate has a few percent of error), then the simpler layout (fewer moving parts, see
    `complexity`), then the lower ZeRO stage, then the one using less memory, then the layout's knobs
    in KNOBS order."""
    scale = max(np.abs(values).min(), 1e-300)
    bucket = np.floor(values / (scale * TIE))
    peak = np.asarray(batch.peak_memory_bytes, dtype=float)
    tight = np.asarray(batch.headroom_bytes, dtype=float) < TIGHT_MEMORY * (peak + np.asarray(batch.headroom_bytes))
    keys = _tie_columns(cols) + [peak, cols["zero"], complexity(cols), tight, bucket]
    idx = np.lexsort(keys)
    return idx[:keep]


# Families of structurally different layouts: the runner-ups are the best layout of each family
# other than the winner's (then the next best with another structure), so that a lead can choose.
FAMILY_OFFLOAD, FAMILY_CP, FAMILY_ZERO3 = 1, 2, 3


def family_codes(cols: dict) -> np.ndarray:
    """Offload (any), context parallel (cp > 1), ZeRO-3, else one family per (tp, pp)."""
    tp, pp = np.asarray(cols["tp"]), np.asarray(cols["pp"])
    code = 1000 + tp * 100_000 + pp
    code = np.where(np.asarray(cols["zero"]) == 3, FAMILY_ZERO3, code)
    code = np.where(np.asarray(cols["cp"]) > 1, FAMILY_CP, code)
    offload = (np.asarray(cols["offload_optimizer"]) > 0) | (np.asarray(cols["offload_params"]) > 0)
    return np.where(offload, FAMILY_OFFLOAD, code)


def family_label(code: int) -> str:
    code = int(code)
    fixed = {FAMILY_OFFLOAD: "offload", FAMILY_CP: "context parallel", FAMILY_ZERO3: "ZeRO-3"}
    if code in fixed:
        return fixed[code]
    return f"tp {(code - 1000) // 100_000} / pp {(code - 1000) % 100_000}"


_SKELETON = ("tp", "pp", "cp", "vpp", "mbs", "zero", "offload_optimizer", "offload_params", "recompute",
             "recompute_layers", "sequence_parallel", "precision", "seq_len")


def _alternatives(idx, cols, top_k) -> list[int]:
    """The best row, then the best row of every other family in rank order, then rows whose structure
    (the knobs of _SKELETON: not only the batch or the gradient-communication dtype) is new."""
    if not len(idx) or top_k <= 0:
        return []
    fam = family_codes(cols)
    chosen = [int(idx[0])]
    seen = {int(fam[idx[0]])}
    for j in idx[1:]:
        if len(chosen) >= top_k:
            break
        if int(fam[j]) not in seen:
            seen.add(int(fam[j]))
            chosen.append(int(j))
    if len(chosen) < top_k:
        shapes = {tuple(int(cols[k][j]) for k in _SKELETON) for j in chosen}
        for j in idx[1:]:
            if len(chosen) >= top_k:
                break
            shape = tuple(int(cols[k][j]) for k in _SKELETON)
            if int(j) not in chosen and shape not in shapes:
                shapes.add(shape)
                chosen.append(int(j))
    position = np.empty(len(idx), dtype=np.int64)
    position[idx] = np.arange(len(idx))
    return sorted(chosen, key=lambda j: position[j])      # rank order


class _Collector:
    """Keeps the best rows (and the Pareto candidates) across chunks."""

    def __init__(self, settings: SearchSettings, request: SearchRequest, cluster: ClusterSpec):
        self.s, self.req, self.cluster = settings, request, cluster
        self.kept: list[dict] = []
        self.scored = self.fitting = 0

    def add(self, cols: dict, batch):
        n = len(batch)
        self.scored += n
        fits = np.asarray(batch.fits)
        self.fitting += int(fits.sum())
        if not fits.any():
            return
        sel = np.flatnonzero(fits)
        sub_cols = {k: v[sel] for k, v in cols.items()}
        sub = {k: np.asarray(v)[sel] for k, v in batch.columns.items()}
        objs = [objective_values(o, _Cols(sub), self.req.total_tokens, self.cluster.price_per_gpu_hour,
                                 sub["num_gpus"]) for o in self.s.objectives]
        order = _rank(sub_cols, _Cols(sub), objs[0], len(sel))
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
        if not self.kept:
            return None
        cols = {k: np.concatenate([p["cols"][k] for p in self.kept]) for k in self.kept[0]["cols"]}
        est = {k: np.concatenate([p["est"][k] for p in self.kept]) for k in self.kept[0]["est"]}
        objs = [np.concatenate([p["obj"][i] for p in self.kept]) for i in range(len(self.s.objectives))]
        return cols, est, objs


class _Cols:
    """Attribute access over a dict of estimate columns (what rank.objective_values expects)."""

    def __init__(self, d):
        self.__dict__.update(d)
        self.columns = d

    def __len__(self):
        return len(self.columns["step_time_s"])


# ---- search paths ------------------------------------------------------------------------------

def _score_lattice(space, profile, cost_fw, settings, collector, core, cat, cross):
    nk = len(cat["zero"])
    per_chunk = max(1, SCORE_CHUNK // max(nk, 1))
    n_core = len(core["tp"])
    lattice = 0
    for start in range(0, n_core, per_chunk):
        rows = np.arange(start, min(start + per_chunk, n_core))
        cols = cpsat.expand(space, core, cat, cross, rows)
        n = len(cols["tp"])
        lattice += n
        if n:
            batch = estimate_batch(space.model, space.cluster, cost_fw, columns_to_batch(cols))
            collector.add(cols, batch)
        if settings.progress:
            settings.progress(min(start + per_chunk, n_core), n_core, None)
    return lattice


def study_fingerprint(space: Space, profile: RulesProfile, settings: SearchSettings) -> str:
    """What a study's trial values depend on: model, cluster (every field), GPUs, knob domains, rules,
    token budget and objectives (not the seed: workers of one study sample with their own seeds)."""
    key = json.dumps({
        "model": repr(space.model), "cluster": repr(space.cluster), "n": space.request.num_gpus,
        "domains": {k: list(v.domain) for k, v in space.knobs.items()}, "profile": profile.name,
        "objectives": settings.objectives, "tokens": space.request.total_tokens,
        **({"cost_overrides": list(profile.cost_overrides)} if profile.cost_overrides else {}),
    }, sort_keys=True, default=str)
    return hashlib.sha256(key.encode()).hexdigest()


def default_study_name(space: Space, profile: RulesProfile, settings: SearchSettings) -> str:
    key = study_fingerprint(space, profile, settings) + f"-seed{settings.seed}"
    return f"plan-{space.model.name}-{space.request.num_gpus}x{space.cluster.gpu.name}-" + \
        hashlib.sha256(key.encode()).hexdigest()[:12]


FAIL_LIMIT = 32       # failed trials (non-finite objective) before a search where most fail gives up


def _make_sampler(optuna, settings: SearchSettings, seed: int):
    if len(settings.objectives) == 2:
        return optuna.samplers.NSGAIISampler(seed=seed)
    return optuna.samplers.TPESampler(seed=seed, multivariate=True,
                                      n_startup_trials=min(200, settings.trials // 5))


def worker_seed(seed: int, first_trial_number: int) -> int:
    """Each worker's sampler seed: the --seed mixed with the number of the first trial it asked
    (unique per worker; 0 for a new study, so a single worker reproduces --seed exactly)."""
    return (int(seed) + 1_000_003 * int(first_trial_number)) % 2**32


def _optuna_search(space, profile, cost_fw, settings, collector, seeds):
    import optuna

    from search_spaces.optuna_space import broken_rules, params_to_values, seed_params, suggest_layout

    from .study import count_taken, open_study, public_storage, record_heartbeat

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    ctx = Ctx(space.model, space.cluster, space.request.num_gpus)
    rules = profile.all_rules
    two = len(settings.objectives) == 2
    n_obj = len(settings.objectives)
    storage_url = settings.storage
    if storage_url == USER_CACHE:
        from .output import cache_storage
        storage_url = cache_storage()
    name = settings.study_name or default_study_name(space, profile, settings)
    # Broken rules and memory over capacity are Optuna constraints (feasible when <= 0).
    study, storage, _ = open_study(optuna, name, storage_url, _make_sampler(optuna, settings, settings.seed),
                                   settings.objectives, study_fingerprint(space, profile, settings),
                                   [seed_params(v, space) for v in seeds])
    complete = optuna.trial.TrialState.COMPLETE
    done_before = len(study.get_trials(deepcopy=False, states=(complete,)))
    batch_size = 32
    penalty = 1e30
    reseeded = False
    failed = worked = 0              # estimated trials whose objective was not finite / was
    worker = f"{socket.gethostname()}:{os.getpid()}"     # which worker ran a trial (shared studies)
    # `trials` is the study's target: several workers sharing one storage count the trials complete
    # or in flight (theirs and the others') in the database before each batch, and near the target
    # (within four batches) before each trial, so together they stop at the target plus at most one
    # trial per other worker (asked between its count and ours); up to four workers far from it
    # cannot overshoot with their batches.
    while True:
        done = len(study.get_trials(deepcopy=False, states=(complete,)))
        remaining = settings.trials - count_taken(study, storage)
        if remaining <= 0:
            break
        trials = []
        for k in range(min(batch_size, remaining)):
            if k and storage is not None and remaining <= 4 * batch_size \
                    and count_taken(study, storage) >= settings.trials:
                break
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")      # "Heartbeat ... supposed to be used with Study.optimize"
                t = study.ask()
            record_heartbeat(storage, t)
            if storage is not None:
                t.set_user_attr("worker", worker)
            if not reseeded:
                reseeded = True
                study.sampler = _make_sampler(optuna, settings, worker_seed(settings.seed, t.number))
            trials.append(t)
        n = len(trials)
        rows = [suggest_layout(t, space) for t in trials]
        broken = broken_rules(rows, ctx, rules)
        ok = np.flatnonzero(broken == 0)
        values = [[penalty] * n_obj for _ in rows]
        excess = np.zeros(n)
        if len(ok):
            cols = {k: np.array([rows[i][k] for i in ok], dtype=np.int64) for k in KNOBS}
            batch = estimate_batch(space.model, space.cluster, cost_fw, columns_to_batch(cols))
            collector.add(cols, batch)
            objs = [objective_values(o, batch, space.request.total_tokens, space.cluster.price_per_gpu_hour,
                                     batch.num_gpus) for o in settings.objectives]
            for j, i in enumerate(ok):
                values[i] = [float(o[j]) for o in objs]
                excess[i] = max(0.0, -float(batch.headroom_bytes[j]) / GiB) + (0.0 if batch.host_fits[j] else 1.0)
        evaluated = set(ok.tolist())
        for i, (t, v) in enumerate(zip(trials, values)):
            finite = all(np.isfinite(x) for x in v)
            if not finite:
                failed += 1
            elif i in evaluated:            # a layout that was estimated (not one breaking rules) worked
                worked += 1
            try:
                if finite:
                    t.set_constraint("broken_rules", float(broken[i]))
                    t.set_constraint("memory_over_capacity_gib", float(excess[i]))
                    study.tell(t, v if two else v[0], skip_if_finished=True)
                else:
                    study.tell(t, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
            except optuna.exceptions.UpdateFinishedTrialError:
                pass              # finished by another worker (or failed as stale): nothing to tell
        if failed >= FAIL_LIMIT and failed > worked:
            raise SpecError(f"the search stopped: {failed} of its {failed + worked} estimated trials failed (the "
                            "objective is not a finite number); check --tokens, the price and the cluster's "
                            "quantities")
        if settings.progress:
            settings.progress(min(done + n, settings.trials), settings.trials, _best_value(study, two))
    if storage is not None:
        _wait_for_others(optuna, study)
    if settings.progress:
        done = len(study.get_trials(deepcopy=False, states=(complete,)))
        settings.progress(done, max(done, settings.trials), _best_value(study, two))
    # Trials told by other workers (shared storage) also count: re-score their layouts.
    others = study.get_trials(deepcopy=False, states=(complete,))
    rows = [params_to_values(t.params, space) for t in others]
    if rows:
        broken = broken_rules(rows, ctx, rules)
        ok = np.flatnonzero(broken == 0)
        if len(ok):
            cols = {k: np.array([rows[i][k] for i in ok], dtype=np.int64) for k in KNOBS}
            batch = estimate_batch(space.model, space.cluster, cost_fw, columns_to_batch(cols))
            collector.add(cols, batch)
    return {"name": name, "storage": public_storage(storage_url), "trials": len(study.trials),
            "completed": len(others), "resumed_from": done_before}


def _wait_for_others(optuna, study) -> None:
    """The target is reached counting trials in flight: wait until the other workers have told theirs
    (a worker that found the target reached must not report from a half-told study), at most as long
    as a trial may run before it counts as stale."""
    from .study import stale_after

    running = optuna.trial.TrialState.RUNNING
    deadline = time.monotonic() + stale_after()
    while study.get_trials(deepcopy=False, states=(running,)) and time.monotonic() < deadline:
        time.sleep(0.1)


def _best_value(study, two):
    try:
        if two:
            return None
        return study.best_value if study.best_value < 1e29 else None
    except ValueError:
        return None


def _seed_layouts(space, profile, cost_fw, core, cat, cross, n=16):
    """Good starting layouts for Optuna: the core lattice with the default categorical choices."""
    defaults = [i for i in range(len(cat["zero"]))
                if cat["recompute_layers"][i] == 0 and cat["offload_optimizer"][i] == 0
                and cat["offload_params"][i] == 0]
    if not defaults:
        return []
    sub_cat = {k: v[defaults] for k, v in cat.items()}
    take = np.arange(min(len(core["tp"]), max(1, SCORE_CHUNK // max(len(defaults), 1))))
    cols = cpsat.expand(space, core, sub_cat, cross, take)
    if not len(cols["tp"]):
        return []
    batch = estimate_batch(space.model, space.cluster, cost_fw, columns_to_batch(cols))
    vals = np.where(batch.fits, batch.step_time_s / batch.tokens_per_step, np.inf)
    best = np.argsort(vals, kind="stable")[:n]
    return [{k: int(cols[k][i]) for k in KNOBS} for i in best if np.isfinite(vals[i])]


def exhaustive_reference(space: Space, profile: RulesProfile, objective: str = "time"):
    """Reference: every combination of the knob domains, rules checked row by row, scalar estimates.
    Slow by design (no CP-SAT, no vectorisation); used to check the planner's optimum."""
    cost_fw = profile.load_cost_profile()
    ctx = Ctx(space.model, space.cluster, space.request.num_gpus)
    names = [k for k in KNOBS if k != "dp"]
    best, best_value = None, np.inf
    for combo in itertools.product(*(space.domain(k) for k in names)):
        values = dict(zip(names, combo))
        mp = values["tp"] * values["pp"] * values["cp"]
        if space.request.num_gpus % mp:
            continue
        values["dp"] = space.request.num_gpus // mp
        cols = {k: np.array([values[k]]) for k in KNOBS}
        if not all(bool(np.asarray(r.holds(ctx, cols)).reshape(-1)[0]) for r in profile.all_rules):
            continue
        layout = values_to_layout(values)
        est = estimate(space.model, space.cluster, cost_fw, layout)
        if not est.fits:
            continue
        value = {"time": est.step_time_s / est.tokens_per_step,
                 "memory": -est.headroom_bytes}.get(objective, est.step_time_s / est.tokens_per_step)
        if value < best_value:
            best, best_value = layout, value
    return best, best_value


# ---- the entry point ---------------------------------------------------------------------------

def search(model: ModelSpec, cluster: ClusterSpec, profile: RulesProfile, request: SearchRequest,
           settings: SearchSettings = SearchSettings()) -> PlanResult:
    t0 = time.perf_counter()
    if cluster.num_gpus != request.num_gpus:
        cluster = replace(cluster, num_gpus=request.num_gpus)
    space = build_space(model, cluster, request)
    cost_fw = profile.load_cost_profile()
    rules = profile.all_rules
    core, cat, cross, truncated = cpsat.sub_lattices(space, rules)
    considered = space.size()
    if not len(core["tp"]) or not len(cat["zero"]):
        raise _rules_conflict(space, profile, request)
    product = len(core["tp"]) * len(cat["zero"])
    method = settings.method
    if method == "auto":
        method = "lattice" if product <= LATTICE_LIMIT and not truncated else "optuna"
    if method == "exhaustive":
        method = "lattice"
    collector = _Collector(settings, request, cluster)
    study_info = None
    if method == "lattice":
        lattice = _score_lattice(space, profile, cost_fw, settings, collector, core, cat, cross)
    elif method == "optuna":
        seeds = _seed_layouts(space, profile, cost_fw, core, cat, cross)
        study_info = _optuna_search(space, profile, cost_fw, settings, collector, seeds)
        lattice = product
    else:
        raise SpecError(f"unknown search method '{settings.method}': use auto, lattice or optuna")
    if method == "lattice" and lattice == 0:
        raise _rules_conflict(space, profile, request)
    merged = collector.merged()
    if merged is None:
        raise _nothing_fits(model, cluster, profile, request, settings, space)
    cols, est, objs = merged
    idx = _rank(cols, _Cols(est), objs[0], len(objs[0]))
    top = _alternatives(idx, cols, settings.top_k)
    fams = family_codes(cols)
    ctx = Ctx(model, cluster, request.num_gpus)
    plans = [_plan(i + 1, {k: int(cols[k][j]) for k in KNOBS}, model, cluster, cost_fw, profile, space,
                   tuple(float(o[j]) for o in objs), family=family_label(fams[j])) for i, j in enumerate(top)]
    pareto = []
    if len(objs) == 2:
        front = pareto_front(objs[0], objs[1])
        pareto = [_plan(0, {k: int(cols[k][j]) for k in KNOBS}, model, cluster, cost_fw, profile, space,
                        (float(objs[0][j]), float(objs[1][j])), check=False) for j in front[:50]]
    sample = idx[:: max(1, len(idx) // 400)][:400]
    candidates = sorted({(round(float(est["tokens_per_s_per_gpu"][j]), 1), round(float(est["peak_memory_bytes"][j]) / GiB, 3))
                         for j in sample})
    result = PlanResult(model=model, cluster=cluster, profile=profile, request=request, settings=settings,
                        plans=plans, pareto=pareto, method=method, considered=considered, checked=product,
                        lattice=lattice,
                        scored=collector.scored, fitting=collector.fitting,
                        seconds=time.perf_counter() - t0, study=study_info,
                        candidates=[list(c) for c in candidates])
    from .explain import why_best
    result.why = why_best(result, space, ctx, cost_fw)
    result.seconds = time.perf_counter() - t0
    return result


def _plan(rank, values, model, cluster, cost_fw, profile, space, objective, check=True, family="") -> Plan:
    layout = values_to_layout(values)
    if check:
        broken = cpsat.check(space, profile.all_rules, {k: int(values[k]) for k in KNOBS})
        if broken:   # would be a bug: the lattice and the rules disagree
            raise AssertionError(f"plan breaks {', '.join(r.name for r in broken)}")
    return Plan(rank=rank, layout=layout, estimate=estimate(model, cluster, cost_fw, layout), objective=objective,
                family=family)


def _rules_conflict(space: Space, profile: RulesProfile, request: SearchRequest) -> InfeasibleError:
    rules = cpsat.conflicting_rules(space, profile.all_rules)
    ctx = Ctx(space.model, space.cluster, request.num_gpus)
    texts = [r.describe(ctx, profile.name) for r in rules]
    pinned = sorted({k for r in rules for k in r.knobs if k in request.choices})
    hint = f"; free {', '.join('--' + k.replace('_', '-') for k in pinned)}" if pinned else ""
    if not texts:
        texts = ["no layout satisfies the rules"]
    return InfeasibleError("no layout satisfies the rules: " + "; ".join(texts) + hint,
                           reasons=tuple(r.name for r in rules))


def _nothing_fits(model, cluster, profile, request, settings, space) -> InfeasibleError:
    """Nothing fits in memory: say the smallest GPU count that would, and which knobs would help."""
    min_gpus = None
    quick = SearchSettings(objectives=("memory",), top_k=1, method="lattice")
    n = request.num_gpus
    step = cluster.gpus_per_node if n >= cluster.gpus_per_node else n
    candidates = sorted({n * 2**k for k in range(1, 13)} | {n + step * k for k in range(1, 8)})
    for n2 in candidates:
        if n2 > 10_000_000:
            break
        try:
            req2 = replace(request, num_gpus=n2)
            sp2 = build_space(model, replace(cluster, num_gpus=n2), req2)
            core, cat, cross, _ = cpsat.sub_lattices(sp2, profile.all_rules)
            if not len(core["tp"]) or not len(cat["zero"]):
                continue
            cost_fw = profile.load_cost_profile()
            coll = _Collector(quick, req2, cluster)
            _score_lattice(sp2, profile, cost_fw, quick, coll, core, cat, cross)
            if coll.fitting:
                min_gpus = n2
                break
        except SpecError:
            continue
    freed = [k for k in ("zero", "offload_optimizer", "offload_params", "recompute", "precision", "mbs", "tp", "pp")
             if k in request.choices]
    hint = f"; or free {', '.join('--' + k.replace('_', '-') for k in freed)}" if freed else ""
    lowest = _lowest_memory(model, cluster, profile, space)
    need = f" (the leanest layout needs {fmt_bytes(lowest)} per GPU, the {cluster.gpu.name} has " \
           f"{fmt_bytes(cluster.gpu.hbm_bytes)})" if lowest else ""
    if min_gpus:
        msg = f"no layout fits in memory on {n} x {cluster.gpu.name}{need}; needs at least {min_gpus} GPUs{hint}"
    else:
        msg = f"no layout fits in memory on {n} x {cluster.gpu.name}{need}; try a GPU with more memory{hint}"
    return InfeasibleError(msg, min_gpus=min_gpus)


def _lowest_memory(model, cluster, profile, space) -> float | None:
    core, cat, cross, _ = cpsat.sub_lattices(space, profile.all_rules)
    if not len(core["tp"]) or not len(cat["zero"]):
        return None
    cost_fw = profile.load_cost_profile()
    best = None
    nk = len(cat["zero"])
    per = max(1, SCORE_CHUNK // nk)
    for start in range(0, len(core["tp"]), per):
        cols = cpsat.expand(space, core, cat, cross, np.arange(start, min(start + per, len(core["tp"]))))
        if len(cols["tp"]):
            b = estimate_batch(model, cluster, cost_fw, columns_to_batch(cols))
            low = float(np.min(b.peak_memory_bytes))
            best = low if best is None else min(best, low)
    return best


__all__ = ["search", "SearchSettings", "PlanResult", "Plan", "exhaustive_reference", "LATTICE_LIMIT",
           "values_to_layout", "columns_to_batch", "default_study_name"]
