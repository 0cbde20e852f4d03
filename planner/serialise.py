"""Result serialisation: every dict and JSON text made of an estimate or a plan comes from here.

* `estimate_dict`: one estimate (`planner estimate --json`, and each estimate inside plan.json).
* `estimate_result_dict`: an EstimateResult (estimate, warnings, error bands).
* `plan_dict`: one Plan (`Plan.to_dict`); `plan_entry`: a runner-up or Pareto entry of plan.json.
* `plan_to_dict`: a PlanResult (`planner plan --json`, plan.json without the emitted job).
* `error_bands`: the layout / estimate / runner-ups part with bands and ties (`PlanResult.error_bands`).
* `to_json`: JSON text of any of these (numpy scalars and enums included).
"""
from __future__ import annotations

import json
from dataclasses import asdict

from costmodels import bands as B
from costmodels import catalog
from costmodels.params import total_params
from costmodels.errors import SpecError
from costmodels.types import Estimate
from costmodels.units import HOUR
from search_spaces.knobs import OUTPUT_KEYS

from .breakdown import hidden_communication, offload_needs
from .ties import advantage_notes, annotate, bands_dict

FLOP_FORMULA = ("model FLOPs = 3 x forward: 2 FLOP per matmul weight per token (layers + output layer) "
                "plus 4 s h per layer per token for attention (Narayanan et al. 2021 eq. 3 without "
                "recompute, generalised to GQA / SwiGLU); MFU divides by the dense peak of the precision")


def estimate_dict(est: Estimate, framework: str, price: float = 0.0, total_tokens: float = 0.0,
                  defaults=(), hidden: dict | None = None, offload: dict | None = None,
                  currency: str = "") -> dict:
    """The JSON shape of `planner estimate --json` (also used inside plan.json). `hidden`: seconds of
    communication per step hidden behind compute (planner.breakdown), beside the exposed parts."""
    out = est.to_dict()
    out.update(flop_formula=FLOP_FORMULA, framework=framework, defaults_used=list(defaults))
    if hidden is not None:
        out["hidden_comm_s"] = dict(hidden)
    if offload is not None:
        out["offload_per_node"] = dict(offload)      # planner.breakdown.offload_needs
    if total_tokens:
        seconds = est.time_to_train_s(total_tokens)
        out["training"] = {
            "total_tokens": total_tokens,
            "time_to_train_s": seconds,
            "time_to_train_days": seconds / 86400,
            "gpu_hours": seconds * est.num_gpus / HOUR,
            "price_per_gpu_hour": price,
            "currency": currency,
            "cost": seconds * est.num_gpus / HOUR * price if price else None,
        }
    return out


def estimate_result_dict(result) -> dict:
    """An EstimateResult: its estimate, the warnings and the 80% error bands."""
    c = result.case
    out = estimate_dict(result.estimate, c.framework.name, c.cluster.price_per_gpu_hour, result.total_tokens,
                        result.defaults, result.hidden_comm, result.offload_needs, c.cluster.price_currency)
    out["warnings"] = [w.to_dict() for w in result.warnings]
    out.update(result.bands)
    return out


def layout_dict(layout) -> dict:
    """A Layout as plan.json writes it: case-file keys (the knob table's), enums by name."""
    return {OUTPUT_KEYS[k]: v for k, v in layout.as_dict().items()}


def plan_dict(plan) -> dict:
    """rank, family, layout (plan.json keys), estimate (Estimate.to_dict) and objective values."""
    return {"rank": plan.rank, "family": plan.family, "layout": layout_dict(plan.layout),
            "estimate": plan.estimate.to_dict(), "objective": [float(v) for v in plan.objective]}


def plan_entry(p, result) -> dict:
    """A runner-up or Pareto entry of plan.json."""
    return {"rank": p.rank, "family": p.family, "layout": layout_dict(p.layout),
            "estimate": estimate_dict(p.estimate, result.profile.cost_profile,
                                      result.cluster.price_per_gpu_hour, result.request.total_tokens,
                                      currency=result.currency),
            "objective": list(p.objective)}


