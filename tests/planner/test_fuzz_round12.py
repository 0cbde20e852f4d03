"""Fuzzing round 12 (2026-11-24): a Hugging Face config's local `_name_or_path` reached every emitted
file; an edited plan.json's ties.separate_by gave explain a traceback; link efficiencies and CPU-Adam
rates just above zero printed NaN as JSON; NVMe without a bandwidth planned a job of 229,476 days per
step; a plan of --top 1000 was too big for the planner's own readers; calibrate accepted a log of
another ZeRO stage, a log whose lines a launcher prefixed, a runs file's tp_comm_overlap "false" as
true and a plan.json explain refuses, and wrote `--out new/` as a file. Each test failed before."""
import json
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from planner.cli import main

sys.path.insert(0, str(Path(__file__).parent))
from mds_log import mds_log  # noqa: E402
from test_fuzz_round11 import one_error, run  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_a_local_name_or_path_never_reaches_the_emitted_files(tmp_path):
    ckpt = tmp_path / "ck2"
    ckpt.mkdir()
    cfg = json.loads((EXAMPLES / "llama3.1-8b-config.json").read_text())
    cfg["_name_or_path"] = "/home/alice/secret-models/llama-8b"
    (ckpt / "config.json").write_text(json.dumps(cfg))
    out = tmp_path / "job"
    r = run("plan", "--model", ckpt, "--cluster", "H100-SXM", "--gpus", "8", "--probe", "1", "--out", out, "-q")
    assert r.exit_code == 0, r.output
    for f in out.rglob("*"):
        if f.is_file() and f.suffix in (".sh", ".json", ".md"):
            assert "/home/alice" not in f.read_text(), f
    assert "llama-8b" in (out / "plan.json").read_text()
    # a hub id stays as written
    cfg["_name_or_path"] = "meta-llama/Llama-3.1-8B"
    (ckpt / "config.json").write_text(json.dumps(cfg))
    from costmodels.catalog import load_model
    assert load_model(str(ckpt)).name == "meta-llama/Llama-3.1-8B"


@pytest.fixture(scope="module")
def plan_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("r12") / "job"
    r = CliRunner().invoke(main, ["plan", "--model", "gpt-1.7b", "--cluster", "H100-SXM", "--gpus", "8",
                                  "--global-batch", "64", "--probe", "2", "--out", str(out), "-q"])
    assert r.exit_code == 0, r.output
    return out


@pytest.mark.parametrize("value", ["x", 3, True, ["a"]])
def test_explain_refuses_an_edited_ties_block_in_one_line(plan_dir, tmp_path, value):
    data = json.loads((plan_dir / "plan.json").read_text())
    data["ties"] = {**(data.get("ties") or {}), "separate_by": value}
    edited = tmp_path / "ties.json"
    edited.write_text(json.dumps(data))
    one_error(run("explain", edited, "--json"), "ties.separate_by")


@pytest.mark.parametrize("key, value, fragment", [
    ("nvlink_efficiency", "5.0e-324", "nvlink_efficiency"),
    ("network_efficiency", "1.0e-200", "network_efficiency"),
    ("cpu_adam_params_per_s", "1.0e-300", "cpu_adam_params_per_s")])
def test_link_rates_near_zero_are_refused_not_printed_as_nan(tmp_path, key, value, fragment):
    case = tmp_path / "a.yaml"
    case.write_text(f"model: gpt-1.7b\ncluster: {{gpu: H100-SXM, num_gpus: 8, {key}: {value}}}\n"
                    "parallel: {tp: 2, pp: 1, dp: 4, micro_batch: 1, global_batch: 64, offload_optimizer: cpu}\n")
    one_error(run("estimate", case, "--json"), fragment)


def test_a_gpu_files_efficiency_near_zero_is_refused(tmp_path):
    case = tmp_path / "g.yaml"
    case.write_text(yaml.safe_dump({"model": "gpt-1.7b", "cluster": {
        "gpu": {"name": "slow", "hbm": "80 GiB", "hbm_bandwidth": "3 TB/s", "peak": {"bf16": "900 TFLOP/s"},
                "fitted": {"gemm_efficiency": 5e-324}}, "num_gpus": 8},
        "parallel": {"tp": 1, "pp": 1, "dp": 8, "micro_batch": 1, "global_batch": 64}}))
    r = run("estimate", case, "--json")
    one_error(r, "gemm_efficiency")


