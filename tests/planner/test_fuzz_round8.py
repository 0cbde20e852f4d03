"""Inputs fuzzing round 8 (2026-11-24) found getting through: each test failed before its fix."""
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from planner.cli import main
from tests.planner.mds_log import mds_log

ROOT = Path(__file__).resolve().parents[2]


def run(*argv):
    return CliRunner().invoke(main, [str(a) for a in argv])


def one_error(r, fragment):
    assert r.exit_code == 2, (r.exit_code, r.output)
    assert r.exception is None or isinstance(r.exception, SystemExit)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and fragment in lines[0], r.stderr


def gpu_file(tmp_path, name="MyB200", **replace):
    """The catalog's B200 as a file of one's own (no aliases, another name)."""
    text = (ROOT / "costmodels" / "catalog" / "gpus" / "b200.yaml").read_text()
    rows = [row for row in text.splitlines() if not row.startswith("aliases")]
    rows = [f"name: {name}" if row.startswith("name:") else row for row in rows]
    for key, value in replace.items():
        rows = [f"{key}: {value}" if row.startswith(key + ":") else row for row in rows]
    path = tmp_path / f"{name}.yaml"
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.mark.parametrize("value,fragment", [
    ("1e-300 FLOP/s", "is below 100 GFLOP/s"),
    ("1 FLOP/s", "is below 100 GFLOP/s"),
    ("0.001 TFLOP/s", "is below 100 GFLOP/s"),
    ("'１ TFLOP/s'", "cannot read '１ TFLOP/s' as a quantity"),
])
def test_flash_attention_2_peak_below_any_gpu_is_refused(tmp_path, value, fragment):
    """A tiny cap gave NaN step times (and NaN in --json) with exit 0, or 5e9-day steps; full-width
    digits were read as ASCII ones."""
    gpu = gpu_file(tmp_path, flash_attention_2_peak=value)
    case = tmp_path / "case.yaml"
    case.write_text(f"model: llama2-7b\ncluster: {{gpu: {gpu}, num_gpus: 8}}\n"
                    "parallel: {tp: 1, pp: 1, micro_batch: 1, global_batch: 64, zero_stage: 1}\n")
    one_error(run("estimate", case), fragment)
    one_error(run("plan", "--model", "llama2-7b", "--cluster", gpu, "--gpus", "8", "--global-batch", "64",
                  "--out", tmp_path / "job"), fragment)
    assert not (tmp_path / "job").exists()


