"""Inputs a fuzzing review found getting through (2026-11-24): each one line on stderr, exit code 2, no
traceback, nothing written or replaced. Every case here failed before its fix (a traceback, exit 0 with a
silently coerced value, a password or a device replaced)."""
import json
import os
import stat

import pytest
import yaml
from click.testing import CliRunner

from planner.cli import main
from planner.study import public_storage

MODEL = "model: {name: tiny, num_layers: 4, hidden_size: 512, num_attention_heads: 8, vocab_size: 32000, seq_length: 1024}\n"
CLUSTER = "cluster: {gpu: H100-SXM, num_gpus: 8}\n"


def case(parallel_extra: str) -> str:
    return MODEL + CLUSTER + "parallel: {tp: 2, micro_batch: 2, global_batch: 32, " + parallel_extra + "}\n"


def model_file(hidden: str) -> str:
    return f"name: tiny\nnum_layers: 4\nhidden_size: {hidden}\nnum_attention_heads: 8\nvocab_size: 32000\nseq_length: 1024\n"


def hf(**kw) -> str:
    base = {"model_type": "llama", "hidden_size": 512, "num_attention_heads": 8, "num_hidden_layers": 4,
            "vocab_size": 32000, "intermediate_size": 1376}
    base.update(kw)
    return json.dumps(base)


FILES = {
    "self_list.yaml": "&a [*a]\n",
    "self_map.yaml": "a: &a {b: *a}\n",
    "hidden_null.yaml": model_file("null"),
    "hidden_map.yaml": model_file("{}"),
    "zero_half.yaml": case("zero_stage: 1.5"),
    "zero_ok.yaml": case("zero_stage: 1"),
    "zero_bool.yaml": case("zero_stage: true"),
    "zero_str.yaml": case("zero_stage: '3'"),
    "flash_word.yaml": case("flash_attention: maybe"),
    "flash_list.yaml": case("flash_attention: [1]"),
    "recompute_empty.yaml": case("recompute: ''"),
    "sparsity_sexagesimal.yaml": case("sparsity: 2:4"),
    "precision_zero.yaml": case("precision: 0"),
    "density_bool.yaml": case("density: true"),
    "offload_number.yaml": case("offload_optimizer: 1"),
    "gpu_newline.yaml": MODEL + 'cluster: {gpu: "H100\\nX\\u001b]0;T\\u0007", num_gpus: 8}\nparallel: {tp: 2}\n',
    "name_date.yaml": model_file("512").replace("name: tiny", "name: 2001-12-14"),
    "name_number.yaml": model_file("512").replace("name: tiny", "name: 1.5"),
    "t5.json": hf(model_type="t5", is_encoder_decoder=True),
    "bert.json": hf(model_type="bert"),
    "type_number.json": hf(model_type=5),
    "act.json": hf(hidden_act="foo"),
    "ffn0.json": hf(intermediate_size=0),
    "two_hidden.json": hf(model_type="gpt2", n_embd=768),
    # round 4
    "int_key.yaml": "model: llama2-7b\ncluster: H100-SXM\nparallel: {tp: 2, 1: 2}\n",
    "fast.yaml": "gpu: H100-SXM\nnum_gpus: 16\nnetwork_bandwidth: 400 Eb/s\n",
    "gbs.yaml": "gpu: H100-SXM\nnum_gpus: 16\nnetwork_bandwidth: 400 gb/s\n",
    "two_hidden.yaml": model_file("128").replace("hidden_size: 128", "hidden: 256\nhidden_size: 128"),
    "two_seq.yaml": model_file("128").replace("seq_length: 1024", "seq_length: 128\nmax_seq_len: 64"),
    "no_host.yaml": "gpu: H100-SXM\nnum_gpus: 8\nhost_memory: 0 GB\n",
}

TABLE = [
    ("recursive alias, runs file", ["calibrate", "{d}/self_list.yaml", "--out", "{d}/c.yaml"], "recursive alias"),
    ("recursive alias, case", ["estimate", "{d}/self_map.yaml"], "recursive alias"),
    ("hidden_size null", ["plan", "--model", "{d}/hidden_null.yaml", "--cluster", "H100-SXM", "--gpus", "8"],
     "missing required field 'hidden'"),
    ("hidden_size a mapping", ["plan", "--model", "{d}/hidden_map.yaml", "--cluster", "H100-SXM", "--gpus", "8"],
     "hidden must be a positive integer, got {}"),
    ("a model name YAML reads as a date", ["plan", "--model", "{d}/name_date.yaml", "--cluster", "H100-SXM",
                                           "--gpus", "8"], "write the name in quotes"),
    ("a model name YAML reads as a number", ["plan", "--model", "{d}/name_number.yaml", "--cluster", "H100-SXM",
                                             "--gpus", "8"], "write the name in quotes"),
    ("zero_stage 1.5", ["estimate", "{d}/zero_half.yaml"], "zero_stage must be a whole number, got 1.5"),
    ("zero_stage true", ["estimate", "{d}/zero_bool.yaml"], "zero_stage must be a whole number, got True"),
    ("zero_stage '3'", ["estimate", "{d}/zero_str.yaml"], "zero_stage must be a whole number, got '3'"),
    ("flash_attention maybe", ["estimate", "{d}/flash_word.yaml"], "flash_attention must be true or false"),
    ("flash_attention [1]", ["estimate", "{d}/flash_list.yaml"], "flash_attention must be true or false"),
    ("recompute ''", ["estimate", "{d}/recompute_empty.yaml"], "recompute must be a name"),
    ("precision 0", ["estimate", "{d}/precision_zero.yaml"], "precision must be a name such as 'bf16', got 0"),
    ("density true", ["estimate", "{d}/density_bool.yaml"], "density must be a number"),
    ("offload 1", ["estimate", "{d}/offload_number.yaml"], "offload_optimizer must be a name"),
    ("newline in a value keeps the fix", ["estimate", "{d}/gpu_newline.yaml"],
     "unknown GPU 'H100\\nX\\x1b]0;T\\x07': did you mean"),
    ("encoder-decoder config.json", ["plan", "--model", "{d}/t5.json", "--cluster", "H100-SXM"], "encoder-decoder"),
    ("encoder config.json", ["plan", "--model", "{d}/bert.json", "--cluster", "H100-SXM"], "encoder"),
    ("model_type a number", ["plan", "--model", "{d}/type_number.json", "--cluster", "H100-SXM"],
     "model_type must be a string"),
    ("unknown activation", ["plan", "--model", "{d}/act.json", "--cluster", "H100-SXM"],
     "hidden_act 'foo' is not an activation"),
    ("intermediate_size 0", ["plan", "--model", "{d}/ffn0.json", "--cluster", "H100-SXM"],
     "intermediate_size must be 1 or more"),
    ("hidden_size and n_embd", ["plan", "--model", "{d}/two_hidden.json", "--cluster", "H100-SXM"],
     "hidden_size = 512 and n_embd = 768; keep one"),
    ("another script's digit", ["plan", "--model", "gpt-1.7b", "--cluster", "H100-SXM", "--tp", "\u0662"],
     "--tp takes whole numbers"),
    ("--zero -1 says what is allowed", ["plan", "--model", "gpt-1.7b", "--cluster", "H100-SXM", "--zero", "-1"],
     "--zero must be 0 or more"),
    ("control characters in a study name", ["plan", "--model", "gpt-1.7b", "--cluster", "H100-SXM", "--gpus", "8",
                                            "--method", "optuna", "--study-name", "evil\x1b]0;T\x07\nFAKE"],
     "printable characters"),
    ("SQLite study inside --out", ["plan", "--model", "gpt-1.7b", "--cluster", "H100-SXM", "--gpus", "8",
                                   "--global-batch", "64", "--method", "optuna", "--trials", "5",
                                   "--storage", "sqlite:///{d}/job/study.db", "--out", "{d}/job"],
     "inside --out"),
    ("--probe beyond what --top reports", ["plan", "--model", "gpt-1.7b", "--cluster", "H100-SXM", "--gpus", "8",
                                          "--global-batch", "64", "--probe", "5000", "--out", "{d}/job"],
     "--probe takes a number of candidates from 0 to 1,000, got 5000"),
    ("--tokens 0 is not 'no budget'", ["plan", "--model", "gpt-1.7b", "--cluster", "H100-SXM", "--gpus", "8",
                                        "--tokens", "0"], "leave it out for no budget"),
    ("--tokens 0 on estimate", ["estimate", "{d}/zero_ok.yaml", "--tokens", "0"], "leave it out for no budget"),
    ("a node larger than any host", ["plan", "--model", "gpt-1.7b", "--cluster", "H100-SXM", "--gpus", "8",
                                     "--gpus-per-node", "1000"], "gpus_per_node 1000 is more GPUs than one host"),
    ("SQLite folder missing", ["plan", "--model", "gpt-1.7b", "--cluster", "H100-SXM", "--gpus", "8",
                               "--global-batch", "64", "--method", "optuna", "--trials", "5",
                               "--storage", "sqlite:///{d}/nodir/study.db"], "does not exist; create it"),
    # fuzzing review, round 4 (2026-11-24)
    ("--seq-len beyond 64 bits", ["plan", "--model", "llama2-7b", "--cluster", "H100-SXM", "--gpus", "8",
                                  "--seq-len", "99999999999999999999"], "--seq-len 99999999999999999999 is beyond"),
    ("--seq-len 2^63 - 1 is not an interrupt", ["plan", "--model", "llama2-7b", "--cluster", "H100-SXM", "--gpus",
                                                "8", "--seq-len", "9223372036854775807"], "is beyond any real run"),
    ("--global-batch-tokens 1e300", ["plan", "--model", "llama2-7b", "--cluster", "H100-SXM", "--gpus", "8",
                                     "--global-batch-tokens", "1e300"], "is beyond any real run"),
    ("--global-batch-tokens 1e308-1e308", ["plan", "--model", "llama2-7b", "--cluster", "H100-SXM", "--gpus", "8",
                                           "--global-batch-tokens", "1e308-1e308"], "is beyond any real run"),
    ("degrees whose product overflows", ["plan", "--model", "llama2-7b", "--cluster", "H100-SXM", "--gpus", "8",
                                         "--tp", "10000000", "--pp", "10000000", "--cp", "10000000"],
     "--tp 10000000 is more than the 8 GPUs"),
    ("a number as a parallel key", ["estimate", "{d}/int_key.yaml"], "unknown field(s) 1"),
    ("400 Eb/s", ["plan", "--model", "gpt-1.7b", "--cluster", "{d}/fast.yaml", "--global-batch", "64"],
     "faster than any link"),
    ("a unit's case", ["plan", "--model", "gpt-1.7b", "--cluster", "{d}/gbs.yaml", "--global-batch", "64"],
     "cluster network_bandwidth: '400 gb/s': unknown unit"),
    ("hidden and hidden_size disagree", ["plan", "--model", "{d}/two_hidden.yaml", "--cluster", "H100-SXM",
                                         "--gpus", "8"], "hidden = 256 and hidden_size = 128 name the same field"),
    ("seq_length and max_seq_len disagree", ["plan", "--model", "{d}/two_seq.yaml", "--cluster", "H100-SXM",
                                             "--gpus", "8"], "seq_length = 128 and max_seq_len = 64"),
    ("host memory, not the GPU's", ["plan", "--model", "llama2-7b", "--cluster", "{d}/no_host.yaml",
                                    "--global-batch", "64", "--offload-optimizer", "cpu"],
     "does not fit in the cluster's host memory (0 B per node)"),
]