def inputs_dict(result) -> dict:
    m, c = result.model, result.cluster
    model = asdict(m)
    model["total_params"] = total_params(m)
    g = c.gpu
    cluster = {"gpu": g.name, "num_gpus": c.num_gpus, "gpus_per_node": c.gpus_per_node,
               "nvlink_domain": c.nvlink_domain, "nvlink_bandwidth_bytes_per_s": c.nvlink_bytes_per_s,
               "network_bandwidth_bytes_per_s": c.network_bytes_per_s, "hbm_bytes": g.hbm_bytes,
               "pcie_bandwidth_bytes_per_s": c.pcie_bytes_per_s, "host_memory_bytes": c.host_memory_bytes,
               "nvme_bytes": c.nvme_bytes, "nvme_bandwidth_bytes_per_s": c.nvme_bytes_per_s,
               "price_per_gpu_hour": c.price_per_gpu_hour, "currency": result.currency}
    # The cluster as given, before a calibration (applied again when the plan is read back with it).
    # A GPU other than the catalog's of its name (a file of one's own, a mapping): plan.json keeps its
    # spec (never a path), so explain, estimate and calibrate read the plan back without it; link
    # constants a cluster file changed are kept beside the catalog GPU's name.
    base = getattr(result, "base_cluster", None) or c
    if not catalog.is_catalog_gpu(base.gpu):
        cluster["gpu_spec"] = catalog.gpu_to_dict(base.gpu, base)
    else:
        cluster.update(catalog.link_overrides(base))
    req = result.request
    request = {"num_gpus": req.num_gpus, "global_batch": req.global_batch,
               "global_batch_tokens": list(req.global_batch_tokens) if req.global_batch_tokens else None,
               "seq_lens": list(req.seq_lens), "choices": {k: list(v) for k, v in req.choices.items()},
               "total_tokens": req.total_tokens, "objectives": list(result.settings.objectives),
               "seed": result.settings.seed}
    return {"model": model, "cluster": cluster, "framework": result.profile.name, "request": request}


def cost_dict(est, price: float, currency: str = "", total_tokens: float = 0.0) -> dict | None:
    """What the plan costs at `price` per GPU-hour: per hour of the job, per billion tokens, to train."""
    if not price:
        return None
    per_hour = price * est.num_gpus
    per_token = per_hour / 3600 / est.tokens_per_s
    out = {"price_per_gpu_hour": price, "currency": currency, "per_hour": per_hour,
           "per_billion_tokens": per_token * 1e9}
    if total_tokens:
        out["to_train"] = per_token * total_tokens
    return out


def best_hidden_comm(result) -> dict:
    """Communication of the best plan hidden behind compute, seconds per step by part."""
    fw = result.profile.load_cost_profile()
    return hidden_communication(result.model, result.cluster, fw, result.best.layout, result.best.estimate)


def best_offload_needs(result) -> dict | None:
    """Host memory / NVMe per node the best plan's offload needs (None: no offload)."""
    fw = result.profile.load_cost_profile()
    return offload_needs(result.model, result.cluster, fw, result.best.layout)


def search_dict(result) -> dict:
    """How the search went: method and the layout counts (see planner.search.SearchResult)."""
    return {"method": result.method, "layouts_in_space": result.considered,
            "layouts_checked": result.checked,
            "layouts_satisfying_rules": result.lattice, "layouts_scored": result.scored,
            "layouts_fitting": result.fitting, "study": dict(result.study) if result.study else None}


# The reading order of a plan as `planner plan --json` and `planner explain --json` print it: what was
# asked and chosen first, then alternatives, then the job's own fields (plan.json only), then the bulk.
READING_ORDER = ("inputs", "defaults_used", "layout", "estimate", "cost", "warnings", "why", "runner_ups",
                 "pareto", "ties")
BULK_LAST = ("search", "candidates_columns", "candidates")


def in_reading_order(data: dict) -> dict:
    """`data` with READING_ORDER keys first and BULK_LAST keys last; others, sorted, between."""
    head = [k for k in READING_ORDER if k in data]
    tail = [k for k in BULK_LAST if k in data]
    middle = sorted(k for k in data if k not in head and k not in tail)
    return {k: data[k] for k in head + middle + tail}


