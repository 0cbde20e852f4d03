"""Every catalog constant states where it comes from, and 'FITTED' means benchmarks/fit.py fits it."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CATALOG = ROOT / "costmodels" / "catalog"

# Constants that are not data-sheet quantities or documented switches: each must say FITTED (by
# benchmarks/fit.py) or ASSUMED (with its reason) on its line. 'SET BY HAND' no longer counts (issue 8:
# every constant is FITTED or ASSUMED; the last three, cuda_context, comm_buffers and torchtitan-compile's
# saved_activation_factor, were set by hand until 2026-11-25).
CONSTANT_KEYS = {
    "gemm_efficiency", "attention_efficiency", "hbm_efficiency", "kernel_overhead", "fp8_gemm_speedup",
    "sparse_gemm_speedup", "nvlink_latency", "collective_latency", "nvlink_efficiency", "num_sms", "gemm_tile_intensity",
    "attention_speedup", "elementwise_traffic", "iteration_overhead", "host_overhead",
    "microbatch_overhead", "zero3_gather_efficiency", "zero3_overlap", "offload_overlap",
    "zero3_recompute_gathers",
    "saved_activation_factor", "attention_kernel", "flash_attention_2_peak", "allocator_fragmentation",
    "cuda_context", "comm_buffers",
}
LINE = re.compile(r"^\s*([a-z0-9_]+):\s*([^#\n]*?)\s*(?:#\s*(.*))?$")


def _constant_lines():
    for path in sorted(CATALOG.glob("gpus/*.yaml")) + sorted(CATALOG.glob("frameworks/*.yaml")):
        for number, text in enumerate(path.read_text().splitlines(), 1):
            m = LINE.match(text)
            if m and m.group(1) in CONSTANT_KEYS and m.group(2):
                yield path, number, m.group(1), m.group(3) or ""


def test_every_constant_states_its_provenance():
    missing = [f"{p.relative_to(ROOT)}:{n} {k}" for p, n, k, c in _constant_lines()
               if not re.search(r"\b(FITTED|ASSUMED)\b", c)]
    assert missing == []


# A GPU file's data-sheet quantities are cited by its `source:`; everything else in a GPU file, and every
# key of a framework profile (switches, byte counts, memory allowances too), states its provenance.
DATA_SHEET_KEYS = {"name", "source", "aliases", "hbm", "hbm_bandwidth", "peak", "fp32", "tf32", "fp16", "bf16",
                   "fp8", "sparse_2to4", "system", "gpus_per_node", "nvlink_domain", "nvlink_bandwidth",
                   "network_bandwidth", "pcie_bandwidth", "host_memory", "fitted"}
ANY_LINE = re.compile(r"^(\s*)([a-z0-9_]+):\s*([^#\n]*?)\s*(?:#\s*(.*))?$")
PROVENANCE = re.compile(r"\b(FITTED|ASSUMED)\b")


def untagged_lines(path):
    """Lines of a catalog file whose key states no provenance. A nested line inherits its block
    header's tag; a framework profile's identity keys and a GPU file's data-sheet keys need none."""
    out, header_tagged, exempt = [], False, DATA_SHEET_KEYS if path.parent.name == "gpus" else {"name", "source"}
    for number, text in enumerate(path.read_text().splitlines(), 1):
        m = ANY_LINE.match(text)
        if not m:
            continue
        indent, key, value, comment = m.group(1), m.group(2), m.group(3), m.group(4) or ""
        tagged = bool(PROVENANCE.search(comment))
        if not indent:
            header_tagged = tagged
        if key in exempt or tagged or (indent and header_tagged):
            continue
        out.append(f"{path.relative_to(ROOT)}:{number} {key}")
    return out


def test_every_key_of_every_profile_states_its_provenance():
    """Not only the efficiency constants: overlaps, byte counts and memory allowances move estimates as
    much, and a reader must be able to tell a documented behaviour from a round figure."""
    paths = sorted(CATALOG.glob("gpus/*.yaml")) + sorted(CATALOG.glob("frameworks/*.yaml"))
    assert len(paths) >= 15
    assert [line for p in paths for line in untagged_lines(p)] == []