@pytest.fixture
def d(tmp_path):
    for name, text in FILES.items():
        (tmp_path / name).write_text(text)
    return tmp_path


@pytest.mark.parametrize("name,argv,fragment", TABLE, ids=[t[0] for t in TABLE])
def test_fuzzed_input_is_one_clear_line(name, argv, fragment, d):
    before = sorted(p.name for p in d.iterdir())
    r = CliRunner().invoke(main, [a.replace("{d}", str(d)) for a in argv])
    assert r.exit_code == 2, (r.output, r.stderr, r.exception)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert fragment in lines[0]
    assert "\x1b" not in r.stderr and "Traceback" not in r.output + r.stderr
    assert sorted(p.name for p in d.iterdir()) == before          # nothing written


@pytest.mark.parametrize("url,shown", [
    ("postgresql://fz:pa/ssword@127.0.0.1:54329/st", "postgresql://fz:***@127.0.0.1:54329/st"),
    ("postgresql://fz:p/ss#w?rd@h/st", "postgresql://fz:***@h/st"),
    ("sqlite+pysqlite:////home/alice/db1.sqlite", "sqlite:///db1.sqlite"),
    # an '@' in the query is not the end of credentials (the review found these leaking after the fix)
    ("postgresql://host:5432/db?user=me@corp&password=hunter22",
     "postgresql://host:5432/db?user=me%40corp&password=***"),
    ("postgresql://u:pw@host/db?options=-c%20x@y&password=hunter22",
     "postgresql://u:***@host/db?options=-c+x%40y&password=***"),
])
def test_passwords_with_slashes_and_driver_sqlite_urls_stay_hidden(url, shown):
    assert public_storage(url) == shown


@pytest.mark.parametrize("value", ["false", "off", "no"])
def test_offload_and_sparsity_still_take_yaml_false(tmp_path, value):
    """YAML reads false / off / no as a boolean; the offloads and sparsity had documented aliases for
    them (none / dense), which the type checks first refused."""
    f = tmp_path / "case.yaml"
    f.write_text(case(f"offload_optimizer: {value}, offload_params: {value}, sparsity: {value}"))
    from planner.specs import load_case
    layout = load_case(f).layout
    assert layout.offload_optimizer.value == "none" and layout.offload_params.value == "none"
    assert layout.sparsity.value == "dense"
    assert CliRunner().invoke(main, ["estimate", str(f)]).exit_code == 0


def test_hugging_face_activations_of_real_models_load(tmp_path):
    """relu2 (Nemotron-4), gelu_10 and the rest of transformers' ACT2FN names load; Gemma's MLP is gated
    although its config names gelu_pytorch_tanh."""
    from costmodels import catalog
    for act in ("relu2", "gelu_10", "gelu_accurate", "relu6", "tanh", "xielu", "geglu"):
        m = catalog.model_from_dict(json.loads(hf(model_type="nemotron", hidden_act=act)))
        assert m.gated_mlp == (act == "geglu")
    assert catalog.model_from_dict(json.loads(hf(model_type="gemma", hidden_act="gelu_pytorch_tanh"))).gated_mlp


def test_a_password_with_a_slash_is_not_echoed_by_a_connection_error():
    from planner.study import _first_line
    url = "postgresql://fz:pa/SECRET9@db/st"
    shown = _first_line(Exception(f"password authentication failed for {url}; tried pa/SECRET9"), url)
    assert "SECRET9" not in shown and "postgresql://fz:***@db/st" in shown


def _calib_run(tmp_path):
    """One runs-file record the calibration accepts (a Megatron-Core functional-test row)."""
    runs = tmp_path / "runs.yaml"
    runs.write_text(yaml.safe_dump([{
        "id": "probe-1", "framework": "megatron-core",
        "model": {"name": "m", "num_layers": 32, "hidden_size": 4096, "ffn_hidden_size": 16384,
                  "num_attention_heads": 32, "num_kv_heads": 8, "vocab_size": 131072, "seq_length": 8192,
                  "activation": "gelu"},
        "cluster": {"gpu": "H100-SXM", "num_gpus": 8, "gpus_per_node": 8},
        "parallel": {"tp": 1, "pp": 4, "dp": 2, "cp": 1, "vpp": 8, "micro_batch": 1, "global_batch": 8,
                     "zero_stage": 1, "recompute": "none", "precision": "bf16"},
        "measured": {"step_time_s": 1.151}}]))
    return runs


