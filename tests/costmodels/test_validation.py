"""The cost model against the measured runs of ../shared/validation (in-sample: the catalog's
constants were fitted on these runs). The out-of-sample figures (leave-one-source-out, held-out
runs) are benchmark targets printed by benchmarks/validate.py, not tests."""
import pytest

from planner.validation import evaluate, load_records, summarize

# Known misses, stated in README (issue 8): DeepSpeed ZeRO-3 memory on 175B-2T dense models is
# over-predicted (the Azure runs fit in reality), the GB200 functional tests run in deterministic
# mode far below Hopper's fraction of peak, the tp-32 long-sequence example and the ZeRO-3 runs at
# micro batch 1 are latency-bound beyond what the model captures.
KNOWN_NOT_FITTING = {"azure-ds-175b-seq512-256gpu-mbs32", "azure-ds-175b-seq1024-128gpu-mbs16",
                     "azure-ds-1t-seq1024-1024gpu-mbs8", "azure-ds-2t-seq1024-1024gpu-mbs8"}


@pytest.fixture(scope="module")
def summary(validation_dir):
    return summarize(evaluate(load_records(validation_dir)))


def test_step_time_in_sample(summary):
    assert summary["mape_mean_of_sources"] <= 0.12
    for source, mape in summary["mape_by_source"].items():
        assert mape <= 0.30, source


def test_few_runs_are_off_by_more_than_30_percent(summary):
    published = [r for r in summary["over_30pct"] if not r.startswith("vtrain")]
    assert len(published) <= 6
    assert len(summary["over_30pct"]) <= 0.35 * summary["count_by_source"]["vtrain"]


def test_memory_within_10_percent_where_measured(summary):
    assert summary["memory_mape"] <= 0.05
    # One BLOOM row was measured on a different code branch (record notes); every other within 10%.
    assert set(summary["memory_over_10pct"]) <= {"bloom-prequel-0221-181b-zero0"}
    assert summary["memory_max"] <= 0.15


def test_published_runs_are_predicted_to_fit(summary):
    assert set(summary["not_fitting"]) <= KNOWN_NOT_FITTING


def test_pair_order(summary):
    assert summary["pair_order_right"] >= 0.85
