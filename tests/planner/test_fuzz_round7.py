"""Inputs fuzzing round 7 (2026-11-24) found getting through: each test failed before its fix (a
traceback, a silent misreading, or a Ctrl-C that killed the process without a word)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from planner.cli import main

ROOT = Path(__file__).resolve().parents[2]


def run(*argv):
    return CliRunner().invoke(main, [str(a) for a in argv])


def one_error(r, fragment):
    assert r.exit_code == 2, (r.exit_code, r.output)
    assert "Traceback" not in r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and fragment in lines[0], r.stderr


def test_estimate_of_an_alibi_model_under_megatron_deepspeed_warns_instead_of_crashing(tmp_path):
    """The framework rule on ALiBi names no knob; the fix hint indexed its first knob (IndexError)."""
    case = tmp_path / "alibi.yaml"
    case.write_text("model: {name: t, num_layers: 4, hidden_size: 512, num_attention_heads: 8, vocab_size: 32000,"
                    " seq_length: 1024, position: alibi}\ncluster: {gpu: H100-SXM, num_gpus: 8}\nparallel: {tp: 2}\n")
    r = run("estimate", case)
    assert r.exit_code == 0, r.output
    assert "mds-position-embeddings" in r.stdout and "ALiBi" in r.stdout


@pytest.mark.parametrize("key,value", [("defaults_used", -1), ("defaults_used", True), ("warnings", 5)])
def test_explain_of_a_plan_whose_lists_were_edited_is_one_line(tmp_path, key, value):
    out = tmp_path / "job"
    assert run("plan", "--model", "gpt-1.7b", "--cluster", "H100-SXM", "--gpus", "8", "--global-batch", "64",
               "--quiet", "--out", out).exit_code == 0
    data = json.loads((out / "plan.json").read_text())
    data[key] = value
    edited = tmp_path / "p.json"
    edited.write_text(json.dumps(data))
    one_error(run("explain", edited), f"{key} must be a list")


LINUX_PROC = pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc/self/status (Linux)")


PLAN_ONCE = "planner.plan('gpt-1.7b', 'H100-SXM', gpus=8, global_batch=64, top_k=1)"


def sigint_caught_after(statements: str) -> bool:
    """Whether Python still catches SIGINT (the SigCgt mask of /proc/self/status) after `statements`
    ran in a fresh interpreter."""
    code = (f"import signal, threading, planner\n{statements}\n"
            "caught = [l for l in open('/proc/self/status') if l.startswith('SigCgt')][0].split()[1]\n"
            "print(int(caught, 16) >> (signal.SIGINT - 1) & 1)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip() == "1"


@LINUX_PROC
def test_python_still_catches_ctrl_c_after_the_layout_solver():
    """CP-SAT put back the OS default SIGINT handler after a solve, so a Ctrl-C during lattice scoring
    or the Optuna study killed the process silently (exit 130, no message, no clean-up)."""
    assert sigint_caught_after(PLAN_ONCE)


@pytest.mark.parametrize("where,text,fragment", [
    ("model", "name: tiny\nnum_layers: 010\nhidden_size: 512\nnum_attention_heads: 8\nvocab_size: 32000\n"
              "seq_length: 1024\n", "num_layers must be a positive integer, got '010'; write 10 without the leading zero"),
    ("case", "model: llama2-7b\ncluster: {gpu: H100-SXM, num_gpus: 016}\nparallel: {tp: 2}\n",
     "num_gpus must be a whole number, got '016'; write 16"),
    ("case", "model: llama2-7b\ncluster: {gpu: H100-SXM, num_gpus: 16}\nparallel: {tp: 02}\n",
     "parallel.tp must be a whole number, got '02'; write 2"),
    ("model", "name: tiny\nnum_layers: 0b100\nhidden_size: 512\nnum_attention_heads: 8\nvocab_size: 32000\n"
              "seq_length: 1024\n", "num_layers must be a positive integer, got '0b100'"),
])
def test_yaml_11_octal_and_binary_integers_are_not_read_as_other_numbers(tmp_path, where, text, fragment):
    """YAML 1.1 read num_layers: 010 as 8 and seq_length: 01024 as 532, and planned them silently."""
    path = tmp_path / "f.yaml"
    path.write_text(text)
    if where == "model":
        r = run("plan", "--model", path, "--cluster", "H100-SXM", "--gpus", "8", "--global-batch", "32",
                "--out", tmp_path / "job")
        assert not (tmp_path / "job").exists()
    else:
        r = run("estimate", path)
    one_error(r, fragment)


def test_a_name_with_a_leading_zero_stays_its_text(tmp_path):
    from costmodels.catalog import read_yaml_data
    path = tmp_path / "m.yaml"
    path.write_text("name: 0100\nnote: 12:30\n")
    assert read_yaml_data(path, "model") == {"name": "0100", "note": "12:30"}


@pytest.mark.parametrize("config,fragment", [
    ({"architectures": ["BloomForCausalLM"], "model_type": "bloom", "n_layer": 4, "hidden_size": 512, "n_head": 8,
      "vocab_size": 32000}, "model_type 'bloom' is not a family the planner reads (ALiBi positions"),
    ({"model_type": "gpt_bigcode", "n_embd": 512, "n_head": 8, "n_layer": 4, "multi_query": True, "vocab_size": 32000},
     "(multi-query attention would be misread)"),
    ({"model_type": "banana", "hidden_size": 512, "num_attention_heads": 8, "num_hidden_layers": 4,
      "vocab_size": 32000}, "model_type 'banana' is not a family the planner reads"),
    ({"architectures": ["FooForCausalLM"], "hidden_size": 512, "num_attention_heads": 8, "num_hidden_layers": 4,
      "vocab_size": 32000}, "architectures ['FooForCausalLM'] is not a model class the planner reads"),
])
def test_config_json_of_a_family_the_reader_does_not_interpret_is_refused(tmp_path, config, fragment):
    """BLOOM was planned as a RoPE model (--use-rotary-position-embeddings in launch.sh), StarCoder with
    16 key-value heads instead of 1, an unknown model_type without a word."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    r = run("plan", "--model", path, "--cluster", "H100-SXM", "--gpus", "8", "--global-batch", "32",
            "--out", tmp_path / "job")
    one_error(r, fragment)
    assert not (tmp_path / "job").exists()


