"""Issue 12: a plan a training lead can act on (units, defaults, schedule, cost, advice, API)."""
import json
import math

import pytest
from click.testing import CliRunner

from planner.cli import main
from planner.arguments import parse_tokens


def _plan(*args):
    r = CliRunner().invoke(main, ["plan", *args])
    assert r.exit_code == 0, r.output
    return r


def _plan_json(*args):
    return json.loads(_plan(*args, "--json").stdout)


# ---- item 2: one unit convention for --global-batch-tokens, targets rounded to whole sequences -----

def test_token_suffixes_are_binary_like_the_default():
    assert parse_tokens("1M") == 2**20 and parse_tokens("4Mi") == 4 * 2**20
    assert parse_tokens("512K") == 512 * 2**10 and parse_tokens("512ki") == 512 * 2**10
    assert parse_tokens("4194304") == 4194304 and parse_tokens("4e6") == 4e6


def test_typing_the_documented_default_gives_the_default_result():
    base = ["--model", "llama2-7b", "--cluster", "H100-SXM", "--gpus", "8", "--top", "1"]
    default = _plan_json(*base)
    typed = _plan_json(*base, "--global-batch-tokens", "1M-4M")
    assert typed["layout"] == default["layout"]
    assert typed["inputs"]["request"]["global_batch_tokens"] == [2**20, 2**22]


def test_a_token_target_at_sequence_8192_is_whole_sequences():
    base = ["--model", "llama3.1-8b", "--cluster", "H100-SXM", "--gpus", "8", "--top", "1"]
    data = _plan_json(*base, "--global-batch-tokens", "16M-16M")
    assert data["layout"]["global_batch"] == 2048 and data["layout"]["seq_len"] == 8192
    single = _plan_json(*base, "--global-batch-tokens", "4M")
    assert single["layout"]["global_batch"] == 512


def test_a_decimal_target_is_rounded_to_the_nearest_whole_sequence_and_said():
    base = ["--model", "llama3.1-8b", "--cluster", "H100-SXM", "--gpus", "8", "--top", "1"]
    r = _plan(*base, "--global-batch-tokens", "4e6-4e6")
    assert "488 sequences of 8192 = 3,997,696 tokens (rounded to the nearest whole number of sequences)" \
        in r.stdout
    data = _plan_json(*base, "--global-batch-tokens", "4e6")
    assert data["layout"]["global_batch"] == 488


# ---- item 3: Hugging Face sequence length, Qwen2 QKV bias ------------------------------------------

QWEN2 = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 3584,
         "intermediate_size": 18944, "num_attention_heads": 28, "num_key_value_heads": 4,
         "num_hidden_layers": 28, "vocab_size": 152064, "max_position_embeddings": 131072,
         "hidden_act": "silu", "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": False}


@pytest.fixture
def qwen2(tmp_path):
    path = tmp_path / "qwen2-7b" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(QWEN2))
    return str(path)


def test_hf_config_trains_at_4096_not_max_position_and_says_so(qwen2):
    base = ["--model", qwen2, "--cluster", "H100-SXM", "--gpus", "16", "--top", "1"]
    r = _plan(*base)
    assert "seq 4096" in r.stdout
    assert "sequence length 4096 (min(max_position_embeddings 131,072, 4096)" in r.stdout
    data = _plan_json(*base)
    assert data["layout"]["seq_len"] == 4096
    assert any("max_position_embeddings 131,072" in d for d in data["defaults_used"])
    longer = _plan_json(*base, "--seq-len", "8192")
    assert longer["layout"]["seq_len"] == 8192


def test_hf_config_case_file_uses_the_training_length(qwen2, tmp_path):
    from planner.api import estimate

    res = estimate(model=qwen2, cluster="H100-SXM", parallel={"tp": 4, "pp": 1, "dp": 2})
    assert res.case.layout.seq_len == 4096
    assert any("seq_len = 4096" in d for d in res.defaults)


def test_qwen2_qkv_bias_is_not_dropped_silently(qwen2):
    data = _plan_json("--model", qwen2, "--cluster", "H100-SXM", "--gpus", "16", "--top", "1")
    model_warnings = [w for w in data["warnings"] if w["kind"] == "model"]
    assert model_warnings and "query/key/value" in model_warnings[0]["message"]
    assert "--disable-bias-linear" in model_warnings[0]["message"]


