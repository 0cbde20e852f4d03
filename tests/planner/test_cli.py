"""The command line as a user drives it: estimate, plan --json, explain, catalog."""
import json
from pathlib import Path

from click.testing import CliRunner

from planner.cli import main

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "llama2-7b-h100.yaml"
ESTIMATE_KEYS = {"step_time_s", "tokens_per_s_per_gpu", "model_tflops_per_gpu", "mfu", "peak_memory_bytes",
                 "fits", "memory_breakdown_bytes", "time_breakdown_s"}


def test_estimate_json_has_the_documented_keys():
    r = CliRunner().invoke(main, ["estimate", str(EXAMPLE), "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert ESTIMATE_KEYS <= set(data)
    assert data["training"]["gpu_hours"] > 0 and data["training"]["cost"] > 0   # price in the example
    assert any("flash_attention" in d for d in data["defaults_used"])


def test_estimate_text_shows_breakdowns_and_defaults():
    r = CliRunner().invoke(main, ["estimate", str(EXAMPLE)])
    assert r.exit_code == 0
    for word in ("step time", "MFU", "memory per GPU", "optimizer state", "TP collectives", "defaults used"):
        assert word in r.stdout


def test_plan_json_estimate_and_explain_round_trip(tmp_path):
    out = tmp_path / "job"
    r = CliRunner().invoke(main, ["plan", "--model", "llama2-7b", "--cluster", "H100-SXM", "--gpus", "8",
                                  "--global-batch", "256", "--json", "--out", str(out)])
    assert r.exit_code == 0, r.output
    plan = json.loads(r.stdout)
    assert {"layout", "estimate", "runner_ups"} <= set(plan)
    assert {"tp", "pp", "dp", "cp", "micro_batch", "global_batch", "zero_stage", "recompute",
            "precision"} <= set(plan["layout"])
    assert ESTIMATE_KEYS <= set(plan["estimate"])
    again = CliRunner().invoke(main, ["estimate", str(out / "plan.json"), "--json"])
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["step_time_s"] == plan["estimate"]["step_time_s"]
    # the Python API takes the plan.json as the CLI does (a review of 2026-12-07: "unknown key 'candidates'")
    import planner
    api = planner.estimate(out / "plan.json")
    assert api.estimate.step_time_s == plan["estimate"]["step_time_s"]
    assert api.step_time_band_s == tuple(plan["estimate"]["step_time_band_s"])
    report = CliRunner().invoke(main, ["explain", str(out / "plan.json")])
    assert report.exit_code == 0 and "## Why this layout" in report.stdout
    rerendered = CliRunner().invoke(main, ["explain", str(out / "plan.json"), "--out", str(tmp_path / "again")])
    assert rerendered.exit_code == 0, rerendered.output
    assert (tmp_path / "again" / "report.md").read_bytes() == (out / "report.md").read_bytes()
    assert (tmp_path / "again" / "memory.png").read_bytes() == (out / "memory.png").read_bytes()


def test_plan_and_explain_json_print_the_same_reading_order(tmp_path):
    """README: both print inputs, defaults used, layout, estimate, cost, warnings, why, runner-ups,
    Pareto front and ties first and the search statistics and scatter data (`candidates`) last; explain
    printed plan.json's sorted keys after `pareto` (candidates before search)."""
    out = tmp_path / "job"
    r = CliRunner().invoke(main, ["plan", "--model", "gpt-1.7b", "--cluster", "H100-SXM", "--gpus", "8",
                                  "--global-batch", "64", "--json", "--out", str(out)])
    assert r.exit_code == 0, r.output
    head = ["inputs", "defaults_used", "layout", "estimate", "cost", "warnings", "why", "runner_ups", "pareto",
            "ties"]
    tail = ["search", "candidates_columns", "candidates"]
    assert list(json.loads(r.stdout)) == head + tail
    e = CliRunner().invoke(main, ["explain", str(out / "plan.json"), "--json"])
    keys = list(json.loads(e.stdout))
    assert keys[:len(head)] == head and keys[-len(tail):] == tail
    assert keys[len(head):-len(tail)] == sorted(keys[len(head):-len(tail)])     # the job's own fields


def test_catalog_lists_the_presets():
    r = CliRunner().invoke(main, ["catalog", "--json"])
    data = json.loads(r.stdout)
    assert {"V100-32GB", "A100-40GB", "A100-80GB", "H100-SXM", "H100-PCIe", "H200", "B200", "GB200"} <= set(data["gpus"])
    assert {"gpt3-175b", "llama2-7b", "llama3.1-405b", "bloom-176b", "geniac-12.3b", "gpt-1t"} <= set(data["models"])


def test_help_everywhere():
    for cmd in ([], ["plan"], ["estimate"], ["explain"], ["catalog"], ["validate"]):
        r = CliRunner().invoke(main, cmd + ["--help"])
        assert r.exit_code == 0 and "Usage" in r.output


def test_hugging_face_config(tmp_path):
    cfg = Path(__file__).resolve().parents[2] / "examples" / "llama3.1-8b-config.json"
    from planner.specs import load_model
    m = load_model(str(cfg))
    assert (m.num_kv_heads, m.gated_mlp, m.norm, m.position, m.tied_embeddings) == (8, True, "rmsnorm", "rope", False)
    assert m.rope_theta == 500000
    gpt2 = tmp_path / "config.json"
    gpt2.write_text(json.dumps({"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12,
                                "vocab_size": 50257, "n_positions": 1024, "activation_function": "gelu_new"}))
    g = load_model(str(gpt2))
    assert (g.hidden, g.num_layers, g.ffn_hidden, g.position, g.tied_embeddings, g.gated_mlp) == \
        (768, 12, 3072, "learned", True, False)


def test_help_is_still_click_help():
    from click.testing import CliRunner

    from planner.cli import main

    r = CliRunner().invoke(main, ["plan", "--help"])
    assert r.exit_code == 0 and r.output.startswith("Usage: ") and "plan [OPTIONS]" in r.output.splitlines()[0]


def test_optuna_only_options_are_not_silently_dropped(tmp_path, monkeypatch):
    """--storage, --study-name and --trials set up an Optuna study: with --method lattice they were
    accepted and ignored; with auto choosing the lattice nothing said they went unused."""
    import pytest

    import planner
    from costmodels.errors import SpecError
    monkeypatch.chdir(tmp_path)
    base = ["plan", "--model", "gpt-1.7b", "--cluster", "H100-SXM", "--gpus", "8", "--global-batch", "64",
            "--quiet"]
    for extra, named in ((["--trials", "50"], "--trials"),
                         (["--storage", "sqlite:///s.db", "--study-name", "x"], "--storage and --study-name")):
        r = CliRunner().invoke(main, base + ["--method", "lattice"] + extra)
        assert r.exit_code == 2, r.output
        assert f"error: {named} set" in r.stderr and "--method optuna" in r.stderr
        assert "Traceback" not in r.output and not (tmp_path / "s.db").exists()
    r = CliRunner().invoke(main, base + ["--trials", "50"])
    assert r.exit_code == 0, r.output
    assert "note: --trials not used: the lattice" in r.stderr
    assert "not used" not in CliRunner().invoke(main, base).stderr          # nothing given, nothing said
    for method in ("lattice", "exhaustive"):                # 'exhaustive': the lattice's old name
        with pytest.raises(SpecError, match="method='lattice' runs none"):
            planner.plan("gpt-1.7b", "H100-SXM", gpus=8, global_batch=64, method=method, study_name="x")