def test_config_json_families_are_read_with_their_own_defaults():
    from costmodels import catalog
    base = {"hidden_size": 512, "num_attention_heads": 8, "num_hidden_layers": 4, "vocab_size": 32000,
            "hidden_act": "silu", "intermediate_size": 1376}
    by_class = catalog.model_from_dict({**base, "architectures": ["LlamaForCausalLM"], "rms_norm_eps": 1e-5})
    assert by_class.norm == "rmsnorm" and by_class.position == "rope" and not by_class.tied_embeddings
    gemma = catalog.model_from_dict({**base, "model_type": "gemma", "hidden_act": "gelu_pytorch_tanh"})
    assert gemma.tied_embeddings and gemma.gated_mlp          # GemmaConfig ties unless told otherwise
    assert not catalog.model_from_dict({**base, "model_type": "gemma", "tie_word_embeddings": False}).tied_embeddings


@pytest.mark.parametrize("edit,fragment", [
    (("  gemm_efficiency:", "  gemm_eficiency:"), "fitted: unknown key 'gemm_eficiency'; did you mean gemm_efficiency?"),
    (("  network_bandwidth:", "  network_bandwith:"), "system: unknown key 'network_bandwith'"),
    (("  tf32:", "  tf33:"), "peak: unknown key 'tf33'"),
    (("num_sms:", "num_sm:"), "unknown key 'num_sm'; did you mean num_sms?"),
])
def test_a_misspelt_key_in_a_gpu_file_is_refused(tmp_path, edit, fragment):
    """A GPU file's misspelt key left its default silently (gemm_eficiency: 0.2 planned at 0.639)."""
    text = (ROOT / "costmodels" / "catalog" / "gpus" / "h100-sxm.yaml").read_text()
    text = "\n".join(line for line in text.splitlines() if not line.startswith("aliases")).replace(
        "name: H100-SXM", "name: MyGPU")
    assert edit[0] in text
    path = tmp_path / "gpu.yaml"
    path.write_text(text.replace(edit[0], edit[1], 1))
    r = run("plan", "--model", "gpt-1.7b", "--cluster", path, "--gpus", "16", "--global-batch", "64",
            "--out", tmp_path / "job")
    one_error(r, fragment)