# ---- item 4: --train-iters from --tokens, the schedule stated in report.md --------------------------

def test_train_iters_follow_the_token_budget_and_the_report_names_the_schedule(tmp_path):
    out = tmp_path / "job"
    data = _plan_json("--model", "gpt-1.7b", "--cluster", "H100-SXM", "--gpus", "8", "--global-batch", "512",
                      "--tokens", "3e11", "--out", str(out))
    tokens_per_step = data["layout"]["global_batch"] * data["layout"]["seq_len"]
    iters = math.ceil(3e11 / tokens_per_step)
    assert f"--train-iters {iters}\n" in (out / "launch.sh").read_text()
    report = (out / "report.md").read_text()
    assert f"--train-iters {iters:,}" in report and "default to review" in report and "cosine" in report
    plan = json.loads((out / "plan.json").read_text())
    assert plan["schedule"]["train_iters"] == iters and plan["schedule"]["from_tokens"] is True


def test_without_tokens_the_report_says_train_iters_is_a_placeholder(tmp_path):
    out = tmp_path / "job"
    _plan("--model", "gpt-1.7b", "--cluster", "H100-SXM", "--gpus", "8", "--global-batch", "512", "--out", str(out))
    report = (out / "report.md").read_text()
    assert "`--train-iters 100,000` is a placeholder" in report


# ---- item 5: price and cost ---------------------------------------------------------------------------

def test_price_per_gpu_hour_prints_the_cost_everywhere(tmp_path):
    base = ["--model", "gpt-1.7b", "--cluster", "H100-SXM", "--gpus", "8", "--global-batch", "512",
            "--price-per-gpu-hour", "2.5 USD", "--tokens", "1e11"]
    r = _plan(*base)
    assert "cost 20.00 USD per hour (2.50 USD per GPU-hour)" in r.stdout and "USD to train" in r.stdout
    data = _plan_json(*base)
    cost = data["cost"]
    assert cost["currency"] == "USD" and cost["per_hour"] == pytest.approx(20.0)
    est = data["estimate"]
    assert cost["to_train"] == pytest.approx(1e11 / est["tokens_per_s"] / 3600 * 20.0)
    out = tmp_path / "job"
    _plan(*base, "--out", str(out))
    assert "**Cost** 20.00 USD per hour" in (out / "report.md").read_text()


def test_cost_objective_without_a_price_warns():
    data = _plan_json("--model", "gpt-1.7b", "--cluster", "H100-SXM", "--gpus", "8", "--global-batch", "512",
                      "--objective", "cost")
    assert [w["kind"] for w in data["warnings"]].count("cost") == 1
    assert data["cost"] is None
    priced = _plan_json("--model", "gpt-1.7b", "--cluster", "H100-SXM", "--gpus", "8", "--global-batch", "512",
                        "--objective", "cost", "--price-per-gpu-hour", "3")
    assert not [w for w in priced["warnings"] if w["kind"] == "cost"]
    assert priced["cost"]["per_hour"] == pytest.approx(24.0)


def test_bad_price_is_one_line_error():
    r = CliRunner().invoke(main, ["plan", "--model", "gpt-1.7b", "--cluster", "H100-SXM", "--gpus", "8",
                                  "--price-per-gpu-hour", "cheap"])
    assert r.exit_code == 2 and "error: --price-per-gpu-hour" in r.output


# ---- item 1: the batch scales with the cluster; every poor plan says why and what would help ------

def test_default_batch_range_scales_with_the_cluster():
    from planner.api import default_batch_tokens

    assert default_batch_tokens(8) == (2**20, 2**22)
    assert default_batch_tokens(4096) == (2**20, 2**22)
    assert default_batch_tokens(16384) == (2**22, 2**24)          # 256-1,024 tokens per GPU
    assert default_batch_tokens(10**6) == (2**24, 2**24)          # capped at 16M tokens


def test_405b_on_16k_gpus_searches_a_16m_token_batch():
    data = _plan_json("--model", "llama3.1-405b", "--cluster", "H100-SXM", "--gpus", "16384", "--top", "1")
    assert data["inputs"]["request"]["global_batch_tokens"] == [2**22, 2**24]
    assert any("4M-16M tokens (the default for 16,384 GPUs): 512-2,048 sequences of 8192" in d
               for d in data["defaults_used"])


