"""The feasible lattice, scored: knob columns <-> layouts, and every layout CP-SAT's sub-lattices
combine to, estimated in chunks (numpy, `estimate_batch`) and handed to a Collector."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from search_spaces import cpsat
from search_spaces.layouts import columns_to_batch, values_to_layout  # noqa: F401 - re-exported
from search_spaces.space import KNOBS

SCORE_CHUNK = 400_000          # layouts per estimate_batch call (bounds memory)



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
