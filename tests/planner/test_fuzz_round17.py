"""Fuzzing round 17 (2026-11-25, a helper's audit): a token budget of one step emitted
--lr-warmup-iters 1 with --train-iters 1, which Megatron-DeepSpeed's scheduler refuses at start-up; a
fractional rope_theta was cut to an integer in launch.sh (0.5 became 0, which breaks RoPE) and any
positive base was taken (1e300 became a 301-digit argument); calibrate skipped a global batch or sequence
length printed as something other than a number ('4096x') and fitted the log as if it had none; a
newline in a log's path broke calibrate's per-run line; the folder of a PostgreSQL socket (host=/...)
reached the error line through the driver's own message; a Ctrl-C during an import inside the command
(matplotlib's, wrapped by Python in a RuntimeError) ended in a traceback; a model file's YAML 1.1
forms '1_2' (12) and 'yes' (true) were read as numbers and booleans. Each test failed before."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from mds_log import mds_log  # noqa: E402
from test_fuzz_round11 import one_error, run  # noqa: E402
from test_fuzz_round16 import job  # noqa: E402,F401  (a planned 16-GPU job: its plan.json for the logs)

from costmodels.catalog import load_model, model_from_dict
from costmodels.errors import SpecError


# ---- the learning-rate warm-up of a very short job ------------------------------------------------

@pytest.mark.parametrize("train_iters", [1, 2, 3, 99, 100, 101, 250_000])
def test_warmup_stays_below_the_steps(train_iters):
    """Megatron-DeepSpeed f4157bea optimizer_param_scheduler.py:30: lr_warmup_steps < lr_decay_steps,
    both iterations x global batch, decay = train_iters (training.py:447-454)."""
    from planner.emit.megatron_ds import lr_schedule
    warmup = lr_schedule(train_iters)["warmup_iters"]
    assert 0 <= warmup < train_iters
    assert warmup == min(2000, max(1, train_iters // 100)) or train_iters == 1


def test_a_one_step_budget_writes_a_job_that_starts(tmp_path):
    out = tmp_path / "job"
    r = run("plan", "--model", "gpt-1.7b", "--cluster", "H100-SXM", "--gpus", "8", "--global-batch", "2048",
            "--tokens", "4194304", "--out", out, "-q")
    assert r.exit_code == 0, r.output
    text = (out / "launch.sh").read_text()
    assert "--train-iters 1\n" in text and "--lr-warmup-iters 0\n" in text, text


# ---- rope_theta ----------------------------------------------------------------------------------

def _llama(theta) -> dict:
    return {"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 1024, "intermediate_size": 2816,
            "num_attention_heads": 16, "num_key_value_heads": 4, "vocab_size": 32000,
            "max_position_embeddings": 2048, "rope_theta": theta}


@pytest.mark.parametrize("theta", [0.5, 1e-300, 1e300])
def test_a_rope_base_outside_any_model_is_refused(theta):
    with pytest.raises(SpecError, match="rope_theta must be between 1 and 10\\^12"):
        model_from_dict(_llama(theta), name="t")


def test_a_fractional_rope_base_is_refused_before_anything_is_written(tmp_path):
    import json
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(_llama(12345.678)))
    out = tmp_path / "job"
    line = one_error(run("plan", "--model", cfg, "--cluster", "H100-SXM", "--gpus", "8", "--out", out, "-q"),
                     "rope_theta 12345.678 is not a whole number")
    assert "round it" in line
    assert not out.exists()


def test_a_whole_rope_base_reaches_launch_sh(tmp_path):
    import json
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(_llama(500000.0)))
    out = tmp_path / "job"
    r = run("plan", "--model", cfg, "--cluster", "H100-SXM", "--gpus", "8", "--out", out, "-q")
    assert r.exit_code == 0, r.output
    assert "--rotary-position-embeddings-theta 500000\n" in (out / "launch.sh").read_text()


# ---- calibrate: a damaged field, a newline in a path ---------------------------------------------

def _write_log(job, folder: Path, text: str) -> Path:
    (folder / "probe").mkdir(parents=True, exist_ok=True)
    (folder / "plan.json").write_text((job / "plan.json").read_text())
    log = folder / "probe" / "1.log"
    log.write_text(text)
    return log


@pytest.mark.parametrize("old, new, words", [
    ("global batch size:    64 |", "global batch size:  64x |", "global batch size is '64x', not a whole number"),
    ("global batch size:    64 |", "global batch size: -64 |", "global batch size is '-64'"),
    ("global batch size:    64 |", "global batch size: 6.4e1 |", "global batch size is '6.4e1'"),
    ("actual seqlen:  2048 |", "actual seqlen:  99999999999999999999 |", "actual seqlen is '99999999999999999999'"),
    ("actual seqlen:  2048 |", "actual seqlen:  ２０４８ |", "actual seqlen is"),
    ("TFLOPs: 123.45 |", "TFLOPs: lots |", "TFLOPs is 'lots', not a number"),
])
def test_a_printed_field_that_is_not_a_number_is_damage(job, tmp_path, old, new, words):
    good = (job / "probe" / "1.log").read_text() if (job / "probe" / "1.log").exists() else None
    text = mds_log(250.0, gbs=64, seq=2048)
    assert old in text
    log = _write_log(job, tmp_path / "j", text.replace(old, new))
    line = one_error(run("calibrate", log), words)
    assert "line 1" in line and "damaged" in line
    assert good is None or (job / "probe" / "1.log").read_text() == good


def test_a_newline_in_a_logs_path_stays_on_its_line(job, tmp_path, monkeypatch):
    from planner.calibrate import Run, case_for_log, predict
    folder = tmp_path / "a\nb"
    log = _write_log(job, folder, "")
    case = case_for_log(log, folder / "plan.json")
    ms = predict([Run("x", "x", case, 1.0)], {})[0] * 1e3
    log.write_text(mds_log(ms, gbs=case.layout.gbs, seq=case.layout.seq_len))
    monkeypatch.chdir(tmp_path)
    r = run("calibrate", Path("a\nb") / "probe" / "1.log")
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    per_run = [ln for ln in lines if ": measured" in ln]
    assert len(per_run) == 1 and per_run[0].startswith("  a?b/probe/1.log: measured"), r.stdout
    assert not any(ln.strip() == "a" for ln in lines), r.stdout


# ---- the PostgreSQL socket folder ------------------------------------------------------------------

def test_a_socket_folder_never_reaches_the_error_line():
    from planner.study import _first_line
    url = "postgresql://user:s3cr3t@/db?host=/var/run/hunter2"
    shown = _first_line(Exception('connection to server on socket "/var/run/hunter2/.s.PGSQL.5432" failed: '
                                  'No such file or directory'), url)
    assert "hunter2" not in shown and "s3cr3t" not in shown, shown
    assert "***/.s.PGSQL.5432" in shown, shown


# ---- Ctrl-C inside an import ------------------------------------------------------------------------

def test_an_interrupt_that_python_wrapped_is_still_an_interrupt():
    from planner.cli_common import Interrupted, run_command

    def work():
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as exc:      # what Python 3.11 does with an exception from __set_name__
            raise RuntimeError("Error calling __set_name__ on 'deprecate_privatize_attribute'") from exc

    with pytest.raises(Interrupted) as info:
        run_command(work)
    assert info.value.exit_code == 130

    def other():
        raise RuntimeError("a bug")

    with pytest.raises(RuntimeError, match="a bug"):     # not every error becomes an interrupt
        run_command(other)


# ---- YAML 1.1 forms in model files -----------------------------------------------------------------

@pytest.mark.parametrize("line, words", [
    ("num_layers: 1_2", "num_layers must be a positive integer, got '1_2'"),
    ("gated_mlp: yes", "gated_mlp must be true or false, got 'yes'"),
    ("gated_mlp: on", "gated_mlp must be true or false, got 'on'"),
])
def test_yaml_1_1_numbers_and_booleans_are_text(tmp_path, line, words):
    f = tmp_path / "m.yaml"
    body = {"name": "tiny", "num_layers": "12", "hidden_size": "1024", "ffn_hidden_size": "4096",
            "num_attention_heads": "16", "vocab_size": "32000", "seq_length": "2048"}
    key = line.split(":")[0]
    body.pop(key, None)
    f.write_text("\n".join(f"{k}: {v}" for k, v in body.items()) + f"\n{line}\n")
    with pytest.raises(SpecError, match=words):
        load_model(str(f))


def test_yaml_1_2_booleans_still_read(tmp_path):
    f = tmp_path / "m.yaml"
    f.write_text("name: tiny\nnum_layers: 12\nhidden_size: 1024\nffn_hidden_size: 4096\nnum_attention_heads: 16\n"
                 "vocab_size: 32000\nseq_length: 2048\ngated_mlp: True\ntied_embeddings: false\n")
    m = load_model(str(f))
    assert m.gated_mlp is True and m.tied_embeddings is False
