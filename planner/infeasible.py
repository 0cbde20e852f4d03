"""Why nothing came out of a search: the rules that conflict, or the memory nothing fits in (with the
smallest GPU count that would fit and the knobs that would help)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from costmodels.errors import InfeasibleError, SpecError
from costmodels.estimate import estimate_batch
from costmodels.units import fmt_bytes
from search_spaces import cpsat
from search_spaces.constraints import Ctx
from search_spaces.frameworks import RulesProfile
from search_spaces.space import SearchRequest, Space, build_space

from .collector import Collector
from .lattice import SCORE_CHUNK, columns_to_batch, score_lattice
from .settings import SearchSettings


def rules_conflict(space: Space, profile: RulesProfile, request: SearchRequest) -> InfeasibleError:
    """No layout satisfies the rules: name the conflicting rules and the pinned knobs to free."""
    rules = cpsat.conflicting_rules(space, profile.all_rules)
    ctx = Ctx(space.model, space.cluster, request.num_gpus)
    texts = [r.describe(ctx, profile.name) for r in rules]
    pinned = sorted({k for r in rules for k in r.knobs if k in request.choices})
    hint = f"; free {', '.join('--' + k.replace('_', '-') for k in pinned)}" if pinned else ""
    if not texts:
        texts = ["no layout satisfies the rules"]
    return InfeasibleError("no layout satisfies the rules: " + "; ".join(texts) + hint,
                           reasons=tuple(r.name for r in rules))


def nothing_fits(model, cluster, profile, request, space) -> InfeasibleError:
    """Nothing fits in memory: say the smallest GPU count that would, and which knobs would help."""
    min_gpus = smallest_gpu_count(model, cluster, profile, request)
    n = request.num_gpus
    freed = [k for k in ("zero", "offload_optimizer", "offload_params", "offload_activations", "recompute",
                         "precision", "mbs", "tp", "pp")
             if k in request.choices]
    hint = f"; or free {', '.join('--' + k.replace('_', '-') for k in freed)}" if freed else ""
    lowest, host_limited, one_fits, leanest_tight = memory_limits(model, cluster, profile, space)
    if not one_fits and leanest_tight is not None and leanest_tight[0] <= cluster.gpu.hbm_bytes:
        required, with_cache = leanest_tight
        host = (" (leaner layouts offload more than the cluster's host memory / NVMe hold)"
                if host_limited else "")
        more = f"; or use at least {min_gpus} GPUs" if min_gpus else ""
        return InfeasibleError(
            f"no layout fits on {n} x {cluster.gpu.name} with PyTorch's caching allocator's cache{host}: the "
            f"leanest that runs needs {fmt_bytes(required)} per GPU without the cache, {fmt_bytes(with_cache)} "
            f"with it, of {fmt_bytes(cluster.gpu.hbm_bytes)}; such a tight layout runs only with allocator "
            f"retries and an OOM risk, so the search does not propose it (check one with planner estimate)"
            f"{hint}{more}", min_gpus=min_gpus)
    if one_fits:
        return InfeasibleError(
            f"no layout the search visited fits in memory on {n} x {cluster.gpu.name}, but one exists (the leanest "
            f"needs {fmt_bytes(lowest)} per GPU): give more --trials or use --method lattice{hint}", min_gpus=min_gpus)
    if not min_gpus and host_limited:
        # the GPU side fits: what does not is the offloaded state in the nodes' host memory or NVMe
        return InfeasibleError(
            f"no layout fits on {n} x {cluster.gpu.name}: the leanest layout needs {fmt_bytes(lowest)} per GPU, "
            f"which the GPU has, but its offloaded state does not fit in the cluster's host memory "
            f"({fmt_bytes(cluster.host_memory_bytes)} per node) and NVMe ({fmt_bytes(cluster.nvme_bytes)} per node); "
            f"give host_memory / nvme in the cluster file{hint or ', or offload less'}", min_gpus=min_gpus)
    need = f" (the leanest layout needs {fmt_bytes(lowest)} per GPU, the {cluster.gpu.name} has " \
           f"{fmt_bytes(cluster.gpu.hbm_bytes)})" if lowest else ""
    if min_gpus:
        msg = f"no layout fits in memory on {n} x {cluster.gpu.name}{need}; needs at least {min_gpus} GPUs{hint}"
    else:
        msg = f"no layout fits in memory on {n} x {cluster.gpu.name}{need}; try a GPU with more memory{hint}"
    return InfeasibleError(msg, min_gpus=min_gpus)


def smallest_gpu_count(model, cluster, profile, request) -> int | None:
    """The fewest GPUs (doublings, or a few more nodes) on which some layout fits, or None."""
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
            coll = Collector(quick, req2, cluster)
            score_lattice(sp2, profile.load_cost_profile(), coll, core, cat, cross)
            if coll.fitting:
                return n2
        except SpecError:
            continue
    return None


def memory_limits(model, cluster, profile, space) -> tuple[float | None, bool, bool, tuple | None]:
    """Over every layout satisfying the rules: the smallest peak memory per GPU (None: no such layout);
    whether host memory is what stops them (some fit the GPU, none of those the nodes' host memory and
    NVMe); whether one fits after all (a search that samples, Optuna, did not visit it); of the layouts
    whose offload fits the host, the one needing least without the allocator's cache: (that need,
    MemoryBreakdown.required, and its peak with the cache), or None."""
    core, cat, cross, _ = cpsat.sub_lattices(space, profile.all_rules)
    if not len(core["tp"]) or not len(cat["zero"]):
        return None, False, False, None
    cost_fw = profile.load_cost_profile()
    best, gpu_side_fits, any_fits, leanest = None, False, False, None
    nk = len(cat["zero"])
    per = max(1, SCORE_CHUNK // nk)
    for start in range(0, len(core["tp"]), per):
        cols = cpsat.expand(space, core, cat, cross, np.arange(start, min(start + per, len(core["tp"]))))
        if len(cols["tp"]):
            b = estimate_batch(model, cluster, cost_fw, columns_to_batch(cols))
            low = float(np.min(b.peak_memory_bytes))
            best = low if best is None else min(best, low)
            gpu_side_fits |= bool(np.any(b.peak_memory_bytes <= cluster.gpu.hbm_bytes))
            any_fits |= bool(np.any(b.fits_with_cache))
            host_ok = np.flatnonzero(np.asarray(b.host_fits))
            if len(host_ok):
                j = host_ok[np.argmin(np.asarray(b.required_memory_bytes)[host_ok])]
                pair = (float(b.required_memory_bytes[j]), float(b.peak_memory_bytes[j]))
                leanest = pair if leanest is None or pair < leanest else leanest
    return best, gpu_side_fits and not any_fits, any_fits, leanest
