"""Fuzzing round 16 (2026-11-25): calibrate took a log of another cluster size, precision or
recomputation, a log of its warm-up iterations only, measurements no constant could match (pinned at
their bounds, written with exit 0), a runs record without its global batch or tp, and a layout its
framework refuses; a UTF-16 log was called 'not a training log'; explain rendered a plan.json whose
framework was renamed (skipping its rules), whose memory, ranks, ties, iterations or candidates were
edited; a calib.yaml's `made_on: []` turned its scope check off; `estimate --calibration` never said it
applied one; a Llama-family config.json with a GELU was read as an ungated MLP. Each test failed before."""
import json
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).parent))
from mds_log import mds_log  # noqa: E402
from test_fuzz_round11 import one_error, run  # noqa: E402

from costmodels.catalog import load_model


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    out = tmp_path_factory.mktemp("r16") / "job"
    r = run("plan", "--model", "gpt-1.7b", "--cluster", "H100-SXM", "--gpus", "16", "--global-batch", "64",
            "--out", out, "-q")
    assert r.exit_code == 0, r.output
    return out


def _log(job, tmp_path, ms=None, name="1.log", **kw):
    from planner.calibrate import Run, case_for_log, predict
    (tmp_path / "probe").mkdir(exist_ok=True)
    log = tmp_path / "probe" / name
    case = case_for_log(log, job / "plan.json")
    if ms is None:
        ms = predict([Run("x", "x", case, 1.0)], {})[0] * 1e3
    args = {"num_layers": case.model.num_layers, "hidden_size": case.model.hidden,
            "world_size": case.cluster.num_gpus, "data_parallel_size": case.layout.dp,
            "bf16": True, "fp16": False, "checkpoint_activations": False, "recompute_granularity": None}
    args.update(kw.pop("args", {}))
    log.write_text(mds_log(ms, gbs=case.layout.gbs, seq=case.layout.seq_len, args=args, **kw))
    return log, case


def test_a_matching_log_still_calibrates(job, tmp_path):
    log, _ = _log(job, tmp_path)
    r = run("calibrate", log, "--plan", job / "plan.json")
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("args, words", [
    ({"world_size": 32}, "world_size 32 in the log, 16 in the plan"),
    ({"data_parallel_size": 4}, "data_parallel_size 4 in the log"),
    ({"fp16": True, "bf16": False}, "it trained in fp16"),
    ({"checkpoint_activations": True}, "recompute full"),
    ({"recompute_granularity": "selective"}, "recompute selective"),
    ({"num_layers": "24.5"}, "not a whole number; the log is damaged"),
    ({"hidden_size": "nan"}, "not a whole number"),
    ({"bf16": "maybe"}, "not True or False"),
])
def test_a_log_of_another_cluster_size_precision_or_recompute_is_refused(job, tmp_path, args, words):
    log, _ = _log(job, tmp_path, args=args)
    one_error(run("calibrate", log, "--plan", job / "plan.json"), words)


def test_a_log_of_warm_up_iterations_only_is_refused(job, tmp_path):
    log, _ = _log(job, tmp_path, train_iters=2)
    one_error(run("calibrate", log, "--plan", job / "plan.json"), "only warm-up iterations")


def test_a_utf16_log_is_named_as_utf16(job, tmp_path):
    log, _ = _log(job, tmp_path)
    log.write_bytes(log.read_text().encode("utf-16"))
    one_error(run("calibrate", log, "--plan", job / "plan.json"), "looks like UTF-16")


@pytest.mark.parametrize("factor", [100.0, 0.01])
def test_measurements_no_constant_can_match_are_refused_and_nothing_written(job, tmp_path, factor):
    log, case = _log(job, tmp_path)
    from planner.calibrate import Run, predict
    _log(job, tmp_path, ms=predict([Run("x", "x", case, 1.0)], {})[0] * 1e3 * factor)
    out = tmp_path / "calib.yaml"
    line = one_error(run("calibrate", log, "--plan", job / "plan.json", "--out", out),
                     "the calibration cannot match the runs")
    assert "bound" in line and not out.exists()