def test_nvme_without_a_bandwidth_is_refused(tmp_path):
    cl = tmp_path / "nv.yaml"
    cl.write_text("gpu: H100-SXM\nnum_gpus: 16\nnvme: 30 TB\nnvme_bandwidth: 0 GB/s\n")
    one_error(run("plan", "--model", "gpt-1.7b", "--cluster", cl, "--offload-optimizer", "nvme",
                  "--out", tmp_path / "v2"), "nvme_bandwidth")
    assert not (tmp_path / "v2").exists()


def test_the_planners_readers_take_a_plan_as_big_as_it_writes(plan_dir, tmp_path):
    """--top 1000 --probe 1000 wrote a 4.3 MiB plan.json that explain, estimate and calibrate refused
    (input files were limited to 4 MiB); here a plan padded with JSON whitespace to 5 MiB."""
    big = tmp_path / "plan.json"
    text = (plan_dir / "plan.json").read_text()
    big.write_text(text[:-2] + " " * (5 * 2**20) + text[-2:])
    r = run("explain", big, "--json")
    assert r.exit_code == 0, r.output


def _log_for(plan_dir, tmp_path, name="1.log", prefix="", **args):
    from planner.calibrate import case_for_log
    case = case_for_log(plan_dir / "probe" / "1.log", plan_dir / "plan.json")
    base = {"num_layers": case.model.num_layers, "hidden_size": case.model.hidden,
            "tensor_model_parallel_size": case.layout.tp, "zero_stage": int(case.layout.zero)}
    text = mds_log(500.0, gbs=case.layout.gbs, seq=case.layout.seq_len, args={**base, **args})
    probe = tmp_path / "probe"
    probe.mkdir(exist_ok=True)
    log = probe / name
    log.write_text("".join(prefix + ln + "\n" for ln in text.splitlines()))
    (tmp_path / "plan.json").write_text((plan_dir / "plan.json").read_text())
    return log


def test_calibrate_refuses_a_log_of_another_zero_stage_or_sequence_parallel_size(plan_dir, tmp_path):
    good = _log_for(plan_dir, tmp_path)
    assert run("calibrate", good).exit_code == 0
    one_error(run("calibrate", _log_for(plan_dir, tmp_path, zero_stage=3)), "zero_stage 3 in the log")
    one_error(run("calibrate", _log_for(plan_dir, tmp_path, ds_sequence_parallel_size=2)),
              "ds_sequence_parallel_size 2 in the log")


@pytest.mark.parametrize("prefix", ["worker-0: ", "[default0]:"])
def test_calibrate_reads_the_arguments_of_a_launcher_prefixed_log(plan_dir, tmp_path, prefix):
    one_error(run("calibrate", _log_for(plan_dir, tmp_path, prefix=prefix, num_layers=32)),
              "num_layers 32 in the log")


def test_calibrate_checks_the_plan_as_explain_does(plan_dir, tmp_path):
    log = _log_for(plan_dir, tmp_path)
    data = json.loads((tmp_path / "plan.json").read_text())
    assert data["layout"]["tp"] == 1
    data["layout"]["sequence_parallel"] = True
    (tmp_path / "plan.json").write_text(json.dumps(data))
    one_error(run("calibrate", log), "sequence")


def test_calibrate_out_with_a_trailing_slash_is_a_directory(plan_dir, tmp_path):
    log = _log_for(plan_dir, tmp_path)
    one_error(run("calibrate", log, "--out", f"{tmp_path}/newdir2/"), "is a directory")
    assert not (tmp_path / "newdir2").exists()


@pytest.mark.parametrize("value", ["false", "no", 1.5])
def test_a_runs_files_tp_comm_overlap_must_be_true_or_false(tmp_path, value):
    rec = {"id": "mine-1", "framework": "megatron-lm",
           "model": {"name": "gpt-1.7b", "num_layers": 24, "hidden_size": 2304, "ffn_hidden_size": 9216,
                     "num_attention_heads": 24, "num_kv_heads": 24, "vocab_size": 50304, "seq_length": 2048,
                     "activation": "gelu"},
           "cluster": {"gpu": "H100-SXM", "num_gpus": 8, "gpus_per_node": 8},
           "parallel": {"tp": 2, "pp": 1, "dp": 4, "cp": 1, "micro_batch": 1, "global_batch": 32,
                        "sequence_parallel": True, "tp_comm_overlap": value},
           "measured": {"step_time_s": 0.5}}
    runs = tmp_path / "runs.yaml"
    runs.write_text(yaml.safe_dump([rec]))
    one_error(run("calibrate", runs, "--json"), "tp_comm_overlap")