def test_a_poor_plan_says_what_limits_it_and_the_fix_with_its_effect():
    args = ["--model", "llama3.1-405b", "--cluster", "H100-SXM", "--gpus", "16384", "--global-batch", "512",
            "--top", "1"]
    data = _plan_json(*args)
    warnings = {w["kind"]: w for w in data["warnings"]}
    assert {"batch_too_small", "pipeline_bubble", "low_mfu"} <= set(warnings)
    for w in data["warnings"]:
        assert {"kind", "message", "suggestion"} <= set(w) and w["message"] and w["suggestion"]
    small = warnings["batch_too_small"]
    assert "256 tokens per GPU on 16,384 GPUs" in small["message"]
    assert small["suggestion"].startswith("global batch 2,048 sequences (16M tokens): MFU ")
    before, after = small["predicted"]["mfu"]
    assert after > before and small["predicted"]["fits"]
    assert f"MFU {before * 100:.1f}% -> {after * 100:.1f}%" in small["suggestion"]
    # the predicted effect is what planning with that batch gives
    again = _plan_json(*args[:6], "--global-batch", "2048", "--top", "1")
    assert again["estimate"]["mfu"] == pytest.approx(after)
    bubble = warnings["pipeline_bubble"]
    # since 2026-12-06 (Megatron-DeepSpeed's memory traced) tp 8 / pp 4, until then pp 16 with 4 micro-batches
    assert "1 micro-batch through 4 pipeline stages" in bubble["message"]
    text = _plan(*args).stdout
    assert "warnings:" in text and "! batch_too_small:" in text and "-> global batch 2,048 sequences" in text


def test_poor_plan_warnings_reach_the_report(tmp_path):
    out = tmp_path / "job"
    _plan("--model", "llama3.1-405b", "--cluster", "H100-SXM", "--gpus", "16384", "--global-batch", "512",
          "--top", "1", "--out", str(out))
    report = (out / "report.md").read_text()
    assert "## Is this a good use of the cluster?" in report and "**batch_too_small**" in report


def test_fewer_gpus_advice_is_a_real_replan():
    from planner import plan as api_plan

    res = api_plan("llama3.1-405b", "H100-SXM", gpus=16384, global_batch=512, top_k=1)
    fewer = [w for w in res.warnings if w.kind == "fewer_gpus"]
    assert fewer, [str(w) for w in res.warnings]
    n2 = int(fewer[0].predicted["change"].split()[0].replace(",", ""))
    small = api_plan("llama3.1-405b", "H100-SXM", gpus=n2, global_batch=512, top_k=1, advice=False)
    assert small.best.estimate.mfu == pytest.approx(fewer[0].predicted["mfu"][1])


def test_a_good_plan_has_no_warnings():
    data = _plan_json("--model", "llama2-7b", "--cluster", "H100-SXM", "--gpus", "8", "--top", "1")
    assert data["warnings"] == []


# ---- item 8: estimate a layout that breaks the target's rules, and name the rule -----------------

CASE_SP = {"model": "llama2-7b", "cluster": {"gpu": "H100-SXM", "num_gpus": 8, "gpus_per_node": 8},
           "parallel": {"tp": 2, "pp": 1, "dp": 4, "micro_batch": 2, "global_batch": 512,
                        "sequence_parallel": True}}


