"""CP-SAT encoding of the space: build the model, solve, read the solution.

* `enumerate_lattice(space, rules)`: every layout that satisfies the rules. CP-SAT enumerates the
  integer core (tp, pp, dp, cp, vpp, mbs, gbs, seq_len) and, separately, the categorical knobs,
  each under the rules that involve only its own knobs; their product is then filtered in numpy
  by the rules that span both (the same Rule objects, so the two encodings cannot drift apart).
* `check(space, rules, layout)`: the rules a single layout breaks, from CP-SAT itself.
* `conflicting_rules(space, rules)`: when nothing is feasible, a set of rules that cannot hold
  together (CP-SAT's sufficient assumptions for infeasibility).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from costmodels.errors import SpecError

from .constraints import Ctx, Rule, Vars
from .space import CATEGORICAL_KNOBS, CORE_KNOBS, KNOBS, Space

ENUMERATION_LIMIT = 2_000_000     # solutions CP-SAT may enumerate in one sub-lattice


def context(space: Space) -> Ctx:
    return Ctx(space.model, space.cluster, space.request.num_gpus)


def _build(space: Space, knobs, rules, fixed=None, assumptions=False):
    """CP-SAT model over `knobs`; each rule enforced by a literal (an assumption if asked)."""
    m = cp_model.CpModel()
    x, upper, lower = {}, {}, {}
    for name in knobs:
        domain = [fixed[name]] if fixed and name in fixed else list(space.domain(name))
        x[name] = m.new_int_var_from_domain(cp_model.Domain.from_values(domain), name)
        upper[name], lower[name] = max(domain), min(domain)
    v = Vars(m, x, upper, lower)
    ctx = context(space)
    literals = {}
    for rule in rules:
        lit = m.new_bool_var(f"rule:{rule.name}")
        rule.encode(ctx, v, lit)
        literals[rule.name] = lit
        if not assumptions:
            m.add(lit == 1)
    if assumptions:
        m.add_assumptions(list(literals.values()))
    return m, x, literals


class _Collector(cp_model.CpSolverSolutionCallback):
    def __init__(self, variables, limit):
        super().__init__()
        self.variables = variables
        self.rows: list[list[int]] = []
        self.limit = limit
        self.truncated = False

    def on_solution_callback(self):
        self.rows.append([self.value(v) for v in self.variables])
        if len(self.rows) >= self.limit:
            self.truncated = True
            self.stop_search()


def new_solver() -> cp_model.CpSolver:
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    return solver


def solve(solver: cp_model.CpSolver, model, callback=None):
    """solver.solve, then Python's Ctrl-C handler put back: CP-SAT catches SIGINT during a solve (an
    interrupted enumeration is reported, `_enumerate`) and afterwards restores the OS default, not
    Python's, so a later Ctrl-C (lattice scoring, the Optuna study) killed the process with no message
    and no clean-up (fuzzing round 7)."""
    import signal
    import threading

    main = threading.current_thread() is threading.main_thread()
    handler = signal.getsignal(signal.SIGINT) if main else None
    if not main:
        # off the main thread no handler can be put back afterwards: CP-SAT must not touch SIGINT at all
        solver.parameters.catch_sigint_signal = False
    try:
        return solver.solve(model, callback) if callback is not None else solver.solve(model)
    finally:
        if main and handler is not None:
            signal.signal(signal.SIGINT, handler)


def _enumerate(space: Space, knobs, rules, limit=ENUMERATION_LIMIT) -> tuple[dict, bool]:
    m, x, _ = _build(space, knobs, rules)
    solver = new_solver()
    solver.parameters.enumerate_all_solutions = True
    solver.parameters.random_seed = 0
    variables = [x[k] for k in knobs]
    cb = _Collector(variables, limit)
    status = solve(solver, m, cb)
    if status == cp_model.MODEL_INVALID:
        # a value the request checks did not bound (search_spaces.space.check_request): not an interrupt
        raise SpecError("a requested value is too large for the layout solver "
                        f"({m.validate().splitlines()[0][:200] if m.validate() else 'invalid model'}); "
                        "give smaller sequence lengths, batches or degrees")
    if not cb.truncated and status not in (cp_model.OPTIMAL, cp_model.INFEASIBLE):
        # CP-SAT catches Ctrl-C itself and returns what it enumerated so far: the lattice would be
        # silently incomplete. Pass the interrupt on.
        raise KeyboardInterrupt("CP-SAT enumeration interrupted")
    rows = np.array(sorted(cb.rows), dtype=np.int64).reshape(-1, len(knobs))
    return {k: rows[:, i] for i, k in enumerate(knobs)}, cb.truncated


def split_rules(rules):
    """Rules on the integer core only, on the categorical knobs only, and those spanning both."""
    core = [r for r in rules if set(r.knobs) <= set(CORE_KNOBS)]
    cat = [r for r in rules if set(r.knobs) <= set(CATEGORICAL_KNOBS)]
    cross = [r for r in rules if r not in core and r not in cat]
    return core, cat, cross


@dataclass(frozen=True)
class Lattice:
    columns: dict                  # knob -> int64 array, every row satisfies every rule
    core_size: int
    categorical_size: int
    product_size: int              # before the cross rules

    def __len__(self):
        return len(next(iter(self.columns.values()))) if self.columns else 0


def sub_lattices(space: Space, rules):
    """CP-SAT enumerations of the core and the categorical knobs (each under its own rules)."""
    core_rules, cat_rules, cross = split_rules(rules)
    core, t1 = _enumerate(space, CORE_KNOBS, core_rules)
    cat, t2 = _enumerate(space, CATEGORICAL_KNOBS, cat_rules)
    return core, cat, cross, (t1 or t2)


def expand(space: Space, core: dict, cat: dict, cross, rows_core=None) -> dict:
    """Cartesian product of (a slice of) the core and the categorical lattice, cross rules applied."""
    idx_core = np.arange(len(core["tp"])) if rows_core is None else rows_core
    nc, nk = len(idx_core), len(cat["zero"])
    cols = {k: np.repeat(core[k][idx_core], nk) for k in CORE_KNOBS}
    cols.update({k: np.tile(cat[k], nc) for k in CATEGORICAL_KNOBS})
    ok = np.ones(nc * nk, dtype=bool)
    ctx = context(space)
    for rule in cross:
        ok &= np.broadcast_to(rule.holds(ctx, cols), ok.shape)
    return {k: v[ok] for k, v in cols.items()}


def enumerate_lattice(space: Space, rules) -> Lattice:
    core, cat, cross, _ = sub_lattices(space, rules)
    nc, nk = len(core["tp"]), len(cat["zero"])
    cols = expand(space, core, cat, cross) if nc and nk else {k: np.zeros(0, np.int64) for k in KNOBS}
    return Lattice(cols, nc, nk, nc * nk)


def check(space: Space, rules, layout_values: dict) -> list[Rule]:
    """Rules that the fixed layout breaks, according to CP-SAT (empty list: feasible)."""
    m, _, literals = _build(space, KNOBS, rules, fixed=layout_values, assumptions=True)
    solver = new_solver()
    status = solve(solver, m)
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return []
    if status != cp_model.INFEASIBLE:
        raise RuntimeError(f"CP-SAT could not decide the layout: {solver.status_name(status)} {m.validate()}")
    core = set(solver.sufficient_assumptions_for_infeasibility())
    by_index = {lit.index: name for name, lit in literals.items()}
    names = [by_index[i] for i in core if i in by_index]
    if not names:     # infeasible without any rule: a definition is wrong (a bug, never silent)
        raise RuntimeError("CP-SAT model infeasible independently of the rules")
    return [r for r in rules if r.name in names]


def conflicting_rules(space: Space, rules) -> list[Rule]:
    """A set of rules that cannot all hold over the space's domains (empty: some layout exists)."""
    m, _, literals = _build(space, KNOBS, rules, assumptions=True)
    solver = new_solver()
    solver.parameters.max_time_in_seconds = 20.0
    status = solve(solver, m)
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return []
    if status != cp_model.INFEASIBLE:
        return []
    core = set(solver.sufficient_assumptions_for_infeasibility())
    by_index = {lit.index: name for name, lit in literals.items()}
    names = {by_index[i] for i in core if i in by_index}
    return [r for r in rules if r.name in names]