def test_calibrate_force_replaces_a_calibration_only(tmp_path):
    runs = _calib_run(tmp_path)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    model = tmp_path / "model.yaml"
    model.write_text(model_file("512"))
    calib = tmp_path / "calib.yaml"
    for target, fragment in ((fifo, "not a regular file"), (model, "not a calib.yaml this command wrote")):
        r = CliRunner().invoke(main, ["calibrate", str(runs), "--out", str(target), "--force"])
        assert r.exit_code == 2 and fragment in r.stderr, r.stderr
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and model.read_text() == model_file("512")
    for _ in range(2):                  # written, then replaced with --force
        r = CliRunner().invoke(main, ["calibrate", str(runs), "--out", str(calib), "--force"])
        assert r.exit_code == 0, r.stderr
    assert "constants" in yaml.safe_load(calib.read_text())


@pytest.mark.parametrize("where,value,fragment", [
    ("model", ("vocab_size", 2.5), "model.vocab_size must be a whole number, got 2.5"),
    ("model", ("vocab_size", True), "model.vocab_size must be a whole number, got True"),
    ("parallel", ("precision", 0), "parallel.precision must be a name such as 'bf16', got 0"),
    ("parallel", ("recompute", ""), "parallel.recompute must be a name"),
])
def test_runs_file_values_are_checked_like_a_case(tmp_path, where, value, fragment):
    runs = _calib_run(tmp_path)
    data = yaml.safe_load(runs.read_text())
    data[0][where][value[0]] = value[1]
    runs.write_text(yaml.safe_dump(data))
    r = CliRunner().invoke(main, ["calibrate", str(runs), "--out", str(tmp_path / "c.yaml")])
    assert r.exit_code == 2 and fragment in r.stderr and "record 1" in r.stderr, r.stderr
    assert not (tmp_path / "c.yaml").exists()


def test_explain_shows_no_escape_sequence_from_an_edited_plan(tmp_path):
    out = tmp_path / "job"
    r = CliRunner().invoke(main, ["plan", "--model", "gpt-1.7b", "--cluster", "H100-SXM", "--gpus", "8",
                                  "--global-batch", "64", "--out", str(out), "--quiet"])
    assert r.exit_code == 0, r.stderr
    data = json.loads((out / "plan.json").read_text())
    data["runner_ups"][0]["layout"]["recompute"] = "none\x1b]0;TITLE\x07"
    data["defaults_used"] = ["\x1b[2J cleared"]
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(data))
    r = CliRunner().invoke(main, ["explain", str(edited)])
    assert "\x1b" not in r.output + r.stderr and "\x07" not in r.output


def test_validate_names_the_field_of_a_malformed_run(tmp_path, validation_dir):
    import shutil
    data = tmp_path / "v"
    shutil.copytree(validation_dir, data)
    runs = yaml.safe_load((data / "published_dev.yaml").read_text())
    for mutate, fragment in ((lambda r: r["parallel"].__setitem__("tp", 0), "parallel.tp must be a whole number of 1"),
                             (lambda r: r.__setitem__("id", None), "id must be a non-empty string")):
        bad = [dict(x, parallel=dict(x["parallel"])) for x in runs]
        mutate(bad[0])
        (data / "published_dev.yaml").write_text(yaml.safe_dump(bad))
        r = CliRunner().invoke(main, ["validate", "--data", str(data)])
        assert r.exit_code == 2 and fragment in r.stderr and "run 1" in r.stderr, r.stderr
    (data / "published_dev.yaml").write_text(yaml.safe_dump(runs))
    (data / "vtrain" / "ground_truth_single.csv").write_text("")
    r = CliRunner().invoke(main, ["validate", "--data", str(data)])
    assert r.exit_code == 2 and "holds no rows" in r.stderr, r.stderr


def test_a_calibration_file_with_an_unknown_key_is_refused(tmp_path):
    runs = _calib_run(tmp_path)
    calib = tmp_path / "calib.yaml"
    assert CliRunner().invoke(main, ["calibrate", str(runs), "--out", str(calib)]).exit_code == 0
    data = yaml.safe_load(calib.read_text())
    data["constants_extra"] = {"compute_scale": 2.0}
    calib.write_text(yaml.safe_dump(data))
    case = tmp_path / "case.yaml"
    case.write_text("model: {name: m, num_layers: 32, hidden_size: 4096, ffn_hidden_size: 16384, num_attention_heads: 32, "
                    "num_kv_heads: 8, vocab_size: 131072, seq_length: 8192}\ncluster: {gpu: H100-SXM, num_gpus: 8}\n"
                    "framework: megatron-core\nparallel: {tp: 1, pp: 4, dp: 2, micro_batch: 1, global_batch: 8}\n")
    r = CliRunner().invoke(main, ["estimate", str(case), "--calibration", str(calib)])
    assert r.exit_code == 2 and "unknown key 'constants_extra'" in r.stderr, r.stderr


def test_a_run_file_shown_from_the_filesystem_root_keeps_no_absolute_path(tmp_path, monkeypatch):
    """From cwd '/', a path relative to the working directory spells the absolute one; calib.yaml must
    show the folder and file name only."""
    from planner.calibrate import shown_path
    log = tmp_path / "runs" / "train.log"
    monkeypatch.chdir("/")
    assert shown_path(str(log)) == "runs/train.log"
    assert shown_path("log:" + str(log)) == "log:runs/train.log"
    monkeypatch.chdir(tmp_path)
    assert shown_path(str(log)) == "runs/train.log"          # under the working directory: relative


def test_ctrl_c_while_the_command_line_loads_is_one_line(monkeypatch, capsys):
    """The console script's entry catches a Ctrl-C during the imports of planner.cli (click, numpy,
    OR-Tools) as a command does: one line, exit code 130, no traceback."""
    import builtins
    import planner_entry
    real_import = builtins.__import__

    def interrupted(name, globals=None, locals=None, fromlist=(), level=0):
        if name == "planner.cli":
            raise KeyboardInterrupt
        return real_import(name, globals, locals, fromlist, level)

    monkeypatch.setattr(builtins, "__import__", interrupted)
    with pytest.raises(SystemExit) as exc:
        planner_entry.main()
    assert exc.value.code == 130
    err = capsys.readouterr().err
    assert err.splitlines() == ["error: interrupted; nothing was written"]


def test_the_console_script_starts_outside_the_package():
    """What runs before the entry's own try is small: the console script imports planner_entry, which
    loads neither the planner package nor numpy, click or OR-Tools."""
    import subprocess
    import sys
    from importlib.metadata import entry_points
    (script,) = [e for e in entry_points(group="console_scripts") if e.name == "planner"]
    assert script.value == "planner_entry:main"
    code = ("import sys, planner_entry; "
            "print(sorted(m for m in ('planner', 'numpy', 'click', 'ortools') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"


# ---- fuzzing review, round 4 (2026-11-24) ----------------------------------------------------------

def _mds_log(ms=250.0, **kw):
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent))
    from mds_log import mds_log
    return mds_log(ms, **kw)


def test_a_line_longer_than_megatron_prints_is_not_read(tmp_path):
    """The iteration pattern rescanned the rest of a line from every 'iteration N/M |' in it (a 3 MB
    line hung calibrate); now the head is found once, the elapsed time after it, and a line longer than
    any Megatron prints (MAX_LINE_CHARS) is skipped: here one that would add a 99 s iteration."""
    from planner.calibrate import MAX_LINE_CHARS, parse_log
    heads = "iteration 21/21 |" * 3000                              # under the limit: read, first head
    padded = " iteration 22/22 | elapsed time per iteration (ms): 99999.0 |" + "x" * MAX_LINE_CHARS
    log = tmp_path / "1.log"
    log.write_text(_mds_log() + heads + " elapsed time per iteration (ms): 250.0 |\n" + padded + "\n")
    run = parse_log(log)
    assert len(run.iterations) == 21 and max(ms for _, ms in run.iterations) == 750.0   # the padded line is not