@pytest.mark.parametrize("extra,fragment", [
    ("density: 0.01", "parallel.density 0.01 does not match sparsity dense (density 1)"),
    ("sparsity: '2:4', density: 1.0", "parallel.density 1.0 does not match sparsity 2:4 (density 0.5)"),
])
def test_a_density_that_sparsity_contradicts_is_refused(tmp_path, extra, fragment):
    """parallel.density was checked and then ignored: density 0.01 gave the dense step time."""
    path = tmp_path / "case.yaml"
    path.write_text("model: llama2-7b\ncluster: {gpu: H100-SXM, num_gpus: 8}\n"
                    f"parallel: {{micro_batch: 1, global_batch: 64, tp: 2, {extra}}}\n")
    one_error(run("estimate", path), fragment)
    path.write_text(path.read_text().replace("density: 0.01", "density: 1").replace("density: 1.0", "density: 0.5"))
    assert run("estimate", path).exit_code == 0          # the density sparsity gives is accepted


def test_a_plan_for_a_framework_without_a_job_emitter_says_no_job_was_written(tmp_path):
    """--framework megatron-lm --out DIR printed 'wrote DIR' with no launch.sh in it, and took --launcher."""
    args = ["plan", "--model", "gpt-1.7b", "--cluster", "H100-SXM", "--gpus", "8", "--global-batch", "64",
            "--framework", "megatron-lm", "--quiet"]
    one_error(run(*args, "--launcher", "torchrun", "--out", tmp_path / "a"), "--framework megatron-lm writes no job")
    assert not (tmp_path / "a").exists()
    r = run(*args, "--out", tmp_path / "b")
    assert r.exit_code == 0, r.output
    assert "has no job emitter" in r.stderr and "no launch.sh" in r.stderr
    assert not (tmp_path / "b" / "launch.sh").exists() and (tmp_path / "b" / "plan.json").exists()
    r = run(*args[:-3], "--launcher", "torchrun", "--quiet", "--out", tmp_path / "c")     # megatron-deepspeed
    assert r.exit_code == 0 and (tmp_path / "c" / "launch.sh").exists() and "no job emitter" not in r.stderr


def test_files_named_in_a_case_file_are_relative_to_it_wherever_the_command_runs(tmp_path, monkeypatch):
    """model: m.yaml in sub/case.yaml used ./m.yaml when sub/m.yaml was missing (another model from
    another folder), and a GPU file beside the case was refused as an unknown GPU from elsewhere."""
    tiny = "name: {}\nnum_layers: 4\nhidden_size: 512\nnum_attention_heads: 8\nvocab_size: 32000\nseq_length: 1024\n"
    (tmp_path / "sub").mkdir()
    (tmp_path / "m.yaml").write_text(tiny.format("wrong-one"))
    (tmp_path / "sub" / "case.yaml").write_text("model: m.yaml\ncluster: {gpu: H100-SXM, num_gpus: 8}\nparallel: {tp: 2}\n")
    monkeypatch.chdir(tmp_path)
    one_error(run("estimate", "sub/case.yaml"), "model file 'sub/m.yaml' does not exist")
    (tmp_path / "sub" / "m.yaml").write_text(tiny.format("right-one"))
    gpu = (ROOT / "costmodels" / "catalog" / "gpus" / "h100-sxm.yaml").read_text().replace("name: H100-SXM", "name: MyG")
    (tmp_path / "sub" / "g.yaml").write_text("\n".join(l for l in gpu.splitlines() if not l.startswith("aliases")))
    (tmp_path / "sub" / "case.yaml").write_text("model: m.yaml\ncluster: {gpu: g.yaml, num_gpus: 8}\nparallel: {tp: 2}\n")
    r = run("estimate", "sub/case.yaml")
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith("right-one on 8 x MyG")


