"""The feasible lattice, scored: knob columns <-> layouts, and every layout CP-SAT's sub-lattices
combine to, estimated in chunks (numpy, `estimate_batch`) and handed to a Collector."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from costmodels import catalog
from costmodels.types import Layout, LayoutBatch, Sparsity
from search_spaces import cpsat
from search_spaces.frameworks import FrameworkProfile
from search_spaces.space import ENUMS, KNOBS

SCORE_CHUNK = 400_000          # layouts per estimate_batch call (bounds memory)


def cost_framework(profile: FrameworkProfile):
    """The cost model's constants of the profile's framework, with a calibration's overrides."""
    fw = catalog.load_framework(profile.cost_framework)
    return replace(fw, **dict(profile.cost_overrides)) if profile.cost_overrides else fw


def columns_to_batch(cols: dict) -> LayoutBatch:
    """Knob columns (integer codes, one row per layout) -> the LayoutBatch estimate_batch takes."""
    out = {k: np.asarray(v, dtype=np.int64) for k, v in cols.items() if k in KNOBS}
    out["sequence_parallel"] = out["sequence_parallel"].astype(bool)
    out["flash_attention"] = out["flash_attention"].astype(bool)
    out["density"] = np.where(out["sparsity"] == Sparsity.TWO_FOUR.code, 0.5, 1.0)
    n = len(out["tp"])
    for name in ("first_stage_layers", "last_stage_layers"):      # the search splits stages evenly
        out[name] = np.zeros(n, dtype=np.int64)
    return LayoutBatch(out)


def values_to_layout(values: dict) -> Layout:
    """One row of knob values (integer codes) -> a Layout."""
    kwargs = {}
    for k in KNOBS:
        v = int(values[k])
        if k in ENUMS:
            v = ENUMS[k].from_code(v)
        elif k in ("sequence_parallel", "flash_attention"):
            v = bool(v)
        kwargs[k] = v
    kwargs["density"] = 0.5 if kwargs["sparsity"] is Sparsity.TWO_FOUR else 1.0
    return Layout(**kwargs)


def score_lattice(space, cost_fw, collector, core, cat, cross, progress=None) -> int:
    """Estimate every layout of the lattice (core rows x categorical rows, cross rules applied) and
    add it to `collector`; returns how many layouts satisfy every rule."""
    from costmodels.estimate import estimate_batch

    nk = len(cat["zero"])
    per_chunk = max(1, SCORE_CHUNK // max(nk, 1))
    n_core = len(core["tp"])
    lattice = 0
    for start in range(0, n_core, per_chunk):
        rows = np.arange(start, min(start + per_chunk, n_core))
        cols = cpsat.expand(space, core, cat, cross, rows)
        n = len(cols["tp"])
        lattice += n
        if n:
            batch = estimate_batch(space.model, space.cluster, cost_fw, columns_to_batch(cols))
            collector.add(cols, batch)
        if progress:
            progress(min(start + per_chunk, n_core), n_core, None)
    return lattice


COUNT_LIMIT = 4_000_000        # combined layouts counted one by one; above this, estimated from a sample


def count_lattice(space, core, cat, cross) -> tuple[int, bool]:
    """How many layouts satisfy every rule, without estimating them: (count, exact). Counted when
    the sub-lattices combine to at most COUNT_LIMIT layouts; above that, estimated from one chunk of
    core rows drawn with a fixed seed (exact False)."""
    nc, nk = len(core["tp"]), len(cat["zero"])
    per_chunk = max(1, SCORE_CHUNK // max(nk, 1))
    if nc * nk <= COUNT_LIMIT:
        return sum(len(cpsat.expand(space, core, cat, cross, np.arange(s, min(s + per_chunk, nc)))["tp"])
                   for s in range(0, nc, per_chunk)), True
    rows = np.sort(np.random.default_rng(0).choice(nc, size=min(per_chunk, nc), replace=False))
    sampled = len(cpsat.expand(space, core, cat, cross, rows)["tp"])
    return int(round(sampled * nc / len(rows))), False