def test_a_log_of_two_runs_is_refused(tmp_path):
    """Two runs in one file (their argument dumps disagree) went into one median."""
    from planner.calibrate import parse_log
    from costmodels.errors import SpecError
    log = tmp_path / "1.log"
    log.write_text(_mds_log(90000.0, args={"num_layers": 80, "hidden_size": 8192})
                   + _mds_log(23000.0, args={"num_layers": 32, "hidden_size": 4096}))
    with pytest.raises(SpecError, match="holds more than one run: its arguments give hidden_size 8192 and later 4096"):
        parse_log(log)


def test_an_iteration_time_that_is_not_a_time_names_the_line(tmp_path):
    from planner.calibrate import parse_log
    from costmodels.errors import SpecError
    log = tmp_path / "1.log"
    log.write_text(_mds_log().replace("elapsed time per iteration (ms): 250.0", "elapsed time per iteration (ms): nan"))
    with pytest.raises(SpecError, match=r"line \d+: elapsed time per iteration is 'nan', not a time"):
        parse_log(log)


@pytest.mark.parametrize("section,key,fragment", [
    ("parallel", "tpp", "record 1, parallel: unknown key 'tpp'; did you mean tp?"),
    ("parallel", "micro_batch_size", "parallel: unknown key 'micro_batch_size'; did you mean micro_batch?"),
    ("model", "hiden_size", "model: unknown key 'hiden_size'; did you mean hidden_size?"),
    ("cluster", "foo", "cluster: unknown key 'foo'"),
    (None, "paralel", "record 1: unknown key 'paralel'; did you mean parallel?"),
])
def test_a_runs_file_refuses_unknown_keys(tmp_path, section, key, fragment):
    """They were ignored: the run was predicted as another layout, without a word."""
    runs = _calib_run(tmp_path)
    data = yaml.safe_load(runs.read_text())
    (data[0] if section is None else data[0][section])[key] = 4
    runs.write_text(yaml.safe_dump(data))
    r = CliRunner().invoke(main, ["calibrate", str(runs), "--out", str(tmp_path / "c.yaml")])
    assert r.exit_code == 2 and fragment in r.stderr and "record 1" in r.stderr, r.stderr


def test_a_runs_file_reads_its_clusters_links_and_upper_case_suffix(tmp_path):
    """network_bandwidth of a user's cluster was ignored; runs.YAML was read as a log."""
    from planner.calibrate import load_runs, predict
    runs = _calib_run(tmp_path)
    data = yaml.safe_load(runs.read_text())
    data[0]["cluster"].update(num_gpus=16)
    data[0]["parallel"].update(pp=1, vpp=1, dp=16, global_batch=16)
    upper = tmp_path / "runs.YAML"
    upper.write_text(yaml.safe_dump(data))
    default = predict(load_runs([upper]), {})[0]
    data[0]["cluster"]["network_bandwidth"] = "10 Gb/s"
    upper.write_text(yaml.safe_dump(data))
    assert predict(load_runs([upper]), {})[0] > 1.2 * default


def test_a_runs_id_with_control_characters_is_refused(tmp_path):
    runs = _calib_run(tmp_path)
    data = yaml.safe_load(runs.read_text())
    data[0]["id"] = "a\x1b[31mred\nline"
    runs.write_text(yaml.safe_dump(data))
    r = CliRunner().invoke(main, ["calibrate", str(runs), "--out", str(tmp_path / "c.yaml")])
    assert r.exit_code == 2 and "printable characters" in r.stderr and "\x1b" not in r.output + r.stderr


@pytest.mark.parametrize("calibration,fragment", [
    ({"compute_scale": -1}, "compute_scale: -1 is out of range"),
    ({"compute_scale": 0}, "compute_scale: 0 is out of range"),
    ({"compute_scale": "x"}, "compute_scale: expected a number"),
    ({"iteration_overhead_s": -100}, "iteration_overhead_s: -100 is out of range"),
    ({"network_efficiency": 50}, "network_efficiency: 50 is out of range"),
    ({"foo": 1}, "unknown constant 'foo'"),
    ([1], "calibration must be a calib.yaml path, a Calibration or a mapping"),
])
def test_the_api_checks_a_calibration_mapping_like_a_calib_yaml(calibration, fragment):
    """A mapping was applied unchecked: MFU 254%, a step of -73 s, a plan with a negative best."""
    import planner
    from costmodels.errors import SpecError
    from pathlib import Path
    case = Path(__file__).resolve().parents[2] / "examples" / "llama2-7b-h100.yaml"
    with pytest.raises(SpecError, match=fragment.replace("(", r"\(")):
        planner.estimate(str(case), calibration=calibration)




@pytest.mark.parametrize("where", ["estimate", "runner_ups"])
def test_explain_refuses_a_band_whose_top_is_zero(tmp_path, where):
    """step_time_band_s [low, 0] divided by zero in the error bars of explain --out."""
    out = tmp_path / "job"
    r = CliRunner().invoke(main, ["plan", "--model", "gpt-1.7b", "--cluster", "H100-SXM", "--gpus", "8",
                                  "--global-batch", "64", "--out", str(out), "--quiet"])
    assert r.exit_code == 0, r.stderr
    data = json.loads((out / "plan.json").read_text())
    (data["estimate"] if where == "estimate" else data["runner_ups"][0]["estimate"])["step_time_band_s"][1] = 0
    edited = tmp_path / "band.json"
    edited.write_text(json.dumps(data))
    r = CliRunner().invoke(main, ["explain", str(edited), "--out", str(tmp_path / "again")])
    assert r.exit_code == 2 and "step_time_band_s must be [low, high]" in r.stderr, (r.stderr, r.exception)
    assert not (tmp_path / "again").exists()


def test_a_currency_with_control_characters_is_refused(tmp_path):
    """It reached report.md as written: ESC, BEL and BS in '**Cost** 20.00 ... per hour'."""
    r = CliRunner().invoke(main, ["plan", "--model", "gpt-1.7b", "--cluster", "H100-SXM", "--gpus", "8",
                                  "--global-batch", "64", "--objective", "cost", "--price-per-gpu-hour",
                                  "2.5 \x1b[mX\x07\x08", "--out", str(tmp_path / "job")])
    assert r.exit_code == 2 and "the currency must be a name of letters" in r.stderr, r.stderr
    assert "\x1b" not in r.stderr and not (tmp_path / "job").exists()


def test_a_damaged_plan_says_what_broke_and_how_to_fix_it(tmp_path):
    """It said only 'is damaged: TypeError'."""
    out = tmp_path / "job"
    r = CliRunner().invoke(main, ["plan", "--model", "gpt-1.7b", "--cluster", "H100-SXM", "--gpus", "8",
                                  "--global-batch", "64", "--out", str(out), "--quiet"])
    assert r.exit_code == 0, r.stderr
    data = json.loads((out / "plan.json").read_text())
    data["why"] = 5
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(data))
    r = CliRunner().invoke(main, ["explain", str(edited)])
    assert r.exit_code == 2 and "is damaged: TypeError: 'int' object is not iterable; re-run" in r.stderr, r.stderr


