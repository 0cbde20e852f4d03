"""Reading plan.json back: for `planner explain` and `planner estimate plan.json`."""
from __future__ import annotations

import json
from pathlib import Path

from costmodels.errors import SpecError

REQUIRED = ("layout", "estimate", "inputs", "search")


def load_plan_json(path) -> dict:
    p = Path(path)
    if p.is_dir():
        p = p / "plan.json"
    if not p.is_file():
        raise SpecError(f"plan file '{path}' does not exist (give plan.json or the plan directory)")
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SpecError(f"plan file '{path}' is not valid JSON: {exc}") from None
    if not isinstance(data, dict) or any(k not in data for k in REQUIRED):
        raise SpecError(f"'{path}' is not a plan.json written by `planner plan --out` "
                        f"(needs {', '.join(REQUIRED)})")
    return data


def case_from_plan_json(path) -> dict:
    """The case (model, cluster, parallel, framework) a plan.json describes."""
    data = load_plan_json(path)
    inp = data["inputs"]
    model = {k: v for k, v in inp["model"].items() if k != "total_params"}
    c = inp["cluster"]
    cluster = {"gpu": c["gpu"], "num_gpus": c["num_gpus"], "gpus_per_node": c["gpus_per_node"],
               "nvlink_domain": c["nvlink_domain"], "nvlink_bandwidth": c["nvlink_bandwidth_bytes_per_s"],
               "network_bandwidth": c["network_bandwidth_bytes_per_s"],
               "price_per_gpu_hour": c.get("price_per_gpu_hour", 0.0)}
    parallel = dict(data["layout"])
    parallel.pop("density", None)
    tokens = inp.get("request", {}).get("total_tokens") or 0.0
    return {"model": model, "cluster": cluster, "parallel": parallel, "framework": data["estimate"]["framework"],
            "training": {"total_tokens": tokens}}