def test_a_plan_on_a_gpu_file_of_ones_own_reads_back(tmp_path):
    """plan.json named the GPU only: explain, estimate and calibrate of such a plan said 'unknown GPU
    MyB200', with no way to give the file. It now carries the GPU's spec (never the file's path)."""
    gpu = gpu_file(tmp_path)
    out = tmp_path / "job"
    assert run("plan", "--model", "gpt-1.7b", "--cluster", gpu, "--gpus", "16", "--global-batch", "64",
               "--probe", "2", "--out", out, "-q").exit_code == 0
    plan = json.loads((out / "plan.json").read_text())
    assert plan["inputs"]["cluster"]["gpu_spec"]["name"] == "MyB200"
    assert str(tmp_path) not in (out / "plan.json").read_text()
    r = run("explain", out)
    assert r.exit_code == 0 and "MyB200" in r.stdout, r.output
    assert "today's model gives" not in r.output
    r = run("estimate", out / "plan.json", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["step_time_s"] == pytest.approx(plan["estimate"]["step_time_s"])
    log = out / "probe" / "1.log"
    layout = plan["layout"]
    log.write_text(mds_log(1.2e3 * plan["estimate"]["step_time_s"], gbs=layout["global_batch"],
                           seq=layout["seq_len"]))
    r = run("calibrate", log, "--out", tmp_path / "calib.yaml")
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("kind,name,preset", [("gpu", "H100-SXM", "H100-SXM"), ("gpu", "h100", "H100-SXM"),
                                             ("framework", "megatron-deepspeed", "megatron-deepspeed")])
def test_a_file_of_ones_own_cannot_take_a_catalog_name(tmp_path, kind, name, preset):
    """A B200 file named H100-SXM was planned, written into plan.json as 'H100-SXM' and then explained
    and estimated as the catalog's H100; a Megatron-Core profile named megatron-deepspeed was labelled
    and calibrated as Megatron-DeepSpeed."""
    if kind == "gpu":
        path = gpu_file(tmp_path, name=name)
        one_error(run("plan", "--model", "gpt-1.7b", "--cluster", path, "--gpus", "16", "--global-batch", "64",
                      "--out", tmp_path / "job"), f"its name '{name}' is the catalog's {preset}")
        case = f"cluster: {{gpu: {path}, num_gpus: 8}}\n"
    else:
        text = (ROOT / "costmodels" / "catalog" / "frameworks" / "megatron-core.yaml").read_text()
        rows = [f"name: {name}" if row.startswith("name:") else row for row in text.splitlines()
                if not row.startswith("aliases")]
        path = tmp_path / "fw.yaml"
        path.write_text("\n".join(rows) + "\n")
        case = f"cluster: {{gpu: H100-SXM, num_gpus: 8}}\ntraining: {{framework: {path}}}\n"
    (tmp_path / "case.yaml").write_text("model: llama2-7b\n" + case + "parallel: {tp: 1, pp: 1, zero_stage: 1}\n")
    one_error(run("estimate", tmp_path / "case.yaml"), f"its name '{name}' is the catalog's {preset}")


def test_a_budget_below_one_token_is_refused(tmp_path):
    """--tokens 1e-300 was planned: '1e-300 tokens: 0.0 us' and --train-iters 1 in launch.sh."""
    one_error(run("plan", "--model", "gpt-1.7b", "--cluster", "H100-SXM", "--gpus", "8", "--global-batch", "64",
                  "--tokens", "1e-300", "--out", tmp_path / "job"), "less than one token")
    assert not (tmp_path / "job").exists()


@pytest.fixture(scope="module")
def probe_plan(tmp_path_factory):
    out = tmp_path_factory.mktemp("r8") / "job"
    assert run("plan", "--model", "gpt-1.7b", "--cluster", "H100-SXM", "--gpus", "16", "--global-batch", "64",
               "--probe", "1", "--out", out, "-q").exit_code == 0
    return out


@pytest.mark.parametrize("edit,fragment", [
    (("global batch size:    64", "global batch size:     0"), "global batch size 0 in the log, 64 in the plan"),
    (("actual seqlen:  2048", "actual seqlen:     0"), "actual seqlen 0 in the log, 2048 in the plan"),
    (("(ms): 250.0", "(ms): ２５０.0"), "not a time in milliseconds"),
])
def test_a_log_with_a_zero_batch_or_foreign_digits_is_refused(probe_plan, tmp_path, edit, fragment):
    """A global batch or sequence length of 0 passed the check against the plan (0 was read as 'not
    printed'), and full-width digits in the time were read as 250 ms."""
    job = tmp_path / "job"
    (job / "probe").mkdir(parents=True)
    (job / "plan.json").write_text((probe_plan / "plan.json").read_text())
    text = mds_log(250.0, gbs=64, seq=2048)
    assert edit[0] in text
    (job / "probe" / "1.log").write_text(text.replace(edit[0], edit[1]))
    one_error(run("calibrate", job / "probe" / "1.log", "--out", tmp_path / "c.yaml"), fragment)
    assert not (tmp_path / "c.yaml").exists()


@pytest.mark.parametrize("where,key,value,fragment", [
    ("layout", "zero_stage", None, "layout.zero_stage is null"),
    ("runner_up", "zero_stage", -1, "runner_ups[0].layout: layout: zero stage must be 0, 1, 2 or 3, got -1"),
    ("schedule", "lr", "x", "schedule.lr 'x' is not a number"),
    ("schedule", "min_lr", 1e308, "schedule.min_lr 1e+308 is not a learning rate"),
    ("top", "launcher", "x", "launcher 'x' is not one of deepspeed, torchrun"),
    ("breakdown", "zero_comm", True, "estimate.time_breakdown_s must map parts of the step to seconds"),
    ("top", "megatron_args", {}, "megatron_args must be the list of pretrain_gpt.py's arguments"),
    ("top", "probe", 5, "probe must be a mapping"),
])
def test_explain_refuses_edited_fields_it_renders(probe_plan, tmp_path, where, key, value, fragment):
    """explain rendered what an edited plan.json held outside the checked case: 'ZeRO-None', 'ZeRO--1',
    a learning rate 'x', a launcher 'x', a breakdown row of `true` seconds, no 'Running it' section."""
    data = json.loads((probe_plan / "plan.json").read_text())
    assert data["runner_ups"]
    target = {"layout": data["layout"], "runner_up": data["runner_ups"][0]["layout"], "top": data,
              "schedule": data["schedule"], "breakdown": data["estimate"]["time_breakdown_s"]}[where]
    assert key in target
    target[key] = value
    (tmp_path / "plan.json").write_text(json.dumps(data))
    for extra in ([], ["--json"]):
        one_error(run("explain", tmp_path, *extra), fragment)


# ---- a review of the fixes above (2026-11-24) ------------------------------------------------------

def _estimate_json(*argv):
    r = run("estimate", *argv, "--json")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_a_calibrated_plan_on_a_gpu_file_records_the_gpu_as_given(tmp_path):
    """plan.json kept the GPU with the calibration already applied, so `estimate plan.json
    --calibration` applied it twice (+40%) and a new calibration started from scaled constants."""
    gpu = gpu_file(tmp_path, name="MyH100x")
    first = tmp_path / "first"
    assert run("plan", "--model", "gpt-1.7b", "--cluster", gpu, "--gpus", "16", "--global-batch", "64",
               "--probe", "1", "--out", first, "-q").exit_code == 0
    plan = json.loads((first / "plan.json").read_text())
    layout = plan["layout"]
    (first / "probe" / "1.log").write_text(mds_log(1.5e3 * plan["estimate"]["step_time_s"],
                                                   gbs=layout["global_batch"], seq=layout["seq_len"]))
    calib = tmp_path / "calib.yaml"
    assert run("calibrate", first / "probe" / "1.log", "--out", calib).exit_code == 0
    job = tmp_path / "job"
    assert run("plan", "--model", "gpt-1.7b", "--cluster", gpu, "--gpus", "16", "--global-batch", "64",
               "--calibration", calib, "--out", job, "-q").exit_code == 0
    data = json.loads((job / "plan.json").read_text())
    stored = json.loads((first / "plan.json").read_text())["inputs"]["cluster"]["gpu_spec"]
    assert data["inputs"]["cluster"]["gpu_spec"] == stored            # the file's constants, not scaled
    again = _estimate_json(job / "plan.json", "--calibration", calib)
    assert again["step_time_s"] == pytest.approx(data["estimate"]["step_time_s"])


def test_a_gpu_mapping_under_a_catalog_name_is_kept_in_the_plan(tmp_path):
    """A GPU mapping (Python API, or inline in a cluster file) under the name H100-SXM with other peaks
    was written as just 'H100-SXM' and re-estimated on the catalog's H100 (-46%)."""
    import yaml

    import planner
    mapping = yaml.safe_load((ROOT / "costmodels" / "catalog" / "gpus" / "h100-sxm.yaml").read_text())
    mapping["peak"] = {**mapping["peak"], "bf16": "500 TFLOP/s", "fp16": "500 TFLOP/s"}
    out = planner.plan("llama2-7b", {"gpu": mapping, "num_gpus": 8}, global_batch=64).write(tmp_path / "job")
    data = json.loads((Path(out) / "plan.json").read_text())
    assert data["inputs"]["cluster"]["gpu_spec"]["peak"]["bf16"] == "500000000000000.0 FLOP/s"
    assert _estimate_json(Path(out) / "plan.json")["step_time_s"] == pytest.approx(data["estimate"]["step_time_s"])


def test_a_cluster_files_link_constants_are_kept_in_the_plan(tmp_path):
    """A cluster file's nvlink / network latencies and efficiencies were not in plan.json: the plan
    was re-estimated 20% faster with the catalog's, and explain blamed an edit or a refit."""
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("gpu: H100-SXM\nnum_gpus: 32\nnvlink_latency: 9.9 us\ncollective_latency: 88 us\n"
                       "network_latency: 31 us\nnvlink_efficiency: 0.55\nnetwork_efficiency: 0.41\n")
    job = tmp_path / "job"
    assert run("plan", "--model", "llama2-13b", "--cluster", cluster, "--global-batch", "256", "--out", job,
               "-q").exit_code == 0
    data = json.loads((job / "plan.json").read_text())
    assert data["inputs"]["cluster"]["network_efficiency"] == 0.41 and "gpu_spec" not in data["inputs"]["cluster"]
    assert _estimate_json(job / "plan.json")["step_time_s"] == pytest.approx(data["estimate"]["step_time_s"])
    r = run("explain", job)
    assert r.exit_code == 0 and "today's model gives" not in r.output, r.output


def test_the_catalogs_own_files_given_by_path_are_the_presets(tmp_path):
    """Refusing a file named as a preset also refused the catalog's own file given by its path."""
    gpu = ROOT / "costmodels" / "catalog" / "gpus" / "h100-sxm.yaml"
    assert run("plan", "--model", "gpt-1.7b", "--cluster", gpu, "--gpus", "8", "--global-batch", "64",
               "--out", tmp_path / "job", "-q").exit_code == 0
    fw = ROOT / "costmodels" / "catalog" / "frameworks" / "megatron-core.yaml"
    (tmp_path / "case.yaml").write_text(f"model: llama2-7b\ncluster: {{gpu: H100-SXM, num_gpus: 8}}\n"
                                        f"training: {{framework: {fw}}}\nparallel: {{tp: 1, pp: 1}}\n")
    assert run("estimate", tmp_path / "case.yaml").exit_code == 0


def test_a_gpu_name_with_an_invisible_character_is_refused(tmp_path):
    """plan.json is read back with non-printable characters as '?', so a calibration made from such a
    plan's logs never matched the GPU file again."""
    gpu = gpu_file(tmp_path, name='"Edge zw\\u200bspace"')
    one_error(run("plan", "--model", "gpt-1.7b", "--cluster", gpu, "--gpus", "8", "--global-batch", "64",
                  "--out", tmp_path / "job"), "has a non-printable character")


def test_a_plain_number_in_other_digits_is_refused(tmp_path):
    """price_per_gpu_hour: ２e０ was read as 2.0."""
    (tmp_path / "cluster.yaml").write_text("gpu: H100-SXM\nnum_gpus: 8\nprice_per_gpu_hour: '２e０'\n")
    one_error(run("plan", "--model", "gpt-1.7b", "--cluster", tmp_path / "cluster.yaml", "--global-batch", "64",
                  "--out", tmp_path / "job"), "price_per_gpu_hour")