def test_estimate_names_the_framework_rule_a_layout_breaks(tmp_path):
    import yaml

    case = tmp_path / "case.yaml"
    case.write_text(yaml.safe_dump(CASE_SP))
    r = CliRunner().invoke(main, ["estimate", str(case), "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["step_time_s"] > 0
    [w] = data["warnings"]
    assert w["kind"] == "framework_rule" and "'mds-no-sequence-parallel'" in w["message"]
    assert w["suggestion"].startswith("sequence_parallel could be false")
    text = CliRunner().invoke(main, ["estimate", str(case)]).stdout
    assert "! framework_rule: the layout breaks the megatron-deepspeed rule 'mds-no-sequence-parallel'" in text
    # the same layout under Megatron-LM's rules breaks none of them
    lm = dict(CASE_SP, framework="megatron-lm")
    from planner.api import estimate
    assert not estimate(lm).warnings


def test_the_shipped_example_keeps_its_framework_rules():
    from pathlib import Path

    from planner.api import estimate

    example = Path(__file__).resolve().parents[2] / "examples" / "llama2-7b-h100.yaml"
    assert estimate(str(example)).warnings == ()


# ---- items 10 and 11: a complete Python API; JSON in reading order ------------------------------

def test_python_api_to_dict_repr_version_and_write(tmp_path):
    import planner

    assert planner.__version__ and planner.__version__[0].isdigit()
    res = planner.plan("gpt-1.7b", "H100-SXM", gpus=8, global_batch=512, top_k=2)
    d = res.to_dict()
    json.dumps(d)                                        # plain Python values only
    assert d["layout"]["tp"] == res.best.layout.tp and d["warnings"] == []
    p = res.best.to_dict()
    json.dumps(p)
    assert p["estimate"]["step_time_s"] == pytest.approx(res.best.estimate.step_time_s)
    e = res.best.estimate.to_dict()
    assert e["mfu"] == pytest.approx(res.best.estimate.mfu) and "time_breakdown_s" in e
    assert repr(res).startswith("PlanResult(gpt-1.7b on 8 x H100-SXM, megatron-deepspeed: best Plan(#1: tp ")
    assert "MFU" in repr(res.best.estimate) and len(repr(res)) < 600
    out = planner.write_job(res, tmp_path / "job")
    assert (out / "launch.sh").exists() and (out / "plan.json").exists() and (out / "report.md").exists()
    from costmodels.errors import SpecError
    with pytest.raises(SpecError, match="already exists"):
        res.write(tmp_path / "job")                      # exists, no force
    res.write(tmp_path / "job", force=True)
    est = planner.estimate(model="gpt-1.7b", cluster="H100-SXM", parallel={"tp": 1, "pp": 1, "dp": 8})
    assert repr(est).startswith("EstimateResult(gpt-1.7b on 8 x H100-SXM")
    json.dumps(est.to_dict())


def test_plan_json_and_explain_json_read_in_order(tmp_path):
    out = tmp_path / "job"
    r = _plan("--model", "gpt-1.7b", "--cluster", "H100-SXM", "--gpus", "8", "--global-batch", "512", "--json",
              "--out", str(out))
    keys = list(json.loads(r.stdout))
    assert keys[:6] == ["inputs", "defaults_used", "layout", "estimate", "cost", "warnings"]
    assert keys[-1] == "candidates"
    e = CliRunner().invoke(main, ["explain", str(out / "plan.json"), "--json"])
    assert e.exit_code == 0, e.output
    ekeys = list(json.loads(e.stdout))
    assert ekeys[:4] == ["inputs", "defaults_used", "layout", "estimate"]


# ---- item 6: structurally different alternatives; ties to the simpler layout ---------------------

def test_runner_ups_are_the_best_of_other_families():
    from planner import plan as api_plan
    from planner.ranking import family_codes, family_label

    # top 10: with the fitted allocator overhead (0.145) ZeRO-3's best is the 9th family
    res = api_plan("llama2-13b", "A100-80GB", gpus=8, global_batch=64, top_k=10, advice=False)
    fams = [p.family for p in res.plans]
    objs = [p.objective[0] for p in res.plans]
    if any(w.startswith("picked for memory safety") for w in res.why):
        # tie-break rule 1 (planner.ties.safe_first): the faster OOM-risk layout it displaced is shown
        # second (since 2026-12-06 that is tp 2 / pp 1, the safe pick tp 2 / pp 2), the rest are one per
        # family in rank order
        assert objs[1] < objs[0]
        fams, objs = fams[:1] + fams[2:], objs[:1] + objs[2:]
        assert objs[1:] == sorted(objs[1:])
    else:
        assert objs == sorted(objs)                               # still best first
    assert len(set(fams)) == len(fams) >= 7                       # one plan per family here
    assert "ZeRO-3" in fams
    for p in res.plans:
        offloads = ("offload_optimizer", "offload_params", "offload_activations")
        cols = {k: [getattr(p.layout, k).code if k in offloads else getattr(p.layout, k)]
                for k in ("tp", "pp", "cp", "zero") + offloads}
        assert family_label(family_codes(cols)[0]) == p.family
    # no runner-up is the winner again with only another batch or gradient dtype
    b = res.best.layout
    for p in res.runner_ups:
        l = p.layout
        assert (l.tp, l.pp, l.cp, l.zero, l.mbs, l.recompute, l.offload_optimizer) != \
            (b.tp, b.pp, b.cp, b.zero, b.mbs, b.recompute, b.offload_optimizer)


def test_ties_go_to_the_simpler_layout_then_the_lower_zero_stage():
    import numpy as np

    from planner.ranking import KNOBS, rank_rows as _rank

    base = {k: np.zeros(4, dtype=np.int64) for k in KNOBS}
    for k in ("tp", "pp", "dp", "cp", "vpp", "mbs", "gbs", "seq_len"):
        base[k][:] = 1
    base["zero"][:] = [2, 1, 1, 3]
    base["grad_comm"][:] = [0, 1, 0, 0]            # row 1: compressed gradients (a moving part)
    base["offload_optimizer"][:] = [0, 0, 0, 0]

    class Est:
        peak_memory_bytes = np.array([1.0, 1.0, 2.0, 0.5])
        headroom_bytes = 10.0 - peak_memory_bytes

    values = np.array([1.0, 1.0, 1.00001, 1.0])    # all within the 0.01% tie
    order = list(_rank(base, Est, values, 4))
    assert order == [2, 0, 3, 1]                   # plain ZeRO-1, ZeRO-2, ZeRO-3, then compressed comm

    class Tight(Est):                              # ZeRO-1 would leave under 10% of the memory free
        peak_memory_bytes = np.array([1.0, 1.0, 9.5, 0.5])
        headroom_bytes = 10.0 - peak_memory_bytes

    assert list(_rank(base, Tight, values, 4)) == [0, 3, 1, 2]


# ---- item 7: overlapped and exposed communication ------------------------------------------------

def test_plans_show_hidden_communication(tmp_path):
    """The hidden part of each communication is shown beside the exposed part. ZeRO-2 with
    overlap_comm reduces its buckets during backward; DeepSpeed's ZeRO-3 hides none of its gathers
    (zero3_overlap 0 in the framework files), so its plans show them all as exposed."""
    out = tmp_path / "job"
    args = ["--model", "llama2-7b", "--cluster", "H100-SXM", "--gpus", "8", "--zero", "2", "--top", "1"]
    data = _plan_json(*args)
    hidden = data["estimate"]["hidden_comm_s"]
    assert hidden.get("dp_comm", 0) > 0
    exposed = data["estimate"]["time_breakdown_s"]["dp_comm"]
    # hidden + exposed = the reduction with no overlap at all (the cost model asked with overlap 0)
    from dataclasses import fields, replace

    from costmodels.estimate import estimate
    import planner
    for zero in ("2", "3"):
        res = planner.plan("llama2-7b", "H100-SXM", gpus=8, choices={"zero": [zero]}, top_k=1, advice=False)
        fw = res.profile.load_cost_profile()
        none = replace(fw, **{f.name: 0.0 for f in fields(fw) if "overlap" in f.name})
        full = estimate(res.model, res.cluster, none, res.best.layout)
        if zero == "2":
            assert exposed + hidden["dp_comm"] == pytest.approx(full.time.dp_comm)
        else:
            assert res.best.estimate.time.zero_comm == pytest.approx(full.time.zero_comm)
    text = _plan(*args).stdout
    assert "communication hidden behind compute" in text and "exposed communication" in text
    _plan(*args, "--out", str(out))
    assert "| DP gradient sync (hidden) |" in (out / "report.md").read_text()
    est = CliRunner().invoke(main, ["estimate", str(out / "plan.json")])
    assert "DP gradient sync (hidden)" in est.stdout
    # FSDP prefetches the next block's gathers (zero3_overlap 1 in the torchtitan profile): shown as hidden
    case = tmp_path / "fsdp.yaml"
    case.write_text("model: llama2-7b\ncluster: H100-SXM\nframework: torchtitan\n"
                    "parallel: {tp: 1, pp: 1, dp: 8, zero_stage: 3, micro_batch: 2, global_batch: 64}\n")
    est = CliRunner().invoke(main, ["estimate", str(case)])
    assert est.exit_code == 0 and "ZeRO-3 gathers (hidden)" in est.stdout, est.output


# ---- item 9: offload plans report host memory / NVMe per node against the cluster's ---------------

def test_offload_reports_host_memory_per_node_and_checks_it():
    from planner.api import estimate

    case = {"model": "llama2-13b",
            "cluster": {"gpu": "A100-40GB", "num_gpus": 8, "gpus_per_node": 8, "host_memory": "64 GiB"},
            "parallel": {"tp": 2, "pp": 1, "dp": 4, "zero_stage": 3, "offload_optimizer": "cpu",
                         "global_batch": 128}}
    small = estimate(case)
    needs = small.to_dict()["offload_per_node"]
    assert needs["host_memory_bytes_per_node"] == 64 * 2**30
    assert needs["host_bytes_per_node"] > needs["host_memory_bytes_per_node"] and needs["fits"] is False
    assert not small.estimate.fits
    big = estimate({**case, "cluster": {**case["cluster"], "host_memory": "2 TiB"}})
    assert big.to_dict()["offload_per_node"]["fits"] is True
    assert big.to_dict()["offload_per_node"]["host_bytes_per_node"] == needs["host_bytes_per_node"]
    plain = estimate({**case, "parallel": {**case["parallel"], "offload_optimizer": "none"}})
    assert "offload_per_node" not in plain.to_dict()


def test_offload_plan_prints_what_the_node_needs():
    r = _plan("--model", "llama2-13b", "--cluster", "A100-40GB", "--gpus", "8", "--global-batch", "128",
              "--zero", "3", "--offload-optimizer", "cpu", "--top", "1")
    assert "offload needs host memory" in r.stdout and "per node of 1.00 TiB (fits)" in r.stdout


# ---- item 14: the test PostgreSQL server is stopped by whoever started it ---------------------------

def test_postgres_script_stops_the_server_it_started(tmp_path):
    import glob
    import os
    import shutil
    import subprocess
    from pathlib import Path

    if not glob.glob("/usr/lib/postgresql/*/bin") or not shutil.which("pg_isready"):
        pytest.skip("PostgreSQL is not installed")
    script = Path(__file__).resolve().parents[2] / "scripts" / "postgres.sh"
    env = dict(os.environ, PLANNER_PG_PORT="55497")
    out = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    started = [line.split("=", 1)[1] for line in out.stdout.splitlines()
               if line.startswith("export PLANNER_TEST_POSTGRES_STARTED=")]
    assert started and Path(started[0]).is_dir()
    try:
        assert subprocess.run(["pg_isready", "-q", "-h", "127.0.0.1", "-p", "55497"]).returncode == 0
    finally:
        subprocess.run(["bash", str(script), "stop", started[0]], env=env, timeout=120, check=True)
    assert subprocess.run(["pg_isready", "-q", "-h", "127.0.0.1", "-p", "55497"]).returncode != 0
    assert not Path(started[0]).exists()


# ---- item 15: small things ------------------------------------------------------------------------

def test_small_things():
    from costmodels.types import Layout, Recompute
    from planner.text import layout_line

    assert "(1 layer/stage)" in layout_line(Layout(recompute=Recompute.FULL, recompute_layers=1))
    assert "(2 layers/stage)" in layout_line(Layout(recompute=Recompute.FULL, recompute_layers=2))
    r = CliRunner().invoke(main, ["plan", "--model", "llama2-7b", "--cluster", "H100-SXM", "--gpus", "12"])
    assert r.exit_code == 2 and "--gpus-per-node 6" in r.output and "--gpus 8 or --gpus 16" in r.output
    alias = _plan_json("--model", "gpt-1.7b", "--cluster", "H100", "--gpus", "8", "--global-batch", "64",
                       "--top", "1")
    assert "cluster 'H100' means the catalog's H100-SXM (an alias)" in alias["defaults_used"]
    exact = _plan_json("--model", "gpt-1.7b", "--cluster", "H100-SXM", "--gpus", "8", "--global-batch", "64",
                       "--top", "1")
    assert not any("alias" in d for d in exact["defaults_used"])
    cat = json.loads(CliRunner().invoke(main, ["catalog", "frameworks", "--json"]).stdout)
    assert cat["frameworks"]["torchtitan-compile"]["source"].endswith("kernels")


# ---- item 12: Optuna: progress on a pipe, one rule count, resumed and readable studies ----------

def test_progress_lines_on_a_pipe(monkeypatch, capsys):
    from planner import cli_plan

    monkeypatch.setattr(cli_plan.Progress, "LINE_EVERY_S", 0.0)
    p = cli_plan.Progress(True, "trials", lines=True)
    p(10, 40, 2e-6)
    p(40, 40, 1e-6)
    err = capsys.readouterr().err
    assert "progress: 10/40 trials" in err and "progress: 40/40 trials  best 1.000 us/token" in err
    assert "\r" not in err
    monkeypatch.setattr(cli_plan.Progress, "LINE_EVERY_S", 5.0)
    quiet = cli_plan.Progress(True, "trials", lines=True)       # a short search prints nothing
    quiet(40, 40, None)
    assert capsys.readouterr().err == ""


SMALL = ("--model", "gpt-1.7b", "--cluster", "H100-SXM", "--gpus", "8", "--global-batch", "64", "--top", "1")


def test_optuna_and_lattice_count_the_same_layouts_satisfying_the_rules(tmp_path):
    lattice = _plan_json(*SMALL, "--method", "lattice")["search"]
    r = _plan(*SMALL, "--method", "optuna", "--trials", "40", "--quiet", "--storage", f"sqlite:///{tmp_path / 's.db'}")
    head = r.stdout.splitlines()[0]
    optuna = _plan_json(*SMALL, "--method", "optuna", "--trials", "40", "--quiet",
                        "--storage", f"sqlite:///{tmp_path / 's.db'}")["search"]
    n = lattice["layouts_satisfying_rules"]
    assert 0 < n < lattice["layouts_checked"]            # the cross rules remove some combinations
    assert optuna["layouts_satisfying_rules"] == n and optuna["study"]["layouts_satisfying_rules_exact"]
    assert f"({n:,} satisfy the rules, " in head and "optuna, 40 trials" in head


def test_the_rule_count_of_a_huge_lattice_is_estimated_from_a_sample(monkeypatch):
    from planner import lattice as L
    from planner.specs import load_cluster, load_model
    from search_spaces import cpsat
    from search_spaces.frameworks import load_profile
    from search_spaces.space import SearchRequest, build_space

    req = SearchRequest(num_gpus=8, global_batch=64, global_batch_tokens=None, seq_lens=(2048,))
    space = build_space(load_model("gpt-1.7b"), load_cluster("H100-SXM", num_gpus=8), req)
    core, cat, cross, _ = cpsat.sub_lattices(space, load_profile("megatron-deepspeed").all_rules)
    exact, is_exact = L.count_lattice(space, core, cat, cross)
    assert is_exact
    monkeypatch.setattr(L, "COUNT_LIMIT", 0)
    monkeypatch.setattr(L, "SCORE_CHUNK", len(cat["zero"]) * (len(core["tp"]) // 3))   # a third of the rows
    estimate, is_exact = L.count_lattice(space, core, cat, cross)
    assert not is_exact and estimate != exact and abs(estimate / exact - 1) < 0.5


def test_a_resumed_study_says_so(tmp_path):
    store = ("--method", "optuna", "--trials", "30", "--storage", f"sqlite:///{tmp_path / 's.db'}",
             "--study-name", "lead")
    first = _plan(*SMALL, *store)
    assert "resumed" not in first.stderr
    second = _plan(*SMALL, *store[:3], "40", *store[4:], "--json")
    assert "resumed study 'lead': 30 trials done" in second.stderr.splitlines()
    study = json.loads(second.stdout)["search"]["study"]
    assert study["resumed"] is True and study["resumed_from"] == 30
    assert json.loads(_plan(*SMALL, *store, "--json", "--quiet").stdout)["search"]["study"]["resumed"]
    assert "resumed" not in _plan(*SMALL, *store, "--quiet").stderr


def test_a_stored_study_reads_well(tmp_path):
    import optuna

    from planner import __version__

    url = f"sqlite:///{tmp_path / 's.db'}"
    _plan(*SMALL, "--method", "optuna", "--trials", "30", "--quiet", "--storage", url, "--study-name", "lead",
          "--objective", "time")
    study = optuna.load_study(study_name="lead", storage=url)
    attrs = study.user_attrs
    assert {k: attrs[k] for k in ("model", "gpu", "num_gpus", "framework", "planner_objectives",
                                  "planner_version")} == {
        "model": "gpt-1.7b", "gpu": "H100-SXM", "num_gpus": 8, "framework": "megatron-deepspeed",
        "planner_objectives": ["time"], "planner_version": __version__}
    params = [t.params for t in study.trials]
    assert {p["precision"] for p in params if "precision" in p} <= {"fp16", "bf16", "fp8", "fp32"}
    assert {p["recompute"] for p in params if "recompute" in p} <= {"none", "selective", "full"}
    assert {p["offload_optimizer"] for p in params if "offload_optimizer" in p} <= {"none", "cpu", "nvme"}
    # on/off knobs are stored as true/false in every trial (flash attention is fixed on H100: not suggested)
    for key in ("sequence_parallel", "tp_comm_overlap"):
        assert all(isinstance(p.get(key), bool) for p in params), key
    assert all(isinstance(p["tp"], int) for p in params if "tp" in p)


def test_readable_params_convert_back_to_the_same_codes():
    from search_spaces.optuna_space import SUGGESTED, from_param, params_to_values, to_param
    from planner.specs import load_cluster, load_model
    from search_spaces.space import SearchRequest, build_space

    req = SearchRequest(num_gpus=8, global_batch=64, global_batch_tokens=None, seq_lens=(2048,))
    space = build_space(load_model("gpt-1.7b"), load_cluster("H100-SXM", num_gpus=8), req)
    for name in SUGGESTED:
        for code in space.domain(name):
            assert from_param(name, to_param(name, code)) == int(code), name
    first = {k: space.domain(k)[-1] for k in SUGGESTED}
    values = params_to_values({k: to_param(k, v) for k, v in first.items()}, space)
    assert all(values[k] == int(first[k]) for k in SUGGESTED)


def test_a_study_stored_by_an_older_planner_is_refused_in_one_line(tmp_path):
    """Older planners stored knobs as integer codes; such a study gets a clear one-line error instead
    of a crash (Optuna refuses to mix the two encodings in one parameter)."""
    import optuna

    new_url, old_url = f"sqlite:///{tmp_path / 'new.db'}", f"sqlite:///{tmp_path / 'old.db'}"
    args = (*SMALL, "--method", "optuna", "--trials", "20", "--quiet", "--study-name", "lead")
    _plan(*args, "--storage", new_url)
    made = optuna.load_study(study_name="lead", storage=new_url)
    old = optuna.create_study(study_name="lead", storage=old_url, directions=["minimize"])
    old.set_user_attr("planner_objectives", ["time"])
    old.set_user_attr("planner_fingerprint", made.user_attrs["planner_fingerprint"])   # same inputs
    old.enqueue_trial({"zero": 1, "recompute": 0})                                       # integer codes
    r = CliRunner().invoke(main, ["plan", *args, "--storage", old_url])
    assert r.exit_code == 2
    assert r.stderr.strip().splitlines() == [
        "error: study 'lead' was made by an older planner that stored knobs as integer codes; give another "
        "--study-name (or --storage) to start a new study"]


def test_offload_report_splits_host_memory_and_nvme():
    """Optimizer state on NVMe and activation checkpoints in host memory: each is reported where it
    lives (the checkpoints were once counted as NVMe with the rest)."""
    from planner.api import estimate

    case = {"model": "llama2-13b",
            "cluster": {"gpu": "A100-40GB", "num_gpus": 8, "gpus_per_node": 8, "nvme": "8 TiB",
                        "nvme_bandwidth": "6 GB/s"},
            "parallel": {"tp": 1, "pp": 1, "dp": 8, "zero_stage": 3, "offload_optimizer": "nvme",
                         "recompute": "full", "global_batch": 64}}
    nvme_only = estimate(case).to_dict()["offload_per_node"]
    both = estimate({**case, "parallel": {**case["parallel"], "offload_activations": "cpu"}}).to_dict()["offload_per_node"]
    assert nvme_only["host_bytes_per_node"] == 0.0 and nvme_only["nvme_bytes_per_node"] > 0
    assert both["nvme_bytes_per_node"] == nvme_only["nvme_bytes_per_node"]
    assert both["host_bytes_per_node"] > 0
