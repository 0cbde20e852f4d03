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


def offload_needs(model, cluster, framework, layout) -> dict | None:
    """Host (CPU) memory and NVMe space per node that an offload layout needs, against the cluster's.

    The amounts are the cost model's own (`host_ram_bytes_per_node` and `host_nvme_bytes_per_node` of
    the batch estimator: 16 bytes per offloaded optimizer parameter, 2 per offloaded weight, per GPU,
    times GPUs per node, on NVMe when the optimizer is offloaded to NVMe; offloaded activation
    checkpoints, or Megatron-Core's offloaded layer activations, in host memory). None when nothing
    is offloaded."""
    from costmodels.estimate import estimate_batch
    from costmodels.types import LayoutBatch, Offload

    if (layout.offload_optimizer is Offload.NONE and layout.offload_params is Offload.NONE
            and layout.offload_activations is Offload.NONE and not layout.cpu_offload_layers):
        return None
    batch = estimate_batch(model, cluster, framework, LayoutBatch.from_layouts([layout]))
    host_need = float(batch.columns["host_ram_bytes_per_node"][0])
    nvme_need = float(batch.columns["host_nvme_bytes_per_node"][0])
    return {"host_bytes_per_node": host_need, "host_memory_bytes_per_node": float(cluster.host_memory_bytes),
            "nvme_bytes_per_node": nvme_need, "nvme_capacity_bytes_per_node": float(cluster.nvme_bytes),
            "fits": bool(batch.host_fits[0])}


def offload_text(needs: dict) -> str:
    from costmodels.units import fmt_bytes

    parts = []
    if needs["host_bytes_per_node"]:
        parts.append(f"host memory {fmt_bytes(needs['host_bytes_per_node'])} per node of "
                     f"{fmt_bytes(needs['host_memory_bytes_per_node'])}")
    if needs["nvme_bytes_per_node"]:
        parts.append(f"NVMe {fmt_bytes(needs['nvme_bytes_per_node'])} per node of "
                     f"{fmt_bytes(needs['nvme_capacity_bytes_per_node'])}")
    status = "fits" if needs["fits"] else "DOES NOT FIT: give a cluster YAML with more host_memory / nvme"
    return "offload needs " + (", ".join(parts) or "nothing on the host") + f" ({status})"
