"""Reading plan.json back: for `planner explain` and `planner estimate plan.json`."""
from __future__ import annotations

import math
from pathlib import Path

from costmodels.catalog import read_json_file
from costmodels.errors import SpecError

from .shell import printable

REQUIRED = ("layout", "estimate", "inputs", "search")


# `planner plan --top 1000 --probe 1000` writes about 6 KiB per runner-up: its own readers (explain,
# estimate, calibrate) must take what it writes
MAX_PLAN_BYTES = 32 * 2**20


def load_plan_json(path) -> dict:
    p = Path(path)
    if p.is_dir():
        if not (p / "plan.json").exists():
            raise SpecError(f"folder '{path}' holds no plan.json; give the folder `planner plan --out` wrote, "
                            "or its plan.json")
        p = p / "plan.json"
    if not p.exists():
        raise SpecError(f"plan file '{path}' does not exist (give plan.json or the plan directory)")
    data = read_json_file(p, "plan", limit=MAX_PLAN_BYTES)
    if not isinstance(data, dict) or any(k not in data for k in REQUIRED):
        raise SpecError(f"'{path}' is not a plan.json written by `planner plan --out` "
                        f"(needs {', '.join(REQUIRED)})")
    version = data.get("version")
    if version != PLAN_VERSION or isinstance(version, bool):
        raise SpecError(f"plan file '{path}' has version {str(version)[:20]!r}; this planner reads version "
                        f"{PLAN_VERSION} (write it again with `planner plan --out`)")
    return _printable(data)


PLAN_VERSION = 1        # what planner/emit/writer.py writes as plan.json's "version"