@pytest.mark.parametrize("url,fragment", [
    ("file:///x", "'file' is not a database Optuna keeps studies in; give sqlite:///FILE.db"),
    ("redis://host/0", "'redis' is not a database Optuna keeps studies in"),
    ("SQLITE:///up.db", "the scheme 'SQLITE' must be written in lower case (sqlite://...)"),
    ("postgres://u@h/db", "write the scheme as postgresql://"),
])
def test_a_storage_url_optuna_cannot_use_says_which_would_do(tmp_path, url, fragment):
    """These ended in SQLAlchemy's "Can't load plugin: sqlalchemy.dialects:file"."""
    r = run("plan", "--model", "gpt-1.7b", "--cluster", "H100-SXM", "--gpus", "8", "--global-batch", "64",
            "--method", "optuna", "--trials", "3", "--storage", url, "--out", tmp_path / "job")
    one_error(r, fragment)
    assert not (tmp_path / "job").exists()


def test_round7_messages_say_what_to_fix(tmp_path):
    """Minor findings of round 7: an empty path, a folder of logs, a byte-order mark, a NUL byte, an
    empty --data, the default study file beside --out blamed on --storage, an upper-case .JSON."""
    one_error(run("estimate", ""), "the case path is empty; give a file")
    one_error(run("calibrate", "", "--out", tmp_path / "c.yaml"), "an input path is empty")
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "1.log").write_text("x\n")
    one_error(run("calibrate", tmp_path / "logs", "--out", tmp_path / "c.yaml"), "give the log files in it (DIR/*.log)")
    one_error(run("validate", "--data", ""), "--data is empty")
    nul = tmp_path / "nul.yaml"
    nul.write_bytes(b"name: tiny\nnum_layers: 4\x00\n")
    one_error(run("plan", "--model", nul, "--cluster", "H100-SXM", "--gpus", "8", "--global-batch", "32"),
              "holds a NUL byte (line 2)")
    bom = tmp_path / "config.json"
    bom.write_bytes(b"\xef\xbb\xbf" + json.dumps({"model_type": "llama", "hidden_size": 512, "num_attention_heads": 8,
                                                   "num_hidden_layers": 4, "vocab_size": 32000,
                                                   "intermediate_size": 1376}).encode())
    assert run("plan", "--model", bom, "--cluster", "H100-SXM", "--gpus", "8", "--global-batch", "32",
               "--quiet").exit_code == 0
    (tmp_path / "job.optuna.db").write_text("not a database\n")
    one_error(run("plan", "--model", "gpt-1.7b", "--cluster", "H100-SXM", "--gpus", "8", "--global-batch", "64",
                  "--method", "optuna", "--trials", "3", "--out", tmp_path / "job"),
              "the study file --out")
    out = tmp_path / "j"
    assert run("plan", "--model", "gpt-1.7b", "--cluster", "H100-SXM", "--gpus", "8", "--global-batch", "64",
               "--quiet", "--out", out).exit_code == 0
    upper = tmp_path / "PLAN.JSON"
    upper.write_text((out / "plan.json").read_text())
    r = run("estimate", upper)
    assert r.exit_code == 0 and r.stdout.startswith("gpt-1.7b on 8 x H100-SXM"), r.output


def test_a_full_width_digit_is_no_probe_rank():
    from planner.calibrate import _rank_of
    from costmodels.errors import SpecError
    data = {"runner_ups": [{}, {}]}
    assert _rank_of(Path("3.log"), data, "plan.json") == 3
    with pytest.raises(SpecError, match="name it <rank>.log"):
        _rank_of(Path("\uff13.log"), data, "plan.json")


def test_time_to_train_without_tokens_warns():
    import planner
    result = planner.plan("gpt-1.7b", "H100-SXM", gpus=8, global_batch=64, objective="time-to-train", top_k=1)
    assert any(w.kind == "time-to-train" and "--tokens" in w.suggestion for w in result.warnings)
    result = planner.plan("gpt-1.7b", "H100-SXM", gpus=8, global_batch=64, objective="time-to-train", top_k=1,
                          total_tokens=1e12)
    assert not any(w.kind == "time-to-train" for w in result.warnings)