def test_runs_files_take_every_record_of_the_validation_data(validation_dir):
    """The unknown-key check refuses typos, not the schema: every record of ../shared/validation and
    benchmarks/data passes it (deepspeed_runs.yaml adds parallel.offload / zeropp and more measured
    figures), and offload: cpu is read as ZeRO-Offload of the optimizer."""
    from planner.calibrate import _check_run_keys, _deepspeed_schema_keys
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    files = [validation_dir / "published_dev.yaml", validation_dir / "deepspeed_runs.yaml",
             root / "benchmarks" / "data" / "heldout_runs.yaml", root / "benchmarks" / "data" / "bloom_chronicles.yaml"]
    n = 0
    for f in files:
        for rec in yaml.safe_load(f.read_text()):
            if all(isinstance(rec.get(k), dict) for k in ("model", "cluster", "parallel", "measured")):
                _check_run_keys(rec, rec["id"])
                n += 1
    assert n > 150
    assert _deepspeed_schema_keys({"tp": 1, "offload": "cpu", "zeropp": None}, "r") == \
        {"tp": 1, "offload_optimizer": "cpu"}


def test_review_regressions_of_the_checks_above(tmp_path):
    """What the checks above must not refuse (review of 2026-11-24): a list of degrees with some above
    the GPU count (the README's --pp 1,2,4 on 2 GPUs), total_tokens=0 in the API (no budget, as in a
    case file), numpy integers, a calibration given as another Mapping, a model given as a Path, a set or
    an array of choices."""
    import types
    from pathlib import Path
    import numpy as np
    import planner
    r = CliRunner().invoke(main, ["plan", "--model", "gpt-1.7b", "--cluster", "H100-SXM", "--gpus", "2",
                                  "--pp", "1,2,4", "--global-batch", "64", "--quiet"])
    assert r.exit_code == 0, r.stderr
    root = Path(__file__).resolve().parents[2]
    res = planner.plan(root / "examples" / "llama3.1-8b-config.json", "H100-SXM", gpus=np.int64(8),
                       global_batch=np.int64(64), top_k=np.int64(1), total_tokens=0, advice=False,
                       choices={"tp": np.array([1, 2]), "pp": {1}})
    assert res.best.layout.tp in (1, 2) and res.best.layout.pp == 1 and res.request.total_tokens == 0
    res.write(tmp_path / "job", probe=np.int64(1))
    case = root / "examples" / "llama2-7b-h100.yaml"
    assert planner.estimate(str(case), total_tokens=0).total_tokens == 0
    calibrated = planner.estimate(str(case), calibration=types.MappingProxyType({"compute_scale": 0.9}))
    assert calibrated.estimate.step_time_s > planner.estimate(str(case)).estimate.step_time_s


def test_an_optuna_study_that_visited_no_fitting_layout_says_one_exists():
    """Nothing fitting after one trial was blamed on host memory (2 TiB per node) or on the GPU."""
    r = CliRunner().invoke(main, ["plan", "--model", "llama3.1-70b", "--cluster", "H100-SXM", "--gpus", "8",
                                  "--global-batch", "8", "--tp", "1", "--pp", "1", "--cp", "1", "--method",
                                  "optuna", "--trials", "1", "--quiet"])
    assert r.exit_code == 2 and "no layout the search visited fits" in r.stderr and "--method lattice" in r.stderr, \
        r.stderr


# ---- fuzzing review, round 5 (2026-11-24) ----------------------------------------------------------

PLAN64 = ["plan", "--model", "gpt-1.7b", "--cluster", "H100-SXM", "--gpus", "8", "--global-batch", "64", "--quiet"]


def test_a_users_folder_named_like_a_leftover_is_not_deleted(tmp_path):
    """Before writing --out results, every sibling '.results.<number>.<word>.old' / '.tmp' whose number
    was no living process was deleted, without --force: a user's '.results.2024.backup.old' with it.
    Only a folder holding the planner's marker file is a leftover now."""
    from planner.emit.writer import TMP_MARKER, TMP_MARKER_TEXT
    mine = tmp_path / ".results.2024.backup.old"
    mine.mkdir()
    (mine / "data.csv").write_text("important\n")
    leftover = tmp_path / ".results.2025.abc123.tmp"             # a killed run's folder, marked
    leftover.mkdir()
    (leftover / TMP_MARKER).write_bytes(TMP_MARKER_TEXT)
    r = CliRunner().invoke(main, PLAN64 + ["--out", str(tmp_path / "results")])
    assert r.exit_code == 0, r.stderr
    assert (mine / "data.csv").read_text() == "important\n" and not leftover.exists()
    assert not (tmp_path / "results" / TMP_MARKER).exists()      # the published job holds no marker


def test_force_replaces_a_plan_or_report_by_its_content_not_its_name(tmp_path):
    """A folder whose files only had the planner's names (a report.md of thesis notes, a plan.json of
    other data) was replaced with --force."""
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "report.md").write_text("# My thesis notes\n")
    (notes / "plan.json").write_text('{"my": "data"}')
    r = CliRunner().invoke(main, PLAN64 + ["--out", str(notes), "--force"])
    assert r.exit_code == 2 and "holds a plan.json the planner did not write" in r.stderr, r.stderr
    assert (notes / "report.md").read_text() == "# My thesis notes\n"
    job = tmp_path / "job"
    for _ in range(2):                                            # an earlier plan is replaced
        assert CliRunner().invoke(main, PLAN64 + ["--out", str(job), "--force"]).exit_code == 0
    for _ in range(2):                                            # and an earlier report
        r = CliRunner().invoke(main, ["explain", str(job / "plan.json"), "--out", str(tmp_path / "rep"), "--force"])
        assert r.exit_code == 0, r.stderr