def _printable(x):
    """Every string of a plan.json read back with control and other non-printable characters as '?'
    (as the planner prints a model's name): what `explain` re-renders goes to a terminal and to
    report.md, and an edited file may hold escape sequences in any field."""
    if isinstance(x, str):
        return printable(x)
    if isinstance(x, dict):
        return {_printable(k): _printable(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_printable(v) for v in x]
    return x


def _bytes_per_s(value):
    """plan.json stores SI numbers; a cluster mapping wants a unit (a tampered value is left to the parser)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{value!r} B/s"
    return value


def _check_gpu_is_the_catalogs(c: dict) -> None:
    """plan.json names its GPU; read back, the name means the catalog's GPU. A plan made with a GPU
    mapping of its own under a catalog name (other memory) would be re-estimated on another GPU."""
    from costmodels import catalog
    if isinstance(c.get("gpu_spec"), dict):
        return                                      # the plan carries its GPU's spec
    hbm = c.get("hbm_bytes")
    gpu = catalog.load_gpu(c["gpu"])                # a catalog name (_case refused any other)
    if isinstance(hbm, (int, float)) and not isinstance(hbm, bool) and abs(gpu.hbm_bytes - hbm) > 0.5 * 2**20:
        raise SpecError(f"the plan was made with a GPU spec of its own named {c['gpu']!r} ({hbm / 2**30:.2f} GiB, "
                        f"the catalog's has {gpu.hbm_bytes / 2**30:.2f} GiB); estimate the plan's layout from the "
                        "original cluster file instead")


def case_from_plan_json(path) -> dict:
    """The case (model, cluster, parallel, framework) a plan.json describes."""
    data = load_plan_json(path)
    try:
        case = _case(data)
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise SpecError(f"plan file '{path}' is damaged: {_describe(exc)}") from None
    _check_gpu_is_the_catalogs(data["inputs"]["cluster"])   # estimated again: on the catalog's GPU
    return case


class _Damaged(ValueError):
    """A field of plan.json that no plan the planner writes holds; its message says which and why."""


def _describe(exc) -> str:
    if isinstance(exc, _Damaged):
        return str(exc)
    if isinstance(exc, KeyError):
        return f"missing field {exc}"
    return f"{exc.__class__.__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def check_plan(data: dict, path) -> None:
    """A plan.json read back is checked like a case before anything is drawn from it: the model, the
    cluster and the layout must be valid and satisfy the framework's rules (a tampered file with
    tp 3 on 48 GPUs, ZeRO-7 or fp4 is refused, not rendered)."""
    from search_spaces.frameworks import structural_errors

    from ..specs import case_from_dict

    try:
        case = _case(data)
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise SpecError(f"plan file '{path}' is damaged: {_describe(exc)}") from None
    parsed = case_from_dict(case)
    structural_errors(parsed)
    # the framework's own rules too: the planner never chooses a layout that breaks them, so a plan that
    # does was edited (an ALiBi model under Megatron-DeepSpeed was rendered as if planned)
    from search_spaces.frameworks import PROFILES, framework_violations
    named = (data.get("inputs") or {}).get("framework")
    profile = PROFILES.get(named) if isinstance(named, str) else None
    if profile is None:
        raise SpecError(f"plan file '{path}' names the framework {str(named)[:40]!r}, which the planner does not "
                        f"plan for ({', '.join(sorted(PROFILES))}); the file was changed, re-run `planner plan --out`")
    if profile.cost_profile != case["framework"]:
        raise SpecError(f"plan file '{path}' names the framework {named} but was estimated with the cost profile "
                        f"{str(case['framework'])[:40]!r}, not {named}'s {profile.cost_profile}; the file was changed, "
                        "re-run `planner plan --out`")
    for rule, message, _ in framework_violations(parsed.model, parsed.cluster, parsed.layout, profile):
        raise SpecError(f"plan file '{path}' breaks the {profile.name} rule '{rule.name}' ({message}), which no "
                        "plan the planner writes does; the file was changed, re-run `planner plan --out`")
    if not isinstance(data.get("runner_ups", []), list):
        raise SpecError(f"plan file '{path}' is damaged: runner_ups must be a list")
    _check_rendered_fields(data, case, path)


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _check_rendered_fields(data: dict, case: dict, path) -> None:
    """What explain renders beside the checked case, as the planner writes it (an edited file showed
    'ZeRO-None', 'ZeRO--1', a learning rate 'x', a launcher 'x', a breakdown row of `true` seconds)."""
    from ..specs import case_from_dict

    def damaged(what: str):
        raise SpecError(f"plan file '{path}' is damaged: {what}, which no plan the planner writes has; "
                        "re-run `planner plan --out`")

    for where, layout in [("layout", data["layout"])] + [
            (f"runner_ups[{i}].layout", r.get("layout") if isinstance(r, dict) else None)
            for i, r in enumerate(data.get("runner_ups") or [])]:
        if not isinstance(layout, dict):
            damaged(f"{where} is not a mapping")
        nulls = sorted(k for k, v in layout.items() if v is None)
        if nulls:
            damaged(f"{where}.{nulls[0]} is null")
        if where != "layout":
            parallel = {k: v for k, v in layout.items() if k != "density"}
            try:
                case_from_dict({**case, "parallel": parallel})
            except SpecError as exc:
                damaged(f"{where}: {exc}")
    breakdown = (data.get("estimate") or {}).get("time_breakdown_s", {})
    if not isinstance(breakdown, dict) or not all(_is_number(v) and v >= 0 for v in breakdown.values()):
        damaged("estimate.time_breakdown_s must map parts of the step to seconds")
    schedule = data.get("schedule")
    if schedule is not None:
        if not isinstance(schedule, dict):
            damaged("schedule is not a mapping")
        for key in ("lr", "min_lr"):
            try:
                value = float(schedule.get(key, 0.0))
            except (TypeError, ValueError):
                damaged(f"schedule.{key} {schedule.get(key)!r} is not a number")
            if not (math.isfinite(value) and 0.0 <= value <= 10.0):
                damaged(f"schedule.{key} {schedule.get(key)!r} is not a learning rate")
    from .megatron_ds_job import LAUNCHERS
    if "launcher" in data and data["launcher"] not in LAUNCHERS:
        damaged(f"launcher {str(data['launcher'])[:40]!r} is not one of {', '.join(LAUNCHERS)}")
    args = data.get("megatron_args")
    if "megatron_args" in data and not (isinstance(args, list) and args and all(isinstance(a, str) for a in args)):
        damaged("megatron_args must be the list of pretrain_gpt.py's arguments")
    if data.get("probe") is not None and not isinstance(data["probe"], dict):
        damaged("probe must be a mapping")
    ties = data.get("ties")
    if ties is not None and not isinstance(ties, dict):
        damaged("ties is not a mapping")
    separate = (ties or {}).get("separate_by") or {}
    if not (isinstance(separate, dict) and all(isinstance(v, str) for v in separate.values())):
        damaged("ties.separate_by must map ranks to sentences")
    from costmodels.units import currency_problem
    cost = data.get("cost")
    if cost is not None and not isinstance(cost, dict):
        damaged("cost is not a mapping")
    # inputs.cluster.currency was checked when the case was read (_price); the planner writes it twice
    currency, cluster_currency = (cost or {}).get("currency", ""), data["inputs"]["cluster"].get("currency", "")
    problem = currency_problem(currency)
    if problem:
        damaged(f"cost.currency: {problem}")
    if cost is not None and currency != cluster_currency:
        damaged(f"cost.currency {currency!r} is not inputs.cluster.currency {cluster_currency!r}")
    if not isinstance(data.get("warnings", []), list):
        raise SpecError(f"plan file '{path}' is damaged: warnings must be a list; re-run `planner plan --out`")
    defaults_used(data, path)
    estimates = [("estimate", data.get("estimate"))]
    estimates += [(f"runner_ups[{i}].estimate", r.get("estimate") if isinstance(r, dict) else None)
                  for i, r in enumerate(data.get("runner_ups") or [])]
    for where, est in estimates:
        check_estimate_numbers(est, f"plan file '{path}', {where}")
        _check_memory_fields(est, where, damaged)
    _check_ranks(data, damaged)
    iters = (schedule or {}).get("train_iters")
    if iters is not None and (isinstance(iters, bool) or not isinstance(iters, int) or iters < 1):
        damaged(f"schedule.train_iters {str(iters)[:40]!r} is not a number of iterations")
    cands = data.get("candidates")
    if cands is not None and not (isinstance(cands, list) and all(
            isinstance(c, list) and all(_is_number(v) and 0 <= v < MAX_PLAN_NUMBER for v in c) for c in cands)):
        damaged("candidates must be rows of finite numbers (tokens/s per GPU, memory)")


def defaults_used(data: dict, path) -> list[str]:
    """A plan file's `defaults_used`, checked: a list of sentences (`planner estimate` reads the calibration
    note among them, `planner explain` renders them)."""
    notes = data.get("defaults_used", [])
    if not isinstance(notes, list) or not all(isinstance(d, str) for d in notes):
        raise SpecError(f"plan file '{path}' is damaged: defaults_used must be a list of sentences; "
                        "re-run `planner plan --out`")
    return notes


def _check_memory_fields(est: dict, where: str, damaged) -> None:
    """The memory figures the report shows are one estimate's: the peak is the breakdown's total and the
    headroom the GPU's memory less the peak (a tampered peak showed 9.09 TiB beside 18 GiB of headroom)."""
    if "fits" in est and est["fits"] is not True:     # a plan ranks only layouts that fit
        damaged(f"{where}.fits is {str(est['fits'])[:20]!r}: a plan holds only layouts that fit")
    breakdown = est.get("memory_breakdown_bytes", {})
    if not isinstance(breakdown, dict):
        damaged(f"{where}.memory_breakdown_bytes is not a mapping")
    fields = {k: est.get(k) for k in ("peak_memory_bytes", "hbm_bytes", "headroom_bytes")}
    fields["memory_breakdown_bytes.total"] = breakdown.get("total")
    for k, v in fields.items():
        if v is not None and not _is_number(v):
            damaged(f"{where}.{k} {str(v)[:20]!r} is not a number of bytes")
    peak, hbm, headroom, total = fields.values()
    if peak is None:
        return
    if total is not None and abs(peak - total) > 1e-6 * max(abs(total), 1.0):
        damaged(f"{where}.peak_memory_bytes is not the memory breakdown's total")
    if hbm is not None and headroom is not None and abs(hbm - peak - headroom) > 1e-6 * max(hbm, 1.0):
        damaged(f"{where}.headroom_bytes is not hbm_bytes less peak_memory_bytes")


