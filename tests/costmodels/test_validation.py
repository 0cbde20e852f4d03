"""The cost model against the published, measured runs of ../shared/validation."""
import pytest

from planner.validation import evaluate, load_records, summarize


@pytest.fixture(scope="module")
def summary(validation_dir):
    return summarize(evaluate(load_records(validation_dir)))


def test_step_time_mape_overall_and_per_source(summary):
    assert summary["mape_overall"] <= 0.10
    for source, mape in summary["mape_by_source"].items():
        assert mape <= 0.10, source


def test_no_published_run_is_off_by_more_than_30_percent(summary):
    published = [r for r in summary["over_30pct"] if not r.startswith("vtrain")]
    assert published == []
    # vTrain rows with tp = 8 and micro batch 1 (README: known limitation) stay a small minority.
    assert len(summary["over_30pct"]) <= 0.02 * summary["count_by_source"]["vtrain"]


def test_memory_within_10_percent_where_measured(summary):
    assert summary["memory_mape"] <= 0.10
    # One BLOOM row was measured on a different code branch (record notes); every other within 10%.
    assert set(summary["memory_over_10pct"]) <= {"bloom-prequel-0221-181b-zero0"}
    assert summary["memory_max"] <= 0.15


def test_every_published_run_is_predicted_to_fit(summary):
    assert summary["not_fitting"] == []


def test_pair_order(summary):
    assert summary["pair_order_right"] >= 0.90