@pytest.mark.parametrize("kind", ["fifo", "foreign", "garbage"])
def test_an_sqlite_storage_must_be_a_new_file_or_an_optuna_database(tmp_path, kind):
    """sqlite:////dev/null left /dev/null-journal behind; a user's database got Optuna's 13 tables."""
    import sqlite3
    db = tmp_path / "x.db"
    if kind == "fifo":
        os.mkfifo(db)
        fragment = "exists and is not a regular file"
    elif kind == "foreign":
        with sqlite3.connect(db) as con:
            con.execute("create table customers (name text)")
        fragment = "holds tables Optuna did not make (customers)"
    else:
        db.write_bytes(b"not a database at all, " * 10)
        fragment = "is not an SQLite database"
    r = CliRunner().invoke(main, PLAN64 + ["--method", "optuna", "--trials", "2", "--storage", f"sqlite:///{db}"])
    assert r.exit_code == 2 and fragment in r.stderr, r.stderr
    if kind == "foreign":
        with sqlite3.connect(db) as con:
            assert [t for (t,) in con.execute("select name from sqlite_master where type = 'table'")] == ["customers"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.db"]


def test_a_path_the_file_system_refuses_is_one_line(tmp_path):
    """ENAMETOOLONG from --out, explain, calibrate and validate paths was an OSError traceback."""
    long_name = "a" * 300
    for argv in (PLAN64 + ["--out", str(tmp_path / long_name / "x")], ["explain", f"{long_name}.json"],
                 ["calibrate", f"{long_name}.log", "--out", str(tmp_path / "c.yaml")],
                 ["validate", "--data", long_name]):
        r = CliRunner().invoke(main, argv)
        assert r.exit_code == 2, (argv[0], r.stderr, r.exception)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and "File name too long" in lines[0] and "Traceback" not in r.output


def test_an_output_write_error_is_one_line(monkeypatch, capsys):
    """'planner catalog models > /dev/full' printed click's echo traceback (ENOSPC)."""
    import errno
    import click
    import planner_entry

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    import signal
    monkeypatch.setattr(click, "echo", full)
    monkeypatch.setattr("sys.argv", ["planner", "catalog", "models"])
    before = signal.getsignal(signal.SIGINT)
    try:
        with pytest.raises(SystemExit) as exc:
            planner_entry.main()
    finally:
        signal.signal(signal.SIGINT, before)    # the entry leaves Ctrl-C to a no-op handler when done
    assert exc.value.code == 2
    assert capsys.readouterr().err.splitlines() == ["error: cannot write the output: No space left on device"]


def test_a_plan_made_on_a_cluster_file_reads_back_with_its_host_side(tmp_path):
    """plan.json dropped the cluster's host memory and NVMe: a plan with NVMe offload on the README's
    own examples/cluster-h100-ib.yaml could not be explained or estimated again ('NVMe offload needs
    NVMe in the cluster spec')."""
    from pathlib import Path
    cluster = Path(__file__).resolve().parents[2] / "examples" / "cluster-h100-ib.yaml"
    job = tmp_path / "job"
    r = CliRunner().invoke(main, ["plan", "--model", "llama2-7b", "--cluster", str(cluster), "--global-batch", "64",
                                  "--offload-optimizer", "nvme", "--out", str(job), "--quiet"])
    assert r.exit_code == 0, r.stderr
    data = json.loads((job / "plan.json").read_text())
    assert data["layout"]["offload_optimizer"] == "nvme" and data["inputs"]["cluster"]["nvme_bytes"] == 30e12
    assert CliRunner().invoke(main, ["explain", str(job / "plan.json")]).exit_code == 0
    again = CliRunner().invoke(main, ["estimate", str(job / "plan.json"), "--json"])
    assert again.exit_code == 0, again.stderr
    assert json.loads(again.stdout)["step_time_s"] == pytest.approx(data["estimate"]["step_time_s"], rel=1e-9)


def test_a_plan_on_a_gpu_spec_of_its_own_under_a_catalog_name_is_not_estimated_on_the_catalogs(tmp_path):
    """A cluster file's GPU mapping named H100-SXM with 200 GiB planned as fitting; estimate plan.json
    then silently said 152.94 GiB of 80.00 GiB (DOES NOT FIT). It was then refused; since plan.json
    keeps such a GPU's spec (2026-11-24) it is estimated again on that spec."""
    gpu = yaml.safe_load(open(os.path.join(os.path.dirname(__file__), "..", "..", "costmodels", "catalog", "gpus",
                                           "h100-sxm.yaml")))
    gpu["hbm"] = "200 GiB"
    cluster = tmp_path / "big.yaml"
    cluster.write_text(yaml.safe_dump({"gpu": gpu, "num_gpus": 8}))
    job = tmp_path / "job"
    assert CliRunner().invoke(main, PLAN64[:3] + ["--cluster", str(cluster), "--global-batch", "64", "--quiet",
                                                  "--out", str(job)]).exit_code == 0
    r = CliRunner().invoke(main, ["estimate", str(job / "plan.json"), "--json"])
    assert r.exit_code == 0, r.stderr
    stored = json.loads((job / "plan.json").read_text())
    assert stored["inputs"]["cluster"]["gpu_spec"]["hbm"] == f"{200 * 2.0**30!r} B"
    assert json.loads(r.stdout)["peak_memory_bytes"] == stored["estimate"]["peak_memory_bytes"]
    assert json.loads(r.stdout)["hbm_bytes"] == 200 * 2**30
    r = CliRunner().invoke(main, ["explain", str(job / "plan.json")])
    assert r.exit_code == 0 and "today's model gives" not in r.output   # its own numbers, no drift


@pytest.mark.parametrize("version", [99, "1.0", None, True])
def test_a_plan_json_of_another_version_is_refused(tmp_path, version):
    """explain and estimate read any version (99, '1.0', null, missing) as this planner's."""
    job = tmp_path / "job"
    assert CliRunner().invoke(main, PLAN64 + ["--out", str(job)]).exit_code == 0
    data = json.loads((job / "plan.json").read_text())
    data["version"] = version
    edited = tmp_path / "old.json"
    edited.write_text(json.dumps(data))
    for cmd in ("explain", "estimate"):
        r = CliRunner().invoke(main, [cmd, str(edited)])
        assert r.exit_code == 2 and "this planner reads version 1" in r.stderr, (cmd, r.stderr)


def test_an_out_name_leaves_room_for_the_study_file_beside_it(tmp_path):
    """A 238-240-byte --out passed, then the default study's journal (<name>.optuna.db-journal) was
    longer than 255 bytes: a misleading 'writable' error and a 0-byte <name>.optuna.db left behind."""
    from planner.outdir import MAX_OUT_NAME
    assert MAX_OUT_NAME + len(".optuna.db-journal") == 255
    r = CliRunner().invoke(main, PLAN64 + ["--method", "optuna", "--trials", "2", "--out",
                                           str(tmp_path / ("j" * (MAX_OUT_NAME + 1)))])
    assert r.exit_code == 2 and f"use at most {MAX_OUT_NAME}" in r.stderr, r.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_gpu_name_from_a_cluster_file_never_reaches_the_report_raw(tmp_path):
    """report.md's 'How far to trust' bullets printed a cluster file's GPU name raw (newline, CR). Such a
    name is refused since 2026-11-24 (plan.json read it back with '?' for them, so a calibration made
    from the plan's logs never matched the GPU again)."""
    gpu = yaml.safe_load(open(os.path.join(os.path.dirname(__file__), "..", "..", "costmodels", "catalog", "gpus",
                                           "h100-sxm.yaml")))
    gpu["name"] = "My\rGPU\nX"
    for key in ("aliases",):
        gpu.pop(key, None)
    cluster = tmp_path / "c.yaml"
    cluster.write_text(yaml.safe_dump({"gpu": gpu, "num_gpus": 8}))
    job = tmp_path / "job"
    r = CliRunner().invoke(main, PLAN64[:3] + ["--cluster", str(cluster), "--global-batch", "64", "--quiet",
                                               "--out", str(job)])
    assert r.exit_code == 2 and "has a non-printable character" in r.stderr, r.stderr
    assert len([x for x in r.stderr.splitlines() if x.strip()]) == 1 and not job.exists()


def test_storage_clashes_are_refused_before_the_search(tmp_path):
    """--storage '' fell back to the user cache without a word; --storage sqlite:///job --out job ran the
    whole search, created the file 'job', then failed at write time and left it."""
    for storage, fragment in (("", "--storage is empty"), (f"sqlite:///{tmp_path / 'job'}", "the same path as --out")):
        r = CliRunner().invoke(main, PLAN64 + ["--method", "optuna", "--trials", "2", "--storage", storage,
                                               "--out", str(tmp_path / "job")])
        assert r.exit_code == 2 and fragment in r.stderr, r.stderr
        assert list(tmp_path.iterdir()) == []


def test_explain_json_checks_the_plan_as_the_text_does(tmp_path):
    """explain --json exited 0 on files plain explain refused as damaged (warnings: 'oops')."""
    job = tmp_path / "job"
    assert CliRunner().invoke(main, PLAN64 + ["--out", str(job)]).exit_code == 0
    data = json.loads((job / "plan.json").read_text())
    data["warnings"] = "oops"
    edited = tmp_path / "w.json"
    edited.write_text(json.dumps(data))
    for extra in ([], ["--json"]):
        r = CliRunner().invoke(main, ["explain", str(edited)] + extra)
        assert r.exit_code == 2 and "is damaged" in r.stderr, (extra, r.stderr)


def test_a_failed_search_leaves_no_default_study_file(tmp_path):
    """A search that ended in an error still left a j.optuna.db (and its WAL files) beside --out."""
    r = CliRunner().invoke(main, ["plan", "--model", "llama3.1-405b", "--cluster", "V100-32GB", "--gpus", "8",
                                  "--global-batch", "64", "--method", "optuna", "--trials", "3", "--quiet",
                                  "--out", str(tmp_path / "j")])
    assert r.exit_code == 2 and "no layout fits" in r.stderr, r.stderr
    assert list(tmp_path.iterdir()) == []


# fuzzing review, round 6 (2026-11-24)

def test_a_config_json_with_a_head_size_of_its_own_is_refused(tmp_path):
    """Mistral-NeMo, Qwen3, Gemma: head_dim x heads != hidden. It was ignored: Mistral-NeMo 12B planned
    with heads of 5120 / 32 = 160 (12.77B parameters instead of 12.25B, attention FLOPs and memory off)."""
    cfg = tmp_path / "config.json"
    cfg.write_text(hf(model_type="mistral", hidden_size=5120, head_dim=128, num_attention_heads=32,
                      num_key_value_heads=8, num_hidden_layers=40, intermediate_size=14336, vocab_size=131072,
                      hidden_act="silu"))
    r = CliRunner().invoke(main, ["plan", "--model", str(cfg), "--cluster", "H100-SXM", "--gpus", "8"])
    assert r.exit_code == 2 and "head_dim 128 differs from hidden_size / num_attention_heads (5120 / 32 = 160)" \
        in r.stderr, r.output
    cfg.write_text(hf(head_dim=64))                  # 512 / 8 = 64: the same head size, accepted
    assert CliRunner().invoke(main, ["plan", "--model", str(cfg), "--cluster", "H100-SXM", "--gpus", "8",
                                     "--global-batch", "32", "-q"]).exit_code == 0


def test_calibrate_counts_each_input_and_run_once(tmp_path):
    """The same log or runs file given twice (or by another path) counted its runs twice: the fit moved
    and the reported error fell (2.8% -> 0.7%); two records with one id were accepted too."""
    runs = _calib_run(tmp_path)
    same = str(tmp_path / "." / "runs.yaml")
    r = CliRunner().invoke(main, ["calibrate", str(runs), same, "--out", str(tmp_path / "c.yaml")])
    assert r.exit_code == 2 and "is the same file as" in r.stderr and not (tmp_path / "c.yaml").exists()
    data = yaml.safe_load(runs.read_text())
    runs.write_text(yaml.safe_dump(data + data))
    r = CliRunner().invoke(main, ["calibrate", str(runs), "--out", str(tmp_path / "c.yaml")])
    assert r.exit_code == 2 and "two runs have the id 'probe-1'" in r.stderr
    # runs without ids in two files of one name (a/runs.yaml, b/runs.yaml) are two runs, not one twice
    del data[0]["id"]
    for sub in ("a", "b"):
        (tmp_path / sub).mkdir()
        (tmp_path / sub / "runs.yaml").write_text(yaml.safe_dump(data[:1]))
    r = CliRunner().invoke(main, ["calibrate", str(tmp_path / "a" / "runs.yaml"), str(tmp_path / "b" / "runs.yaml"),
                                  "--out", str(tmp_path / "c.yaml")])
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("moe", [{"num_experts": 8}, True, 8])
def test_a_mixture_of_experts_run_is_not_calibrated_as_dense(tmp_path, moe):
    runs = _calib_run(tmp_path)
    data = yaml.safe_load(runs.read_text())
    data[0]["model"]["moe"] = moe
    runs.write_text(yaml.safe_dump(data))
    r = CliRunner().invoke(main, ["calibrate", str(runs), "--out", str(tmp_path / "c.yaml")])
    assert r.exit_code == 2 and "Mixture-of-Experts run" in r.stderr, r.output


@pytest.mark.parametrize("order", ["repeated", "backwards"])
def test_iteration_numbers_must_rise_in_a_log(tmp_path, order):
    """Two runs interleaved (iteration numbers repeating) gave a median of both; a log in reverse order
    was called truncated."""
    from planner.calibrate import parse_log
    from costmodels.errors import SpecError
    lines = _mds_log().splitlines(keepends=True)
    iters = [i for i, line in enumerate(lines) if " iteration " in line and "elapsed time per iteration" in line]
    assert len(iters) >= 3
    if order == "repeated":
        lines.insert(iters[2] + 1, lines[iters[2]].replace("250.0", "9999.0"))
    else:
        body = [lines[i] for i in iters]
        for i, line in zip(iters, reversed(body)):
            lines[i] = line
    log = tmp_path / "1.log"
    log.write_text("".join(lines))
    with pytest.raises(SpecError, match="the iteration numbers must rise"):
        parse_log(log)


def test_a_base60_number_in_yaml_is_read_as_its_text(tmp_path):
    """YAML 1.1 reads num_layers: 1:30 as 90 (planned as a 90-layer model without a word) and an
    unquoted sparsity 2:4 as 124. Read as text (as YAML 1.2 does), the number field is refused by its
    own check, the pattern 2:4 works, and a free-text note '12:30' stays what it was."""
    from costmodels.catalog import _strict_load
    m = tmp_path / "m.yaml"
    m.write_text(model_file("512").replace("num_layers: 4", "num_layers: 1:30"))
    r = CliRunner().invoke(main, ["plan", "--model", str(m), "--cluster", "H100-SXM", "--gpus", "8"])
    assert r.exit_code == 2 and "'1:30'" in r.stderr and "num_layers" in r.stderr, r.stderr
    r = CliRunner().invoke(main, ["estimate", str(tmp_path / "s.yaml")]) if (tmp_path / "s.yaml").write_text(
        case("sparsity: 2:4")) else None
    assert r.exit_code == 0 and "2:4" in r.stdout, r.output
    assert _strict_load("notes: 12:30\nn: 90\nf: 1.5\n") == {"notes": "12:30", "n": 90, "f": 1.5}


def test_two_framework_names_in_a_case_file_are_refused(tmp_path):
    c = tmp_path / "case.yaml"
    c.write_text(case("") + "framework: megatron-lm\ntraining: {framework: torchtitan}\n")
    r = CliRunner().invoke(main, ["estimate", str(c)])
    assert r.exit_code == 2 and "name two frameworks; keep one" in r.stderr, r.output
    c.write_text(case("") + "framework: Megatron-DeepSpeed\ntraining: {framework: megatron-deepspeed}\n")
    assert CliRunner().invoke(main, ["estimate", str(c)]).exit_code == 0          # one framework, two spellings


def test_output_the_terminal_cannot_encode_is_escaped(tmp_path):
    """A model named in Cyrillic under PYTHONIOENCODING=latin-1 ended in a UnicodeEncodeError traceback
    after the job had been written."""
    import subprocess
    import sys
    m = tmp_path / "m.yaml"
    m.write_text(model_file("512").replace("name: tiny", "name: модель"))
    done = subprocess.run([sys.executable, "-c", "import sys, planner_entry; sys.argv[0] = 'planner'; "
                           "planner_entry.main()", "plan", "--model", str(m), "--cluster", "H100-SXM", "--gpus", "8",
                           "--global-batch", "32", "-q"], capture_output=True,
                          env={**os.environ, "PYTHONIOENCODING": "latin-1"}, cwd=tmp_path)
    assert done.returncode == 0, done.stderr.decode("latin-1")
    assert b"\\u043c\\u043e" in done.stdout and b"Traceback" not in done.stderr


def test_the_study_cache_needs_a_home_and_an_absolute_xdg_path(tmp_path, monkeypatch):
    """HOME=/nonexistent created /nonexistent/.cache (as root); a relative XDG_CACHE_HOME was read
    relative to the working directory, which the XDG spec says to ignore."""
    from planner.outdir import cache_storage
    from costmodels.errors import SpecError
    monkeypatch.setenv("HOME", str(tmp_path / "nohome"))
    monkeypatch.setenv("XDG_CACHE_HOME", "relcache")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SpecError, match="home directory .* does not exist"):
        cache_storage()
    assert not (tmp_path / "nohome").exists() and not (tmp_path / "relcache").exists()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_storage() == f"sqlite:///{tmp_path / 'xdg' / 'llm-train-planner' / 'studies.db'}"