def _record(**parallel):
    return {"id": "mine-1", "model": {"name": "gpt-1.7b", "num_layers": 24, "hidden_size": 2304,
                                      "ffn_hidden_size": 9216, "num_attention_heads": 24, "num_kv_heads": 24,
                                      "vocab_size": 50304, "seq_length": 2048, "activation": "gelu"},
            "cluster": {"gpu": "H100-SXM", "num_gpus": 8, "gpus_per_node": 8},
            "parallel": {"tp": 1, "pp": 1, "dp": 8, "cp": 1, "micro_batch": 1, "global_batch": 32, **parallel},
            "measured": {"step_time_s": 0.5}}


@pytest.mark.parametrize("key", ["global_batch", "tp", "dp"])
def test_a_runs_record_without_its_batch_or_degrees_is_refused_naming_the_field(tmp_path, key):
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump([_record(**{key: None})]))
    one_error(run("calibrate", path), f"parallel.{key} is missing or null")


def test_a_runs_record_its_framework_cannot_run_is_refused(tmp_path):
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump([_record(pp=2, dp=4, zero_stage=2)]))
    one_error(run("calibrate", path), "cannot have run on megatron-deepspeed")


def test_too_many_runs_are_refused_before_fitting(tmp_path, monkeypatch):
    import importlib
    monkeypatch.setattr(importlib.import_module("planner.calibrate"), "MAX_RUNS", 1)
    path = tmp_path / "runs.yaml"
    recs = [_record(), {**_record(micro_batch=2), "id": "mine-2"}]
    path.write_text(yaml.safe_dump(recs))
    one_error(run("calibrate", path), "at most 1 are taken")


def _edited(job, tmp_path, edit):
    d = json.loads((job / "plan.json").read_text())
    edit(d)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(d))
    return path


@pytest.mark.parametrize("edit, words", [
    (lambda d: d["inputs"].__setitem__("framework", "foo"), "names the framework 'foo'"),
    (lambda d: d["inputs"].__setitem__("framework", "megatron-lm"), "cost profile"),
    (lambda d: d["estimate"].__setitem__("peak_memory_bytes", 1e13), "peak_memory_bytes is not"),
    (lambda d: d["estimate"].__setitem__("fits", False), "only layouts that fit"),
    (lambda d: d["ties"].__setitem__("preferred_rank", 99), "ties.preferred_rank"),
    (lambda d: d["ties"].__setitem__("oom_risk_ranks", ["x"]), "ties.oom_risk_ranks"),
    (lambda d: d["runner_ups"][0].__setitem__("rank", "two"), "runner_ups[0].rank"),
    (lambda d: d["schedule"].__setitem__("train_iters", -5), "schedule.train_iters"),
    (lambda d: d["candidates"][0].__setitem__(0, 1e300), "candidates must be rows"),
    (lambda d: d["defaults_used"].append(7), "defaults_used"),
])
def test_explain_refuses_an_edited_plan(job, tmp_path, edit, words):
    one_error(run("explain", _edited(job, tmp_path, edit)), words)


def test_explain_still_renders_the_plan_as_written(job):
    r = run("explain", job / "plan.json")
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("made_on", [[], False, 0, "", None])
def test_a_calibration_scope_that_is_not_a_mapping_is_refused(job, tmp_path, made_on):
    path = tmp_path / "calib.yaml"
    path.write_text(yaml.safe_dump({"made_on": made_on, "constants": {"compute_scale": 1.0}}))
    one_error(run("estimate", job / "plan.json", "--calibration", path), "'made_on' must map")


