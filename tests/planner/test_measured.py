"""probe -> calibrate -> replan (issue 9): the runs a calibration was made on re-rank the candidates they
measured. A review of 2026-12-07 probed three candidates, measured the third fastest by 16%, calibrated,
replanned, and got the first again: the plan never looked at the measurements, only at the refitted
constants. Each test fails on the code before (calib.yaml kept no layouts)."""
import json
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from costmodels.errors import SpecError
from planner.calibrate import case_for_log
from planner.cli import main
from planner.measured import measured_layouts

sys.path.insert(0, str(Path(__file__).parent))
from mds_log import mds_log  # noqa: E402

PLAN = ["plan", "--model", "gpt-1.7b", "--cluster", "H100-SXM", "--gpus", "16", "--global-batch", "64"]


def _log(job, rank, step_s):
    log = job / "probe" / f"{rank}.log"
    case = case_for_log(log, job / "plan.json")
    log.write_text(mds_log(step_s * 1e3, gbs=case.layout.gbs, seq=case.layout.seq_len,
                           args={"num_layers": case.model.num_layers, "hidden_size": case.model.hidden,
                                 "tensor_model_parallel_size": case.layout.tp}))
    return str(log)


@pytest.fixture(scope="module")
def probed(tmp_path_factory):
    job = tmp_path_factory.mktemp("measured") / "job"
    r = CliRunner().invoke(main, PLAN + ["--probe", "3", "--out", str(job), "-q"])
    assert r.exit_code == 0, r.output
    return job


def _calibrate(job, tmp_path, times):
    logs = [_log(job, rank, t) for rank, t in zip((1, 2, 3), times)]
    calib = tmp_path / "calib.yaml"
    r = CliRunner().invoke(main, ["calibrate", *logs, "--out", str(calib)])
    assert r.exit_code == 0, r.output
    return calib


def test_the_candidate_measured_fastest_is_the_plan(probed, tmp_path):
    plan = json.loads((probed / "plan.json").read_text())
    predicted = plan["estimate"]["step_time_s"]
    calib = _calibrate(probed, tmp_path, (predicted * 1.20, predicted * 1.18, predicted * 1.02))
    runs = yaml.safe_load(calib.read_text())["runs"]
    assert [r["layout"] for r in runs] == [plan["layout"]] + [c["layout"] for c in plan["runner_ups"][:2]]
    r = CliRunner().invoke(main, PLAN + ["--json", "-q", "--calibration", str(calib)])
    assert r.exit_code == 0, r.output
    replan = json.loads(r.stdout)
    assert replan["layout"] == plan["runner_ups"][1]["layout"]            # the third, measured fastest
    assert replan["why"][0].startswith("picked by measurement")
    assert any(c["layout"] == plan["layout"] for c in replan["runner_ups"])   # the old pick is still shown


def test_a_measured_pick_that_ran_fastest_stays(probed, tmp_path):
    plan = json.loads((probed / "plan.json").read_text())
    predicted = plan["estimate"]["step_time_s"]
    calib = _calibrate(probed, tmp_path, (predicted * 1.05, predicted * 1.30, predicted * 1.40))
    r = CliRunner().invoke(main, PLAN + ["--json", "-q", "--calibration", str(calib)])
    assert r.exit_code == 0, r.output
    replan = json.loads(r.stdout)
    assert replan["layout"] == plan["layout"]
    assert not any(w.startswith("picked by measurement") for w in replan["why"])


def test_runs_of_another_model_or_gpu_count_are_not_matched_and_damage_is_one_line():
    layout = {"tp": 1, "pp": 1}
    runs = [{"model": "gpt-1.7b", "num_gpus": 16, "layout": layout, "measured_step_s": 2.0},
            {"model": "gpt-1.7b", "num_gpus": 8, "layout": {"tp": 2}, "measured_step_s": 1.0},
            {"model": "llama2-7b", "num_gpus": 16, "layout": {"tp": 4}, "measured_step_s": 1.0},
            {"id": "written before layouts were recorded", "measured_step_s": 1.0}]
    got = measured_layouts(runs, "gpt-1.7b", 16)
    assert list(got.values()) == [2.0]
    for bad in ("not a list", [3], [{"layout": "tp 1", "measured_step_s": 1.0}],
                [{"layout": {}, "measured_step_s": float("nan")}], [{"layout": {}, "measured_step_s": True}]):
        with pytest.raises(SpecError) as exc:
            measured_layouts(bad, "gpt-1.7b", 16)
        assert "\n" not in str(exc.value) and "planner calibrate" in str(exc.value)


def test_a_damaged_runs_list_in_calib_yaml_is_one_error_line(probed, tmp_path):
    plan = json.loads((probed / "plan.json").read_text())
    calib = _calibrate(probed, tmp_path, (plan["estimate"]["step_time_s"],) * 3)
    data = yaml.safe_load(calib.read_text())
    data["runs"][0]["measured_step_s"] = -1
    calib.write_text(yaml.safe_dump(data))
    r = CliRunner().invoke(main, PLAN + ["-q", "--calibration", str(calib)])
    assert r.exit_code == 2
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "measured_step_s" in lines[0], r.output
