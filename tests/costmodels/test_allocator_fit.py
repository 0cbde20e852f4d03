"""The memory model's fitted constants: the caching allocator's overhead over the live peak
(`allocator_fragmentation`), fitted by benchmarks/fit.py on the readings that hold the allocator's cache
and cross-validated by source. It was 'SET BY HAND (not fitted) on 51 readings from 2 sources' with
no out-of-sample figure; each test here fails on that code (no fit_memory / loso_memory)."""
import dataclasses
import re
from pathlib import Path

import pytest

from costmodels import catalog
from planner.validation import load_records

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def records():
    return load_records()


def _with_measured(recs, gib):
    return [dataclasses.replace(r, measured_memory_gib=float(g)) for r, g in zip(recs, gib)]


def test_only_readings_that_hold_the_cache_set_it(fit, records):
    """max_memory_allocated does not contain the allocator's cache, so those readings (Megatron-Core's
    functional tests) say nothing about it; reserved (torchtitan) and nvidia-smi (BLOOM) readings do."""
    held = fit.memory_records(records)
    assert {r.memory_method for r in held} == {"reserved", "device"}
    assert {r.source for r in held} == {"bloom", "torchtitan"}
    assert any(r.memory_method == "allocated" for r in records if r.measured_memory_gib is not None)


@pytest.mark.parametrize("true_value", [0.05, 0.2])
def test_fit_memory_recovers_the_overhead_the_model_generated(fit, records, true_value):
    """Readings made by the model itself at a known overhead: the fit finds it again (no prior), and
    with its weak prior stays within a hundredth."""
    held = fit.memory_records(records)
    made = [p for _, _, p, _ in fit.memory_predictions(held, [true_value, 1.0])]
    synthetic = _with_measured(held, made)
    assert fit.fit_memory(synthetic, prior_weight=0.0)[0] == pytest.approx(true_value, abs=2e-3)
    assert fit.fit_memory(synthetic)[0] == pytest.approx(true_value, abs=0.01)


# torch.compile's saved activations relative to eager (torchtitan-compile profiles): 'SET BY HAND (not
# fitted) to the torchtitan t1/t3 compile memory rows' at 0.85 until 2026-11-25; now the second memory
# constant fit_memory fits. These fail on that code (one memory constant only).

@pytest.mark.parametrize("true_factor", [0.6, 0.95])
def test_fit_memory_recovers_the_compiled_saved_activation_factor(fit, records, true_factor):
    held = fit.memory_records(records)
    made = [p for _, _, p, _ in fit.memory_predictions(held, [0.12, true_factor])]
    values = fit.fit_memory(_with_measured(held, made), prior_weight=0.0)
    assert [p.field for p in fit.MEMORY_PARAMETERS] == ["allocator_fragmentation", "saved_activation_factor"]
    assert values[0] == pytest.approx(0.12, abs=2e-3)
    assert values[1] == pytest.approx(true_factor, abs=0.01)


def test_only_compiled_runs_of_one_source_set_the_compiled_factor(fit, records):
    """The readings it enters are torchtitan's compiled runs alone: one source, said in the catalog."""
    runs, sources, enters = fit.memory_readings(records)["saved_activation_factor"]
    assert sources == ["torchtitan"] and 0 < len(runs) <= enters
    assert all("compile" in fit_id or "cp" in fit_id for fit_id in runs)


def test_without_torchtitan_the_compiled_factor_is_its_prior(fit, records):
    """Leave-one-source-out: the refit that predicts torchtitan has no compiled reading left, so the
    factor is its prior, eager's 1.0, not a value read off the runs it then predicts."""
    _, refits = fit.loso_memory(records)
    assert refits["torchtitan"][1] == pytest.approx(1.0, abs=1e-3)
    assert refits["bloom"][1] < 0.95           # torchtitan's compiled runs hold less than eager ones


def test_the_compile_profiles_hold_the_fitted_factor_and_say_it_is_thin(fit, records):
    value = float(fit.fit_memory(records)[1])
    for name in ("torchtitan-compile", "torchtitan-compile-2025"):
        assert catalog.load_framework(name).saved_activation_factor == pytest.approx(value, abs=1e-3), name
        line = next(ln for ln in (ROOT / "costmodels" / "catalog" / "frameworks" / f"{name}.yaml")
                    .read_text().splitlines() if ln.startswith("saved_activation_factor:"))
        assert re.search(r"FITTED \(benchmarks/fit\.py, fit_memory\): \d+ max-reserved readings .* from 1 source "
                         r"\(torchtitan\).*thin", line), line


def test_memory_loso_never_sees_the_left_out_source(fit, records):
    """Scaling torchtitan's readings by 1.3 leaves the refit that predicts torchtitan where it was and
    moves the one fitted on torchtitan (which predicts BLOOM)."""
    _, base = fit.loso_memory(records)
    scaled = [dataclasses.replace(r, measured_memory_gib=r.measured_memory_gib * 1.3)
              if r.source == "torchtitan" and r.measured_memory_gib is not None else r for r in records]
    _, moved = fit.loso_memory(scaled)
    assert moved["torchtitan"] == pytest.approx(base["torchtitan"], rel=1e-9)
    assert moved["bloom"][0] > base["bloom"][0] + 0.05


def test_the_catalog_holds_the_fitted_overhead_and_says_how_it_held_out_of_sample(fit, records):
    """Every framework file carries the value fit_memory finds on the published readings, labelled
    FITTED with the sources and their leave-one-source-out memory error."""
    value = float(fit.fit_memory(records)[0])
    for name in fit.FRAMEWORKS:
        fw = catalog.load_framework(name)
        assert fw.allocator_fragmentation == pytest.approx(value, abs=5e-4), name
        line = next(ln for ln in (ROOT / "costmodels" / "catalog" / "frameworks" / f"{name}.yaml")
                    .read_text().splitlines() if ln.startswith("allocator_fragmentation:"))
        assert re.search(r"FITTED \(benchmarks/fit\.py, fit_memory\): \d+ peak-memory readings .* from 2 sources "
                         r"\(bloom, torchtitan\); leave-one-source-out memory MAPE bloom \d+\.\d% \(\d+ runs\), "
                         r"torchtitan \d+\.\d% \(\d+ runs\)", line), line