def test_estimate_says_it_applied_a_calibration_and_warns_on_a_calibrated_plan_without_one(job, tmp_path):
    path = tmp_path / "calib.yaml"
    path.write_text(yaml.safe_dump({"made_on": {"gpu": "H100-SXM", "framework": "megatron-deepspeed"},
                                    "constants": {"compute_scale": 1.1}}))
    r = run("estimate", job / "plan.json", "--calibration", path, "--json")
    assert r.exit_code == 0, r.output
    assert any(d.startswith("calibrated constants: compute_scale 1.1") for d in json.loads(r.stdout)["defaults_used"])
    out = tmp_path / "cal_job"
    r = run("plan", "--model", "gpt-1.7b", "--cluster", "H100-SXM", "--gpus", "16", "--global-batch", "64",
            "--calibration", path, "--out", out, "-q")
    assert r.exit_code == 0, r.output
    r = run("estimate", out / "plan.json")
    assert r.exit_code == 0, r.output
    assert "uncalibrated: the plan was made with calibrated constants" in r.stdout


@pytest.mark.parametrize("model_type, act", [("llama", "gelu"), ("mistral", "gelu_pytorch_tanh"),
                                             ("qwen2", "relu"), ("olmo2", "gelu")])
def test_a_llama_family_mlp_is_gated_whatever_its_activation(tmp_path, model_type, act):
    cfg = {"model_type": model_type, "hidden_size": 2048, "intermediate_size": 5632, "num_attention_heads": 16,
           "num_hidden_layers": 22, "num_key_value_heads": 4, "vocab_size": 32000, "hidden_act": act,
           "rms_norm_eps": 1e-5}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    assert load_model(str(path)).gated_mlp
    cfg["model_type"], cfg["hidden_act"] = "gpt_neox", "gelu"
    path.write_text(json.dumps(cfg))
    assert not load_model(str(path)).gated_mlp


# Review of the round (helper): preference rules refused runnable records, unchecked types gave
# tracebacks, a zero-filled log was called UTF-16, another calibration than the plan's went unnoticed.

@pytest.mark.parametrize("parallel", [dict(recompute="selective"), dict(tp=2, dp=4, sequence_parallel=True)])
def test_a_record_that_breaks_only_a_preference_rule_still_calibrates(tmp_path, parallel):
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump([_record(**parallel)]))
    r = run("calibrate", path)
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("edit, words", [
    (lambda d: d["estimate"].__setitem__("peak_memory_bytes", "x"), "peak_memory_bytes 'x' is not a number"),
    (lambda d: d["estimate"].__setitem__("memory_breakdown_bytes", [1, 2]), "memory_breakdown_bytes is not a mapping"),
    (lambda d: d["ties"].__setitem__("preferred_rank", [1]), "ties.preferred_rank"),
    (lambda d: d["ties"].__setitem__("oom_risk_ranks", [[2]]), "ties.oom_risk_ranks"),
])
def test_explain_refuses_mistyped_fields_in_one_line(job, tmp_path, edit, words):
    one_error(run("explain", _edited(job, tmp_path, edit)), words)


def test_a_zero_filled_log_is_not_called_utf16(job, tmp_path):
    log, _ = _log(job, tmp_path)
    log.write_bytes(b"\0" * 3000)
    line = one_error(run("calibrate", log, "--plan", job / "plan.json"), "has no iteration lines")
    assert "UTF-16" not in line


def test_estimating_a_calibrated_plan_with_another_calibration_warns(job, tmp_path):
    one, two = tmp_path / "one.yaml", tmp_path / "two.yaml"
    for path, scale in ((one, 1.1), (two, 0.9)):
        path.write_text(yaml.safe_dump({"made_on": {"gpu": "H100-SXM", "framework": "megatron-deepspeed"},
                                        "constants": {"compute_scale": scale}}))
    out = tmp_path / "cal_job"
    r = run("plan", "--model", "gpt-1.7b", "--cluster", "H100-SXM", "--gpus", "16", "--global-batch", "64",
            "--calibration", one, "--out", out, "-q")
    assert r.exit_code == 0, r.output
    assert "uncalibrated" in run("estimate", out / "plan.json", "--calibration", two).stdout
    assert "uncalibrated" not in run("estimate", out / "plan.json", "--calibration", one).stdout