def test_the_broader_check_catches_an_untagged_line(tmp_path):
    (tmp_path / "frameworks").mkdir()
    bad = tmp_path / "frameworks" / "x.yaml"
    bad.write_text("name: x\nallocator_fragmentation: 0.10\nstate_bytes:   # ASSUMED (source): counted\n"
                   "  bf16: {weights: 2}\ncuda_context: 1.5 GiB   # SET BY HAND: context\n")
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        assert untagged_lines(bad) == ["frameworks/x.yaml:2 allocator_fragmentation", "frameworks/x.yaml:5 cuda_context"]
    finally:
        ROOT = saved


def test_nothing_in_the_catalog_is_set_by_hand():
    """A value picked to make some runs come out right is neither fitted (no out-of-sample figure) nor
    assumed (no reason a reader can check): the catalog has none left."""
    paths = sorted(CATALOG.glob("gpus/*.yaml")) + sorted(CATALOG.glob("frameworks/*.yaml"))
    hits = [f"{p.relative_to(ROOT)}:{n}" for p in paths for n, line in enumerate(p.read_text().splitlines(), 1)
            if re.search(r"SET BY HAND", line, re.I)]
    assert hits == []


def test_fitted_means_fit_py_fits_it(fit):
    targets = {(path.resolve(), p.yaml_key) for p in fit.ALL_PARAMETERS for path in fit.catalog_targets(p)}
    claimed = {(p.resolve(), k) for p, n, k, c in _constant_lines() if re.search(r"\bFITTED\b", c)}
    assert claimed - targets == set(), "says FITTED but benchmarks/fit.py does not fit it"
    assert targets - claimed == set(), "benchmarks/fit.py fits it but the catalog does not say FITTED"


def test_no_fitted_constant_belongs_to_one_framework_or_source(fit):
    """Fewer constants, shared: no fitted constant is private to one framework profile."""
    for p in fit.PARAMETERS:
        if p.kind == "fw":
            assert len(p.groups) >= 2, p.field


def test_no_catalog_file_names_a_key_twice():
    """fit.py --write edits catalog lines in place; a key written twice would be read as its last
    value, silently. The catalog loads with the same strict loader as users' files."""
    import yaml

    from costmodels.catalog import _StrictLoader
    paths = sorted(CATALOG.glob("**/*.yaml"))
    assert any(p.name == "error_bands.yaml" for p in paths)
    for path in paths:
        yaml.load(path.read_text(), Loader=_StrictLoader)


def test_provenance_counts_the_runs_a_constant_moves_not_the_runs_it_enters(fit):
    """The host time per kernel read "1703 runs from 11 sources" because every Megatron / torchtitan run
    enters it; only vTrain's host-bound rows (and six ZeRO-3 runs with per-rank loops) respond to it.
    A constant's runs are now those whose step moves 1% or more when it moves 50%."""
    from planner.validation import load_records

    records = [r for r in load_records() if r.source in ("vtrain", "bloom") and r.measured_step_s]
    records = [r for r in records if r.source == "bloom"][:10] + [r for r in records if r.source == "vtrain"][:40]
    prov = {(p.field, p.groups[0]): entry for p, entry in zip(fit.PARAMETERS, fit.provenance(records))}
    runs, sources, used = prov[("host_overhead_s", "megatron-deepspeed")]
    assert used == 50 and sources == ["vtrain"] and 0 < runs <= 40
    runs, sources, used = prov[("gemm_efficiency", "A100")]        # both sources' GEMMs set it
    assert sources == ["bloom", "vtrain"] and used == 50


def test_the_catalog_says_which_sources_set_the_host_time():
    text = (CATALOG / "frameworks" / "megatron-deepspeed.yaml").read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("host_overhead:"))
    assert re.search(r"FITTED \(benchmarks/fit\.py\): \d+ runs from 2 sources \(narayanan21, vtrain\) whose "
                     r"step time responds to it", line), line
    # and that its prior is a measurement, not a guess (benchmarks/gpu/host_time)
    assert re.search(r"its prior, 36\.2 us \(sigma 0\.3 in log\), is the emitted Megatron-DeepSpeed job's host time "
                     r"per counted kernel, measured on the CPU \(benchmarks/gpu/host_time\)", line), line
