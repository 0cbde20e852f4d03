"""What a search returns, built once and never changed: Plan, SearchResult and PlanResult.

`planner.search.search` returns a SearchResult; `planner.plan` adds the notes on its inputs, the
currency and the advice, and builds the PlanResult (a SearchResult with those three) in one go.
Their dicts and JSON are made in planner.serialise.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

from costmodels.types import ClusterSpec, Estimate, Layout, ModelSpec
from search_spaces.frameworks import RulesProfile
from search_spaces.space import SearchRequest

from .settings import SearchSettings


@dataclass(frozen=True)
class Plan:
    rank: int
    layout: Layout
    estimate: Estimate
    objective: tuple[float, ...]
    family: str = ""             # structural family (planner.ranking.family_codes): "tp 8 / pp 16", "ZeRO-3", ...

    def to_dict(self) -> dict:
        """rank, family, layout (plan.json keys), estimate (Estimate.to_dict) and objective values."""
        from .serialise import plan_dict

        return plan_dict(self)

    def __repr__(self) -> str:
        from .text import layout_line

        return f"Plan(#{self.rank}: {layout_line(self.layout)}; {self.estimate!r})"


@dataclass(frozen=True)
class SearchResult:
    model: ModelSpec
    cluster: ClusterSpec
    profile: RulesProfile
    request: SearchRequest
    settings: SearchSettings
    plans: tuple[Plan, ...]              # best first (top K)
    pareto: tuple[Plan, ...]
    method: str                          # lattice | optuna
    considered: int                      # layouts in the search space (product of the domains)
    checked: int                         # layouts CP-SAT's sub-lattices combine to (rules checked in numpy)
    lattice: int                         # layouts satisfying every rule (counted, or estimated by sampling)
    scored: int                          # layouts estimated
    fitting: int                         # of those, fitting in memory
    seconds: float
    why: tuple[str, ...] = ()            # why the best beats its neighbours (planner.explain)
    study: dict | None = None            # the Optuna study: name, storage, trials, resumed_from
    candidates: tuple = ()               # (tokens/s/GPU, GiB) of scored layouts that fit

    @property
    def best(self) -> Plan:
        return self.plans[0]

    @property
    def runner_ups(self) -> tuple[Plan, ...]:
        return self.plans[1:]

    def _head(self) -> str:
        return (f"{type(self).__name__}({self.model.name} on {self.cluster.num_gpus} x {self.cluster.gpu.name}, "
                f"{self.profile.name}: ")

    def __repr__(self) -> str:
        if not self.plans:
            return self._head() + "no plan)"
        return (self._head() + f"best {self.best!r}; {len(self.runner_ups)} runner-ups, "
                f"{self.fitting:,} fitting layouts of {self.lattice:,})")


@dataclass(frozen=True)
class PlanResult(SearchResult):
    notes: tuple[str, ...] = ()          # defaults and roundings applied to the inputs
    warnings: tuple = ()                 # advice.PlanWarning: what limits the plan, the fix
    # the cluster as given, before a calibration replaced its constants (None: not calibrated);
    # plan.json records this one, so the calibration is applied once when the plan is read back
    base_cluster: ClusterSpec | None = None

    @classmethod
    def from_search(cls, found: SearchResult, notes=(), warnings=(),
                    base_cluster: ClusterSpec | None = None) -> "PlanResult":
        """The PlanResult of a search, with the notes on its inputs and the advice."""
        return cls(**{f.name: getattr(found, f.name) for f in fields(SearchResult)},
                   notes=tuple(notes), warnings=tuple(warnings), base_cluster=base_cluster)

    @property
    def currency(self) -> str:
        """The currency of cluster.price_per_gpu_hour as given ('' when not stated)."""
        return self.cluster.price_currency

    @property
    def error_bands(self) -> dict:
        """80% bands of the best and the runner-ups, ties within model error, OOM risk (planner/ties.py):
        {"layout", "estimate", "runner_ups": [{"rank", "tie", "estimate"}], "ties"}."""
        from .serialise import error_bands

        return error_bands(self)

    def to_dict(self) -> dict:
        """The JSON object of `planner plan --json` (plan.json without the emitted job)."""
        from .serialise import plan_to_dict

        return plan_to_dict(self)

    def write(self, out, force: bool = False, launcher: str = "deepspeed", probe: int = 0):
        """Write the job directory (launch.sh, ds_config.json, plan.json, report.md, figures) to `out`,
        atomically; an existing `out` is replaced only with `force`. Returns its path."""
        from costmodels.units import parse_number

        from .arguments import path_text
        from .emit.writer import write_plan
        from .outdir import check_out_dir

        path_text(out, "out", "a directory path (str or pathlib.Path)")
        probe = parse_number(probe, what="probe (candidates written to probe.sh)", low=0, high=1000, integer=True)
        check_out_dir(out, force)
        return write_plan(self, out, force=force, launcher=launcher, probe=probe)

    def __repr__(self) -> str:
        if not self.plans:
            return self._head() + "no plan)"
        return (self._head() + f"best {self.best!r}; {len(self.runner_ups)} runner-ups, "
                f"{len(self.warnings)} warnings, {self.fitting:,} fitting layouts of {self.lattice:,})")