def _check_ranks(data: dict, damaged) -> None:
    """Runner-ups are ranked 2, 3, ... and the ties block names only those ranks (or 1, the plan)."""
    ranks = []
    for i, r in enumerate(data.get("runner_ups") or []):
        rank = r.get("rank") if isinstance(r, dict) else None
        if isinstance(rank, bool) or not isinstance(rank, int) or rank < 2 or rank in ranks:
            damaged(f"runner_ups[{i}].rank {str(rank)[:20]!r} is not a rank of its own from 2 up")
        ranks.append(rank)
    known = {1, *ranks}

    def a_rank(x) -> bool:
        return isinstance(x, int) and not isinstance(x, bool) and x in known

    ties = data.get("ties") or {}
    preferred = ties.get("preferred_rank")
    if preferred is not None and not a_rank(preferred):
        damaged(f"ties.preferred_rank {str(preferred)[:20]!r} is not the rank of a candidate in the plan")
    for key in ("oom_risk_ranks", "tied_with_best"):
        listed = ties.get(key, [])
        if not isinstance(listed, list) or not all(a_rank(x) for x in listed):
            damaged(f"ties.{key} must list ranks of candidates in the plan")


MAX_PLAN_NUMBER = 1e25      # FLOP per step of the largest runs are ~1e20; nothing in an estimate comes near
POSITIVE = ("step_time_s", "tokens_per_s_per_gpu")


