"""The Optuna path of the search, for lattices too large to score: a study (TPE, NSGA-II for two
objectives, fixed seed) samples the same knobs, starts from good layouts, learns the rules and the
memory limit as constraints, and may be shared by several workers (planner.study)."""
from __future__ import annotations

import time
import warnings

import numpy as np

from costmodels.errors import SpecError
from costmodels.estimate import estimate_batch
from costmodels.units import GiB
from search_spaces import cpsat
from search_spaces.constraints import Ctx
from search_spaces.space import KNOBS

from .lattice import SCORE_CHUNK, columns_to_batch
from .objectives import objective_values
from .settings import USER_CACHE, SearchSettings

FAIL_LIMIT = 32       # failed trials (non-finite objective) before a search where most fail gives up


def make_sampler(optuna, settings: SearchSettings, seed: int):
    if len(settings.objectives) == 2:
        return optuna.samplers.NSGAIISampler(seed=seed)
    return optuna.samplers.TPESampler(seed=seed, multivariate=True,
                                      n_startup_trials=min(200, settings.trials // 5))


def worker_seed(seed: int, first_trial_number: int) -> int:
    """Each worker's sampler seed: the --seed mixed with the number of the first trial it asked
    (unique per worker; 0 for a new study, so a single worker reproduces --seed exactly)."""
    return (int(seed) + 1_000_003 * int(first_trial_number)) % 2**32


def run_study(space, profile, cost_fw, settings, collector, seeds) -> dict:
    """Sample the space in an Optuna study (created or resumed), adding every layout estimated to
    `collector`; returns the study's name, storage, trial counts and whether it was resumed."""
    import optuna

    from search_spaces.optuna_space import seed_params

    from .study import count_taken, default_study_name, open_study, public_storage, study_attrs, study_fingerprint

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    ctx = Ctx(space.model, space.cluster, space.request.num_gpus)
    two = len(settings.objectives) == 2
    storage_url = settings.storage
    if storage_url == USER_CACHE:
        from .outdir import cache_storage
        storage_url = cache_storage()
    name = settings.study_name or default_study_name(space, profile, settings)
    # Broken rules and memory over capacity are Optuna constraints (feasible when <= 0).
    study, storage, created = open_study(optuna, name, storage_url, make_sampler(optuna, settings, settings.seed),
                                         settings.objectives, study_fingerprint(space, profile, settings),
                                         [seed_params(v, space) for v in seeds],
                                         attrs=study_attrs(space, profile, settings))
    complete = optuna.trial.TrialState.COMPLETE
    done_before = len(study.get_trials(deepcopy=False, states=(complete,)))
    if not created and settings.notify:
        settings.notify(f"resumed study '{name}': {done_before} trials done")
    asker = _Asker(optuna, study, storage, settings)
    failed = worked = 0              # estimated trials whose objective was not finite / was
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
        trials = asker.batch(remaining)
        values, broken, excess, evaluated = _score_trials(trials, space, ctx, profile.all_rules, cost_fw, settings,
                                                          collector)
        f, w = _tell(optuna, study, trials, values, broken, excess, evaluated, two)
        failed, worked = failed + f, worked + w
        if failed >= FAIL_LIMIT and failed > worked:
            raise SpecError(f"the search stopped: {failed} of its {failed + worked} estimated trials failed (the "
                            "objective is not a finite number); check --tokens, the price and the cluster's "
                            "quantities")
        if settings.progress:
            settings.progress(min(done + len(trials), settings.trials), settings.trials, best_value(study, two))
    if storage is not None:
        wait_for_others(optuna, study)
    if settings.progress:
        done = len(study.get_trials(deepcopy=False, states=(complete,)))
        settings.progress(done, max(done, settings.trials), best_value(study, two))
    completed = _rescore_completed(study, complete, space, ctx, profile.all_rules, cost_fw, collector)
    return {"name": name, "storage": public_storage(storage_url), "trials": len(study.trials),
            "completed": completed, "resumed": not created, "resumed_from": done_before}


BATCH_SIZE = 32          # trials asked, estimated and told together
PENALTY = 1e30           # the objective value of a trial whose layout breaks rules (not estimated)


class _Asker:
    """Asks the study for a batch of trials; re-seeds the sampler once, from the first trial's number
    (see worker_seed), and marks each trial with its worker and a heartbeat."""

    def __init__(self, optuna, study, storage, settings):
        self.optuna, self.study, self.storage, self.settings = optuna, study, storage, settings
        self.reseeded = False
        from .study import this_worker
        self.worker = this_worker()          # which worker ran a trial (shared studies)

    def batch(self, remaining: int) -> list:
        from .study import WORKER_ATTR, count_taken, record_heartbeat

        trials = []
        for k in range(min(BATCH_SIZE, remaining)):
            if k and self.storage is not None and remaining <= 4 * BATCH_SIZE \
                    and count_taken(self.study, self.storage) >= self.settings.trials:
                break
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")      # "Heartbeat ... supposed to be used with Study.optimize"
                t = self.study.ask()
            record_heartbeat(self.storage, t)
            if self.storage is not None:
                t.set_user_attr(WORKER_ATTR, self.worker)
            if not self.reseeded:
                self.reseeded = True
                self.study.sampler = make_sampler(self.optuna, self.settings, worker_seed(self.settings.seed, t.number))
            trials.append(t)
        return trials


def _score_trials(trials, space, ctx, rules, cost_fw, settings, collector):
    """Each trial's objective values (PENALTY where it breaks rules), broken-rule counts, memory over
    capacity (GiB, +1 when the host memory does not suffice) and the indices that were estimated."""
    from search_spaces.optuna_space import broken_rules, suggest_layout

    rows = [suggest_layout(t, space) for t in trials]
    broken = broken_rules(rows, ctx, rules)
    ok = np.flatnonzero(broken == 0)
    values = [[PENALTY] * len(settings.objectives) for _ in rows]
    excess = np.zeros(len(rows))
    if len(ok):
        cols = {k: np.array([rows[i][k] for i in ok], dtype=np.int64) for k in KNOBS}
        batch = estimate_batch(space.model, space.cluster, cost_fw, columns_to_batch(cols))
        collector.add(cols, batch)
        objs = [objective_values(o, batch, space.request.total_tokens, space.cluster.price_per_gpu_hour,
                                 batch.num_gpus) for o in settings.objectives]
        for j, i in enumerate(ok):
            values[i] = [float(o[j]) for o in objs]
            excess[i] = max(0.0, -float(batch.headroom_bytes[j]) / GiB) + (0.0 if batch.host_fits[j] else 1.0)
    return values, broken, excess, set(ok.tolist())


def _tell(optuna, study, trials, values, broken, excess, evaluated, two) -> tuple[int, int]:
    """Tell the study each trial's values and constraints (a non-finite objective fails the trial);
    returns (failed, worked): estimated trials whose objective was not finite / was."""
    failed = worked = 0
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
    return failed, worked


def _rescore_completed(study, complete, space, ctx, rules, cost_fw, collector) -> int:
    """Trials told by other workers (shared storage) also count: re-score the layouts of every
    completed trial. Returns how many trials are complete."""
    from search_spaces.optuna_space import broken_rules, params_to_values

    others = study.get_trials(deepcopy=False, states=(complete,))
    rows = [params_to_values(t.params, space) for t in others]
    if rows:
        broken = broken_rules(rows, ctx, rules)
        ok = np.flatnonzero(broken == 0)
        if len(ok):
            cols = {k: np.array([rows[i][k] for i in ok], dtype=np.int64) for k in KNOBS}
            batch = estimate_batch(space.model, space.cluster, cost_fw, columns_to_batch(cols))
            collector.add(cols, batch)
    return len(others)


def wait_for_others(optuna, study) -> None:
    """The target is reached counting trials in flight: wait until the other workers have told theirs
    (a worker that found the target reached must not report from a half-told study), at most as long
    as a trial may run before it counts as stale."""
    from .study import stale_after

    running = optuna.trial.TrialState.RUNNING
    deadline = time.monotonic() + stale_after()
    while study.get_trials(deepcopy=False, states=(running,)) and time.monotonic() < deadline:
        time.sleep(0.1)


def best_value(study, two):
    try:
        if two:
            return None
        return study.best_value if study.best_value < 1e29 else None
    except ValueError:
        return None


def seed_layouts(space, cost_fw, core, cat, cross, n=16):
    """Good starting layouts for Optuna: the core lattice with the default categorical choices."""
    defaults = [i for i in range(len(cat["zero"]))
                if cat["recompute_layers"][i] == 0 and cat["offload_optimizer"][i] == 0
                and cat["offload_params"][i] == 0 and cat["offload_activations"][i] == 0]
    if not defaults:
        return []
    sub_cat = {k: v[defaults] for k, v in cat.items()}
    take = np.arange(min(len(core["tp"]), max(1, SCORE_CHUNK // max(len(defaults), 1))))
    cols = cpsat.expand(space, core, sub_cat, cross, take)
    if not len(cols["tp"]):
        return []
    batch = estimate_batch(space.model, space.cluster, cost_fw, columns_to_batch(cols))
    vals = np.where(batch.fits_with_cache, batch.step_time_s / batch.tokens_per_step, np.inf)
    best = np.argsort(vals, kind="stable")[:n]
    return [{k: int(cols[k][i]) for k in KNOBS} for i in best if np.isfinite(vals[i])]
