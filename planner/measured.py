"""A measurement beats a prediction: the runs a calibration was made on (calib.yaml's `runs`, each with the
layout it ran) re-rank the plan's candidates that were measured. The planner's pick is a prediction, even
calibrated; when the pick itself was measured and another measured candidate ran faster per token on the
same cluster, that one is the plan (issue 9, 'probe -> calibrate -> replan': a review of 2026-12-07 found a
replan that kept the candidate its own probe had measured slowest)."""
from __future__ import annotations

import json
import math

import numpy as np

from costmodels.errors import SpecError
from costmodels.units import fmt_seconds

from .serialise import layout_dict
from .text import layout_line

# No training step is shorter than a millisecond or longer than a day (outside: a damaged log or file);
# calibrate reads logs and runs files in this range too.
MIN_STEP_S, MAX_STEP_S = 1e-3, 86400.0
# Ranked rows looked at for a measured layout: the candidates a probe ran are among the plan's top few,
# and a replan with the same request ranks them near the top again.
MEASURED_SCAN = 200


def _key(layout: dict) -> str:
    return json.dumps(layout, sort_keys=True, default=str)


def run_entry(case, measured_step_s: float) -> dict:
    """What calib.yaml records of a run besides its id and errors: the model, the GPU count and the layout
    (plan.json's keys), so that a replan can find it among its candidates."""
    return {"model": case.model.name, "num_gpus": int(case.cluster.num_gpus),
            "layout": layout_dict(case.layout), "measured_step_s": float(f"{measured_step_s:.6g}")}


def measured_layouts(runs, model: str, num_gpus: int, where: str = "calibration") -> dict:
    """{layout key: measured step seconds} of the runs of this model on this many GPUs. `runs`: calib.yaml's
    list (entries without a layout, from files written before it was recorded, are skipped). The fastest
    reading of a layout measured twice is kept."""
    if runs is None:
        return {}
    if not isinstance(runs, list):
        raise SpecError(f"{where}: 'runs' must be a list of the runs it was made on (write it again with "
                        "`planner calibrate`)")
    out: dict = {}
    for i, r in enumerate(runs):
        if not isinstance(r, dict):
            raise SpecError(f"{where}: runs[{i}] is not a mapping (write it again with `planner calibrate`)")
        if "layout" not in r:
            continue
        step = r.get("measured_step_s")
        if not isinstance(r["layout"], dict) or isinstance(step, bool) or not isinstance(step, (int, float)) \
                or not (math.isfinite(step) and MIN_STEP_S <= step <= MAX_STEP_S):
            raise SpecError(f"{where}: runs[{i}] needs a layout mapping and a measured_step_s from "
                            f"{MIN_STEP_S:g} s to {MAX_STEP_S:g} s (write it again with `planner calibrate`)")
        if r.get("model") != model or type(r.get("num_gpus")) is not int or r.get("num_gpus") != num_gpus:
            continue
        key = _key(r["layout"])
        out[key] = min(float(step), out.get(key, math.inf))
    return out


def measured_first(idx, layout_of, tokens_of, measured: dict):
    """(idx, why): when the first of the ranked rows `idx` was measured and another measured row among the
    first MEASURED_SCAN ran faster per token, that row goes first and the rest keep their order.
    `layout_of(row)`: its Layout; `tokens_of(row)`: tokens per step."""
    if not measured or not len(idx):
        return idx, ""
    found = []
    for pos, j in enumerate(idx[:MEASURED_SCAN]):
        layout = layout_of(int(j))
        step = measured.get(_key(layout_dict(layout)))
        if step is not None:
            found.append((pos, int(j), step, step / tokens_of(int(j)), layout))
    if not found or found[0][0] != 0:
        return idx, ""          # the pick was not measured: a measurement cannot rank it
    first, best = found[0], min(found, key=lambda f: f[3])
    if best is first:
        return idx, ""
    others = [int(j) for j in idx if int(j) != best[1]]
    why = (f"picked by measurement: on your cluster (the calibration's runs) this layout ran "
           f"{fmt_seconds(best[2])} per step, {100 * (1 - best[3] / first[3]):.1f}% less time per token than "
           f"{layout_line(first[4])} ({fmt_seconds(first[2])}), which the model ranks first even calibrated; "
           "a measurement beats a prediction")
    return np.array([best[1]] + others, dtype=np.int64), why


__all__ = ["measured_first", "measured_layouts", "run_entry", "MEASURED_SCAN"]