def check_estimate_numbers(est, where: str) -> None:
    """The numbers an estimate is re-rendered from (report, figures) must be what `planner plan` writes:
    finite, zero or more, below MAX_PLAN_NUMBER, integers exact as floats; the step time, the
    throughput and the band's low end above zero (a tampered 0 would divide, a 10^30 integer would
    overflow the figures)."""
    if not isinstance(est, dict):
        raise SpecError(f"{where} is missing or not a mapping: the file is damaged; re-run `planner plan --out`")

    def walk(x, key):
        if isinstance(x, dict):
            for k, v in x.items():
                walk(v, f"{key}.{k}")
        elif isinstance(x, list):
            for v in x:
                walk(v, key)
        elif isinstance(x, (int, float)) and not isinstance(x, bool):
            bad = (not math.isfinite(x) or not 0 <= x < MAX_PLAN_NUMBER
                   or (isinstance(x, int) and abs(x) > 2**53))
            if bad:
                raise SpecError(f"{where}: {key.lstrip('.')} = {str(x)[:30]} is not a value `planner plan` "
                                "writes (finite, 0 or more); the file was changed, re-run `planner plan --out`")

    walk(est, "")
    for key in ("mfu", "hfu"):
        if isinstance(est.get(key), (int, float)) and est[key] > 1.0:
            raise SpecError(f"{where}: {key} = {est[key]:g} is above 1, which no run reaches; the file was changed, "
                            "re-run `planner plan --out`")
    band = est.get("step_time_band_s")
    if band is not None and (not isinstance(band, list) or len(band) != 2 or
                             not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in band)
                             or band[0] > band[1]):
        raise SpecError(f"{where}: step_time_band_s must be [low, high] seconds with low <= high; the file was "
                        "changed, re-run `planner plan --out`")
    lows = [est.get(k) for k in POSITIVE] + (list(band) if band else [])
    if any(not isinstance(v, (int, float)) or isinstance(v, bool) or v <= 0 for v in lows if v is not None):
        raise SpecError(f"{where}: the step time, throughput and band must be above zero; the file was "
                        "changed, re-run `planner plan --out`")


def _price(cluster: dict):
    """The plan's price per GPU-hour with its currency ('2.5 USD'), as a cluster file writes it."""
    from costmodels.units import currency_problem

    price, currency = cluster.get("price_per_gpu_hour", 0.0), cluster.get("currency", "")
    if isinstance(price, bool) or not isinstance(price, (int, float)):      # plan.json writes a number
        raise _Damaged(f"inputs.cluster.price_per_gpu_hour must be a number, got {str(price)[:40]!r}")
    problem = currency_problem(currency)
    if problem:
        raise _Damaged(f"inputs.cluster.currency: {problem}")
    return f"{price!r} {currency}" if currency else price


def _catalog_name(kind: str, name):
    """A GPU or framework plan.json names: one of the catalog's (a GPU of one's own travels as gpu_spec),
    never a file, which reading the plan back would open (a tampered plan named any local file and had
    its keys echoed)."""
    from costmodels.catalog import canonical_name
    if not isinstance(name, str) or canonical_name(kind, name) is None:
        what = "GPU" if kind == "gpu" else kind
        raise _Damaged(f"its {what} {str(name)[:40]!r} is none of the catalog's, and a plan names no {what} file")
    return name


def _case(data: dict) -> dict:
    inp = data["inputs"]
    model = {k: v for k, v in inp["model"].items() if k != "total_params"}
    c = inp["cluster"]
    gpu = c["gpu_spec"] if isinstance(c.get("gpu_spec"), dict) else _catalog_name("gpu", c["gpu"])
    cluster = {"gpu": gpu, "num_gpus": c["num_gpus"], "gpus_per_node": c["gpus_per_node"],
               "nvlink_domain": c["nvlink_domain"], "nvlink_bandwidth": _bytes_per_s(c["nvlink_bandwidth_bytes_per_s"]),
               "network_bandwidth": _bytes_per_s(c["network_bandwidth_bytes_per_s"]),
               "price_per_gpu_hour": _price(c)}
    from costmodels.catalog import LINK_CONSTANTS
    cluster.update({key: c[key] for key, _ in LINK_CONSTANTS.values() if key in c})   # a cluster file's own
    # the node's host side (offload needs it); plan.json files written before it was recorded lack it
    for key, unit in (("pcie_bandwidth", "B/s"), ("host_memory", "B"), ("nvme", "B"), ("nvme_bandwidth", "B/s")):
        value = c.get(f"{key}_bytes_per_s" if unit == "B/s" else f"{key}_bytes")
        if value is not None:
            cluster[key] = f"{value!r} {unit}" if isinstance(value, (int, float)) and not isinstance(value, bool) \
                else value
    parallel = dict(data["layout"])
    parallel.pop("density", None)
    tokens = inp.get("request", {}).get("total_tokens") or 0.0
    return {"model": model, "cluster": cluster, "parallel": parallel,
            "framework": _catalog_name("framework", data["estimate"]["framework"]),
            "training": {"total_tokens": tokens}}
