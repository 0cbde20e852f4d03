"""The planner's own jobs trained on an H100 (benchmarks/data/gpu_runs.yaml, issue 10): the record holds
what the issue asks for, and benchmarks/validate.py can predict every run again."""
import re

import pytest
import yaml

from benchmarks.gpu_probe import LAYOUTS, _hook_memory
from benchmarks.gpu_runs import GPU_RUNS_FILE, load_gpu_runs
from planner.emit.megatron_ds import DEEPSPEED_TESTED, MEGATRON_DEEPSPEED_COMMIT
from planner.validation import evaluate


@pytest.fixture(scope="module")
def doc():
    return yaml.safe_load(GPU_RUNS_FILE.read_text())


def test_the_record_names_commit_versions_and_gpu(doc):
    assert re.fullmatch(r"[0-9a-f]{40}", doc["commit"]) and doc["commit_dirty"] is False
    assert doc["megatron_deepspeed_commit"] == MEGATRON_DEEPSPEED_COMMIT
    env = doc["environment"]
    assert env["deepspeed"].startswith(DEEPSPEED_TESTED)
    assert "H100" in env["gpu"] and env["torch"] and env["cuda"] and env["driver"]
    assert {s["replaced"].split()[0] for s in doc["substitutions"]} >= {"NVIDIA", "apex", "flash-attn"}


def test_every_layout_ran_and_every_finished_run_has_measured_and_predicted(doc):
    names = [r["name"] for r in doc["runs"]]
    assert names == [l[0] for l in LAYOUTS]                       # all 14 planned layouts, in order
    finished = [r for r in doc["runs"] if r["measured"]]
    assert len(finished) >= 13
    for r in finished:
        m, p = r["measured"], r["predicted"]
        assert r["launch"]["exit_code"] == 0 and m["iterations"] == doc["iterations"] == 30
        assert m["step_time_spread_s"][0] <= m["step_time_s"] <= m["step_time_spread_s"][1]
        assert 0 < m["max_allocated_gib"] <= m["max_reserved_gib"] < 80
        assert p["step_time_s"] > 0 and p["peak_memory_gib"] > p["allocated_gib"] > 0
        assert r["layout"]["zero_stage"] == int(r["name"][1])       # the layout the name says
    for r in doc["runs"]:
        if not r["measured"]:
            assert r["partial"]["iterations"] < 30 and "truncated" in r["error"]


def test_validate_predicts_every_finished_run_again():
    results = evaluate(load_gpu_runs())
    assert len(results) >= 13
    for r in results:
        assert r.fits and r.predicted_step_s > 0 and r.predicted_memory_gib > 0
        assert r.record.memory_method == "allocated"


def test_memory_hook_takes_the_training_process_not_the_launchers():
    # the launcher's processes print zeros after the training process (the first run kept the zeros)
    text = ("gpu_probe_memory max_allocated=31178710016 max_reserved=31606177792\n"
            "gpu_probe_memory max_allocated=0 max_reserved=0\n"
            "gpu_probe_memory max_allocated=0 max_reserved=0\n")
    assert _hook_memory(text) == {"max_allocated": 31178710016, "max_reserved": 31606177792}
    assert _hook_memory("gpu_probe_memory max_allocated=0 max_reserved=0\n") == {}


def test_validate_prints_the_gpu_runs_as_a_source(capsys):
    from benchmarks.validate import gpu_runs_section
    report = {}
    gpu_runs_section(report)
    out = capsys.readouterr().out
    assert "trained on one H100" in out and "80% band held for" in out
    inside, n = report["gpu_runs_in_band"]
    assert n == len(report["gpu_runs"]) >= 13 and 0 <= inside <= n
    # the planner ranks layouts: how often it orders two measured runs as measured, and where its pick lands
    right, pairs = report["gpu_runs_pair_order"]
    assert "ranking:" in out and pairs >= 60 and 0.0 <= right <= 1.0
    assert 1 <= report["gpu_runs_pick_measured_rank"] <= n


def test_calibration_benchmark_calibrates_on_the_gpu_runs():
    # benchmarks/calibration.py (e): calibrate on one GPU run, predict the other 12; 'before' is the
    # catalog's prediction, the same figure validate.py prints for these runs
    import numpy as np
    from benchmarks.calibration import per_source
    results = evaluate(load_gpu_runs())
    (key, got), = per_source(load_gpu_runs(), by_cluster=True).items()
    assert key == "gpu-probe:megatron-deepspeed H100-SXM" and got["runs"] == len(results)
    assert abs(got["mape_before"] - np.mean([abs(r.step_error) for r in results])) < 0.01
    assert got["mape_after_3"] is not None and got["mape_scale_bound"] <= got["mape_before"]


def test_probe_reruns_a_layout_with_deepspeeds_throughput_timer_unsynchronised(tmp_path, monkeypatch):
    # the next GPU session's A/B (issue 8): the same job with DeepSpeed's per-micro-batch device sync off
    import json
    from benchmarks.gpu_probe import SAVE_CHECKPOINT, UNSYNCED, tasks
    name = sorted(SAVE_CHECKPOINT)[0]
    job = tmp_path / "jobs" / name
    job.mkdir(parents=True)
    planned = {"train_batch_size": 16, "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 16,
               "zero_optimization": {"stage": 1}, "bf16": {"enabled": True}}
    (job / "ds_config.json").write_text(json.dumps(planned))
    logs = tmp_path / "logs"
    logs.mkdir()
    got = tasks(tmp_path / "jobs", [name, "other"], {"other"}, {name + UNSYNCED}, [name], logs)
    assert [t[0] for t in got] == [name, name + UNSYNCED]
    (_, _, extra, env), (_, folder, extra_b, env_b) = got
    assert "--save" not in extra and env == {}         # the planned run is unchanged (and saves its checkpoint)
    assert folder == job and extra_b[-2] == "--deepspeed_config" and extra_b[:4] == ["--log-interval", "1", "--save", ""]
    assert env_b == {"GPU_PROBE_TRACE": str(logs / f"{name}{UNSYNCED}.trace")}
    config = json.loads(open(extra_b[-1]).read())
    assert {k: v for k, v in config.items() if k != "timers"} == planned
    pytest.importorskip("deepspeed")
    import deepspeed.comm as dist
    from deepspeed.runtime.config import DeepSpeedConfig
    monkeypatch.setattr(dist, "get_rank", lambda *a, **k: 0)
    monkeypatch.setattr(dist, "get_world_size", lambda *a, **k: 1)
    parsed = DeepSpeedConfig(config)
    assert parsed.timers_config.enabled and parsed.timers_config.synchronized is False
    assert DeepSpeedConfig(planned).timers_config.synchronized is True      # DeepSpeed's default: synchronised