def _runs_with(tmp_path, **changes):
    runs = _calib_run(tmp_path)
    data = yaml.safe_load(runs.read_text())
    for dotted, value in changes.items():
        section, key = dotted.split("__")
        data[0][section][key] = value
    runs.write_text(yaml.safe_dump(data))
    return runs


def test_round6_messages_say_what_to_fix(tmp_path):
    """Each was one line with exit 2, but it showed a Python exception's text or a fix that did not
    work (following it led to another error)."""
    d = tmp_path
    cases = []
    cases.append((["calibrate", str(_runs_with(d / "a", cluster__gpu=["H100"]) if (d / "a").mkdir() is None else ""),
                   "--out", str(d / "c.yaml")], "cluster.gpu must be a GPU name such as 'H100-SXM'"))
    cases.append((["calibrate", str(_runs_with(d / "b", measured__peak_memory_gib="x") if (d / "b").mkdir() is None
                                    else ""), "--out", str(d / "c.yaml")], "peak_memory_gib must be a number of GiB"))
    (d / "v").mkdir()
    (d / "v" / "published_dev.yaml").write_text("- x\n")
    cases.append((["validate", "--data", str(d / "v")], "run 1 must be a mapping with id, model"))
    (d / "u16.yaml").write_bytes("name: m\n".encode("utf-16"))
    cases.append((["plan", "--model", str(d / "u16.yaml"), "--cluster", "H100-SXM"],
                  "is not UTF-8 text (byte 0xff at offset 0; it looks like UTF-16); save it as UTF-8"))
    (d / "loopA").symlink_to(d / "loopB")
    (d / "loopB").symlink_to(d / "loopA")
    cases.append((["plan", "--model", "gpt-1.7b", "--cluster", "H100-SXM", "--gpus", "8", "--out",
                   str(d / "loopA" / "x")], "runs through a loop of symbolic links"))
    (d / "t.yaml").write_text(case("") + "training: {total_tokens: 1M}\n")
    cases.append((["estimate", str(d / "t.yaml")], "must be a plain number of tokens such as 300e9"))
    (d / "other.txt").write_text("mine\n")
    cases.append((["calibrate", str(_calib_run(d)), "--out", str(d / "other.txt")],
                   "already exists and is not a calib.yaml this command wrote, so even --force"))
    for storage, fragment in (("sqlite://", "is an in-memory SQLite database"),
                              ("sqlite:///:memory:", "is an in-memory SQLite database"),
                              ("mysql://u:pw@h/db", "the Python driver SQLAlchemy uses for mysql://")):
        cases.append((["plan", "--model", "gpt-1.7b", "--cluster", "H100-SXM", "--gpus", "8", "--global-batch", "64",
                       "--method", "optuna", "--trials", "3", "--storage", storage], fragment))
    (d / "config.json").write_text(json.dumps({"hidden_size": 512, "num_attention_heads": 8, "num_hidden_layers": 4,
                                               "vocab_size": 32000, "hidden_act": "silu"}))
    cases.append((["plan", "--model", str(d / "config.json"), "--cluster", "H100-SXM"],
                  'a Hugging Face config.json (hidden_act) without "model_type"'))
    for extra, fragment in (("pp: 2, first_stage_layers: 3, last_stage_layers: 3",
                             "with pp 2 the first and last stages hold all 4 layers"),
                            ("pp: 2, first_stage_layers: 0, last_stage_layers: 4", "0 means an even split"),
                            ("pp: 4, first_stage_layers: 2, last_stage_layers: 2",
                             "leave 0 of the 4 layers for the 2 middle stages")):
        f = d / f"s{len(cases)}.yaml"
        f.write_text(MODEL + CLUSTER + "parallel: {" + extra + "}\n")
        cases.append((["estimate", str(f)], fragment))
    for args, fragment in cases:
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 2 and fragment in r.stderr, (args, r.output)
        assert "Traceback" not in r.output and "Error:" not in r.stderr.replace("error:", "")
    assert (d / "other.txt").read_text() == "mine\n"


