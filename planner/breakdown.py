"""Communication the cost model hides behind compute, shown beside what it exposes.

The step time counts only exposed communication (`TimeBreakdown.dp_comm` is "DP gradient sync
(exposed)"). To show what overlap hides, the same layout is estimated again with every overlap share
of the framework (`Framework.*overlap*`) set to 0: the difference, per part, is the communication
that runs hidden behind compute. Nothing in the cost model changes; it is asked twice.
"""
from __future__ import annotations

from dataclasses import fields, replace

from costmodels.errors import PlannerError
from costmodels.estimate import estimate

HIDDEN_PARTS = ("tp_comm", "cp_comm", "pp_comm", "dp_comm", "zero_comm", "offload")
HIDDEN_LABELS = {
    "tp_comm": "TP collectives (hidden)", "cp_comm": "CP exchange (hidden)", "pp_comm": "PP send/recv (hidden)",
    "dp_comm": "DP gradient sync (hidden)", "zero_comm": "ZeRO-3 gathers (hidden)",
    "offload": "offload traffic (hidden)",
}


def hidden_communication(model, cluster, framework, layout, est) -> dict[str, float]:
    """Seconds per step of communication hidden behind compute, by part (parts with none are left out)."""
    shares = {f.name: 0.0 for f in fields(framework) if "overlap" in f.name
              and isinstance(getattr(framework, f.name), float)}
    if not shares:
        return {}
    try:
        exposed_all = estimate(model, cluster, replace(framework, **shares), layout)
    except (PlannerError, ValueError):
        return {}
    out = {}
    for part in HIDDEN_PARTS:
        diff = float(getattr(exposed_all.time, part) - getattr(est.time, part))
        if diff > 1e-9:
            out[part] = diff
    return out