@LINUX_PROC
def test_a_plan_made_off_the_main_thread_leaves_ctrl_c_to_python():
    """Off the main thread no handler can be put back after a solve: CP-SAT must not take SIGINT there
    (the process then died silently on Ctrl-C; review of round 7)."""
    assert sigint_caught_after(f"t = threading.Thread(target=lambda: {PLAN_ONCE})\nt.start(); t.join()")


def test_a_plan_made_from_a_config_json_reads_back(tmp_path):
    """plan.json keeps the model in the planner's own keys (no model_type): explain and estimate of it
    were refused as 'architectures None is not a model class' (review of round 7)."""
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "qwen2", "hidden_size": 512, "num_attention_heads": 8,
                               "num_hidden_layers": 4, "vocab_size": 32000, "hidden_act": "silu",
                               "intermediate_size": 1376}))
    out = tmp_path / "job"
    assert run("plan", "--model", cfg, "--cluster", "H100-SXM", "--gpus", "8", "--global-batch", "32", "--quiet",
               "--out", out).exit_code == 0
    for command in ("explain", "estimate"):
        r = run(command, out / "plan.json")
        assert r.exit_code == 0, r.output


def test_round7_review_number_forms(tmp_path):
    """00 is 0 in every YAML reading; a negative leading-zero number keeps its sign in the hint;
    unstructured sparsity takes a density of its own (it is planned as dense compute)."""
    from costmodels.catalog import read_yaml_data
    from costmodels.errors import leading_zero_hint
    path = tmp_path / "f.yaml"
    path.write_text("a: 00\nb: 010\n")
    assert read_yaml_data(path, "case") == {"a": 0, "b": "010"}
    assert leading_zero_hint("-010").startswith("; write -10 ")
    case = tmp_path / "case.yaml"
    case.write_text("model: llama2-7b\ncluster: {gpu: H100-SXM, num_gpus: 8}\n"
                    "parallel: {tp: 2, micro_batch: 1, global_batch: 64, sparsity: unstructured, density: 0.3}\n")
    assert run("estimate", case).exit_code == 0


def test_explain_refuses_a_plan_edited_to_break_its_frameworks_rules(tmp_path):
    """An ALiBi model written into a Megatron-DeepSpeed plan.json was rendered as if planned (only the
    structural rules were checked)."""
    out = tmp_path / "job"
    assert run("plan", "--model", "gpt-1.7b", "--cluster", "H100-SXM", "--gpus", "8", "--global-batch", "64",
               "--quiet", "--out", out).exit_code == 0
    data = json.loads((out / "plan.json").read_text())
    data["inputs"]["model"]["position"] = "alibi"
    edited = tmp_path / "p.json"
    edited.write_text(json.dumps(data))
    one_error(run("explain", edited), "breaks the megatron-deepspeed rule 'mds-position-embeddings'")
    assert run("explain", out / "plan.json").exit_code == 0


def test_a_malformed_vtrain_row_is_named(tmp_path, validation_dir):
    """A short row said 'ValueError: not enough values to unpack', a row with tp x dp x pp above its GPUs
    did not say which row."""
    import shutil
    data = tmp_path / "data"
    shutil.copytree(validation_dir, data)
    csv = data / "vtrain" / "ground_truth_single.csv"
    lines = csv.read_text().splitlines()
    short = list(lines)
    short[5] = ",".join(short[5].split(",")[:-1])
    csv.write_text("\n".join(short) + "\n")
    one_error(run("validate", "--data", data), "ground_truth_single.csv, row 5 (vtrain-0004): 10 columns where the header has 11")
    wide = list(lines)
    cells = wide[5].split(",")
    cells[7] = "3"                                     # tensor parallelism 3 on the row's GPUs
    wide[5] = ",".join(cells)
    csv.write_text("\n".join(wide) + "\n")
    one_error(run("validate", "--data", data), "validation run vtrain-0004: parallel: tp*pp*dp*cp")