def test_closed_output_streams_end_with_exit_code_2(tmp_path):
    """Bad input with stderr closed exited 1; a plan with stdout closed exited 0 and its result was
    lost without a word. With --out the files are the result, and a closed stdout is fine."""
    import subprocess
    import sys
    entry = [sys.executable, "-c", "import sys, planner_entry; sys.argv[0] = 'planner'; planner_entry.main()"]
    plan = ["plan", "--model", "gpt-1.7b", "--cluster", "H100-SXM", "--gpus", "8", "--global-batch", "32", "-q"]

    def run(args, close):
        return subprocess.run(["sh", "-c", f'exec "$@" {close}', "sh"] + entry + args, cwd=tmp_path,
                              capture_output=True, text=True)

    assert run(["plan", "--model", "nope", "--cluster", "H100-SXM"], "2>&-").returncode == 2
    done = run(plan, ">&-")
    assert done.returncode == 2 and "standard output is closed" in done.stderr
    assert run(plan + ["--out", str(tmp_path / "job")], ">&-").returncode == 0
    assert (tmp_path / "job" / "plan.json").exists()


def test_explain_says_when_the_stored_numbers_no_longer_follow_from_the_inputs(tmp_path):
    """explain re-renders plan.json's stored estimate: a hand-edited num_layers (24 -> 48) printed
    '48 layers' beside the 24-layer step time without a word."""
    job = tmp_path / "job"
    assert CliRunner().invoke(main, ["plan", "--model", "gpt-1.7b", "--cluster", "H100-SXM", "--gpus", "8",
                                     "--global-batch", "64", "--out", str(job), "-q"]).exit_code == 0
    r = CliRunner().invoke(main, ["explain", str(job / "plan.json")])
    assert r.exit_code == 0 and "today's model gives" not in r.stderr        # as written: no note
    data = json.loads((job / "plan.json").read_text())
    data["inputs"]["model"]["num_layers"] *= 2
    (job / "plan.json").write_text(json.dumps(data))
    r = CliRunner().invoke(main, ["explain", str(job / "plan.json")])
    assert r.exit_code == 0 and "today's model gives" in r.stderr and "planner estimate plan.json" in r.stderr


def test_the_config_json_hint_is_not_given_to_our_own_model_format(tmp_path):
    m = tmp_path / "m.yaml"
    m.write_text("name: m\nnum_layers: 4\nhidden: 512\nnum_heads: 8\nvocab: 32000\nmax_seq_len: 1024\nhead_dim: 128\n")
    r = CliRunner().invoke(main, ["plan", "--model", str(m), "--cluster", "H100-SXM", "--gpus", "8"])
    assert r.exit_code == 2 and "head_dim" in r.stderr and "model_type" not in r.stderr, r.stderr


def test_validation_data_with_one_id_twice_is_refused(tmp_path, validation_dir):
    """Two runs under one id (in one file or across published_dev.yaml and deepspeed_runs.yaml) were
    both read; the id names one run in every table and figure."""
    import shutil
    data = tmp_path / "v"
    shutil.copytree(validation_dir, data, ignore=shutil.ignore_patterns("vtrain"))
    runs = yaml.safe_load((data / "published_dev.yaml").read_text())
    (data / "published_dev.yaml").write_text(yaml.safe_dump(runs + runs[:1]))
    r = CliRunner().invoke(main, ["validate", "--data", str(data), "--no-vtrain"])
    assert r.exit_code == 2 and f"two runs have the id '{runs[0]['id']}'" in r.stderr, r.output


def test_a_checkpoint_folder_holding_config_json_is_read(tmp_path):
    """--model <folder with config.json> (how Hugging Face checkpoints come) said 'give a YAML file'."""
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(hf(hidden_act="silu", intermediate_size=1376))
    r = CliRunner().invoke(main, ["plan", "--model", str(ckpt), "--cluster", "H100-SXM", "--gpus", "8",
                                  "--global-batch", "32", "-q"])
    assert r.exit_code == 0, r.output
    empty = tmp_path / "empty"
    empty.mkdir()
    r = CliRunner().invoke(main, ["plan", "--model", str(empty), "--cluster", "H100-SXM", "--gpus", "8"])
    assert r.exit_code == 2 and "has no config.json" in r.stderr
