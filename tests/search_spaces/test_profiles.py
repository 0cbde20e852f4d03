"""The two 'framework' notions named apart (issue 12, One house): a rules profile (what --framework
selects: rules and job target) names the cost profile (catalog frameworks/*.yaml) it is scored with."""
import pytest

import planner
from costmodels.types import Framework
from planner.serialise import plan_to_dict
from planner.ties import bands_dict
from search_spaces.frameworks import PROFILES, RulesProfile


def test_each_rules_profile_names_a_cost_profile():
    assert {n: p.cost_profile for n, p in PROFILES.items()} == {"megatron-deepspeed": "megatron-deepspeed",
                                                                  "megatron-lm": "megatron-core"}
    for profile in PROFILES.values():
        assert isinstance(profile, RulesProfile)
        cost = profile.load_cost_profile()
        assert isinstance(cost, Framework) and cost.name == profile.cost_profile
    # the overrides a calibration puts on a profile reach its cost profile, and only those
    from dataclasses import replace
    mds = PROFILES["megatron-deepspeed"]
    calibrated = replace(mds, cost_overrides=(("host_overhead_s", 99e-6),)).load_cost_profile()
    assert calibrated.host_overhead_s == 99e-6 != mds.load_cost_profile().host_overhead_s
    assert replace(calibrated, host_overhead_s=mds.load_cost_profile().host_overhead_s) == mds.load_cost_profile()


def test_megatron_lm_is_scored_with_the_megatron_core_cost_profile():
    result = planner.plan("gpt-1.7b", "H100-SXM", gpus=8, global_batch=64, top_k=1, framework="megatron-lm")
    data = plan_to_dict(result)
    assert data["inputs"]["framework"] == "megatron-lm"          # the rules profile
    assert data["estimate"]["framework"] == "megatron-core"      # the cost profile


@pytest.fixture(scope="module")
def calibrated():
    return planner.plan("gpt-1.7b", "H100-SXM", gpus=8, global_batch=64, top_k=2,
                        calibration={"iteration_overhead_s": 2.0})


def test_the_cost_profile_carries_the_calibration(calibrated):
    assert calibrated.profile.load_cost_profile().iteration_overhead_s == 2.0


def test_a_calibrated_plans_bands_use_the_calibrated_cost_profile(calibrated):
    """The step-time band was made with the uncalibrated constants: 10 ms - 11.5 s around a 5.3 s step with 5 s (now refused: at most 2 s, as in a calib.yaml)."""
    r = calibrated
    est = plan_to_dict(r)["estimate"]
    expected = bands_dict(r.model, r.cluster, r.profile.load_cost_profile(), r.best.layout, r.best.estimate)
    assert est["step_time_band_s"] == expected["step_time_band_s"]
    low, high = est["step_time_band_s"]
    assert 0.4 * est["step_time_s"] < low <= est["step_time_s"] <= high