def plan_to_dict(result) -> dict:
    """Keys in reading order (inputs, layout, estimate, warnings, alternatives, then bulk data);
    `planner plan --json` keeps this order, plan.json is written with sorted keys. `add_bands` adds
    the error bands, ties and OOM risk (issue 9)."""
    best = result.best
    return add_bands(result, {
        "inputs": inputs_dict(result),
        "defaults_used": list(result.notes),
        "layout": layout_dict(best.layout),
        "estimate": estimate_dict(best.estimate, result.profile.cost_profile,
                                  result.cluster.price_per_gpu_hour, result.request.total_tokens,
                                  hidden=best_hidden_comm(result), offload=best_offload_needs(result),
                                  currency=result.currency),
        "cost": cost_dict(best.estimate, result.cluster.price_per_gpu_hour, result.currency,
                          result.request.total_tokens),
        "warnings": [w.to_dict() for w in result.warnings],
        "why": list(result.why),
        "runner_ups": [plan_entry(p, result) for p in result.runner_ups],
        "pareto": [plan_entry(p, result) for p in result.pareto],
        "search": search_dict(result),
        "candidates_columns": ["tokens_per_s_per_gpu", "peak_memory_gib"],
        "candidates": [list(c) for c in result.candidates],
    })


def add_bands(result, data: dict) -> dict:
    """Add bands to every estimate of plan data built from `result`, mark ties; returns `data`."""
    fw = result.profile.load_cost_profile()
    data["estimate"].update(bands_dict(result.model, result.cluster, fw, result.best.layout, result.best.estimate))
    for entry, p in zip(data.get("runner_ups", []), result.runner_ups):
        entry["estimate"].update(bands_dict(result.model, result.cluster, fw, p.layout, p.estimate))
    for entry, p in zip(data.get("pareto", []), result.pareto):     # memory side only: a front is long
        mem = B.memory_band(p.estimate)
        entry["estimate"].update({"peak_memory_band_bytes": mem.as_list(), "oom_risk": B.oom_risk(p.estimate, mem)})
    data["ties"] = annotate(data, result.settings.objectives[0])
    data["ties"]["advantage_from_thin_constants"] = advantage_notes(result, fw)
    for bulk in ("search", "candidates_columns", "candidates"):     # bulk data stays last (reading order)
        if bulk in data:
            data[bulk] = data.pop(bulk)
    return data


def error_bands(result) -> dict:
    """The layout / estimate / runner-ups part of plan data, with bands and ties (for text output and
    the Python API; plan_to_dict builds the full plan.json)."""
    price, tokens = result.cluster.price_per_gpu_hour, result.request.total_tokens
    fw_name = result.profile.cost_profile
    data = {"layout": layout_dict(result.best.layout),
            "estimate": estimate_dict(result.best.estimate, fw_name, price, tokens, currency=result.currency),
            "runner_ups": [{"rank": p.rank, "layout": layout_dict(p.layout),
                            "estimate": estimate_dict(p.estimate, fw_name, price, tokens, currency=result.currency)}
                           for p in result.runner_ups]}
    return add_bands(result, data)


def json_default(o):
    """numpy scalars -> Python numbers, enums -> their values (json.dumps' `default`)."""
    import numpy as np

    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, np.bool_):
        return bool(o)
    if hasattr(o, "value"):
        return o.value
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def to_json(obj, sort_keys: bool = True, default=json_default) -> str:
    """JSON text as the CLI prints it (indent 2); strict JSON: a NaN or an infinity is refused with one
    line instead of written as a token no JSON parser accepts."""
    try:
        return json.dumps(obj, indent=2, sort_keys=sort_keys, default=default, allow_nan=False)
    except ValueError:
        raise SpecError("the estimate came out as a non-finite number (NaN or infinity): the inputs are at "
                        "the edge of what the cost model can price; check the cluster's link rates and "
                        "efficiencies and the model's sizes") from None
