"""Fuzzing round 20 (a helper's review, 2026-12-07: about 1,100 commands and 56,000 in-process inputs).
Each test fails on the code before its fix."""
import signal
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from costmodels.errors import SpecError
from planner.cli import main
from planner.measured import measured_layouts

sys.path.insert(0, str(Path(__file__).parent))
from mds_log import mds_log  # noqa: E402

DIGITS = "1" * 200_000 + "!"


class _TooSlow(Exception):
    pass


def _within(seconds, fn, *args):
    """fn(*args) must return or raise within `seconds` (the patterns backtracked quadratically: 200,000
    digits took hours)."""
    def alarm(*_):
        raise _TooSlow()
    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        try:
            fn(*args)
        except (SpecError, ValueError):
            pass
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.mark.parametrize("path", ["units", "tokens", "float", "plain"])
def test_a_long_run_of_digits_is_refused_at_once(path):
    from costmodels import units
    from planner import arguments, cli_common, specs
    fn = {"units": lambda t: units._QUANTITY.match(t),
          "tokens": lambda t: arguments._TOKEN_RE.match(t),
          "float": lambda t: cli_common._ASCII_FLOAT.fullmatch(t),
          "plain": lambda t: specs._PLAIN_NUMBER.fullmatch(t)}[path]
    _within(5, fn, DIGITS)


def test_a_whole_number_option_of_thousands_of_digits_is_one_error_line():
    r = CliRunner().invoke(main, ["plan", "--model", "llama2-7b", "--cluster", "H100-SXM", "--gpus", "1" * 4301])
    assert r.exit_code == 2 and r.exception is None or isinstance(r.exception, SystemExit), r.output
    assert "Traceback" not in r.output and "beyond any value" in r.output


def test_the_log_interval_is_read_off_the_iteration_lines(tmp_path):
    """A damaged dump ('log_interval ... ²', or 10^6 on a log cut at 20 of 1000) neither crashes nor
    hides a truncation."""
    from planner.calibrate import parse_log
    log = tmp_path / "1.log"
    log.write_text("  log_interval ........ \u00b2\n" + mds_log(250.0))
    assert parse_log(log).step_s == pytest.approx(0.25)
    cut = mds_log(250.0, train_iters=1000, stop=20)
    log.write_text("  log_interval ........ 1000000\n" + cut)
    with pytest.raises(SpecError, match="truncated"):
        parse_log(log)


def test_a_calibration_run_outside_any_real_step_time_is_refused():
    base = {"model": "m", "num_gpus": 8, "layout": {"tp": 1}}
    for step in (5e-324, 1e-300, 1e300, 0.0):
        with pytest.raises(SpecError, match="measured_step_s"):
            measured_layouts([dict(base, measured_step_s=step)], "m", 8)
    assert measured_layouts([dict(base, measured_step_s=2.0, num_gpus=8.0)], "m", 8) == {}
    assert len(measured_layouts([dict(base, measured_step_s=2.0)], "m", 8)) == 1


@pytest.mark.parametrize("peak", ["{fp32: 67 TFLOP/s, fp8: 1978.9 TFLOP/s}",
                                  "{bf16: 0 FLOP/s, fp32: 67 TFLOP/s, fp8: 1978.9 TFLOP/s}"])
def test_a_gpu_with_fp8_and_no_16_bit_rate_is_one_error_line(tmp_path, peak):
    """Every estimate came out NaN (text: 'step time nan us', rc 0; --json: a traceback)."""
    gpu = tmp_path / "gpu.yaml"
    gpu.write_text(f"name: FP8andFP32\nhbm: 80 GiB\nhbm_bandwidth: 3.35 TB/s\npeak: {peak}\nnum_sms: 132\n"
                   "gemm_tile_intensity: 32\n")
    case = tmp_path / "case.yaml"
    case.write_text(f"model: llama2-7b\ncluster: {{gpu: {gpu}, num_gpus: 8}}\nparallel: {{precision: fp8}}\n"
                    "framework: megatron-core\n")
    for extra in ([], ["--json"]):
        r = CliRunner().invoke(main, ["estimate", str(case), *extra])
        assert r.exit_code == 2, r.output
        lines = [line for line in r.output.splitlines() if line.strip()]
        assert len(lines) == 1 and "bf16 or fp16" in lines[0], r.output


def test_a_name_that_is_a_local_path_is_refused(tmp_path):
    """A model, GPU or framework `name:` written as a local path went into launch.sh's comment,
    report.md's title and plan.json. Cut to its last part it could spell a catalog name (a 192 GiB GPU
    file named '/x/H100-SXM' loaded as H100-SXM), so it is refused, in one line, with nothing written."""
    model = tmp_path / "m.yaml"
    model.write_text("name: /home/alice/secret/llama\nnum_layers: 4\nhidden: 1024\nnum_heads: 16\n"
                     "vocab: 32000\nseq_length: 2048\n")
    gpu = tmp_path / "g.yaml"
    gpu.write_text("name: /home/alice/gpus/H100-SXM\nhbm: 192 GiB\nhbm_bandwidth: 3.35 TB/s\n"
                   "peak: {bf16: 989 TFLOP/s}\nnum_sms: 132\ngemm_tile_intensity: 32\n")
    out = tmp_path / "out"
    for argv in (["--model", str(model), "--cluster", "H100-SXM"], ["--model", "llama2-7b", "--cluster", str(gpu)]):
        r = CliRunner().invoke(main, ["plan", *argv, "--gpus", "8", "--global-batch", "64", "--out", str(out)])
        lines = [line for line in r.output.splitlines() if line.strip()]
        assert r.exit_code == 2 and len(lines) == 1 and "holds a local path" in lines[0], r.output
        assert not out.exists()
    from costmodels.catalog import load_framework, no_local_path
    fw = Path(__file__).parents[2] / "costmodels" / "catalog" / "frameworks" / "megatron-core.yaml"
    (tmp_path / "fw.yaml").write_text(fw.read_text().replace("name: megatron-core", "name: C:\\Users\\a\\mcore", 1))
    with pytest.raises(SpecError, match="holds a local path"):
        load_framework(str(tmp_path / "fw.yaml"))
    for fine in ("GPT ~7B (x)", "H100/80GB", "A100 (40GB)", "llama 7B / 13B", "https://hf.co/meta/x"):
        assert no_local_path(fine, "name") == fine
    for path in ("~/m", "file:///home/a/m", "see /srv/models/x"):
        with pytest.raises(SpecError):
            no_local_path(path, "name")


@pytest.mark.parametrize("storage", ["host=db password=hunter2 dbname=x",
                                     "host=db password = 'hunter2 x' dbname=x",
                                     "dbname=x sslpassword=hunter2 sslkey=/home/alice/k.pem"])
def test_a_libpq_key_value_storage_string_keeps_its_password_off_stderr(tmp_path, storage):
    """The error line echoed 'cannot open Optuna storage 'host=db password=hunter2 ...''."""
    from planner.study import public_storage
    r = CliRunner().invoke(main, ["plan", "--model", "llama2-7b", "--cluster", "H100-SXM", "--gpus", "8",
                                  "--global-batch", "64", "--method", "optuna", "--storage", storage,
                                  "--out", str(tmp_path / "o")])
    assert r.exit_code == 2 and "hunter2" not in r.output and "alice" not in r.output, r.output
    assert "dbname=x" in r.output and "hunter2" not in public_storage(storage)
    _within(2, public_storage, "a" * 130_000 + " password=x")      # no retry at every letter of a long word


def _plan_then(monkeypatch, then):
    """api.plan as the CLI calls it, followed by `then(storage)`."""
    from planner import api
    real = api.plan

    def planned(*args, **kwargs):
        result = real(*args, **kwargs)
        then(kwargs["storage"])
        return result
    monkeypatch.setattr(api, "plan", planned)


OPTUNA_PLAN = ["plan", "--model", "llama2-7b", "--cluster", "H100-SXM", "--gpus", "8", "--global-batch", "64",
               "--method", "optuna", "--trials", "20"]


@pytest.mark.parametrize("other", ["trial", "trial-without-worker", "study", None])
def test_ctrl_c_keeps_a_new_study_file_another_run_shares(tmp_path, monkeypatch, other):
    """Two runs with the same --out share the new default study file; Ctrl-C on one deleted it under
    the other (its trials, a trial it had not yet marked, or a study it had created). A file holding
    only this run's study and trials is still removed."""
    import optuna

    def other_run_then_ctrl_c(storage):
        (name,) = optuna.get_all_study_names(storage)
        study = optuna.load_study(study_name=name, storage=storage)
        if other == "trial":
            study.ask().set_user_attr("worker", "otherhost:4242")
        elif other == "trial-without-worker":
            study.tell(study.ask(), [1.0] * len(study.directions))
        elif other == "study":
            optuna.create_study(study_name="another", storage=storage)
        raise KeyboardInterrupt
    _plan_then(monkeypatch, other_run_then_ctrl_c)
    r = CliRunner().invoke(main, OPTUNA_PLAN + ["--out", str(tmp_path / "job")])
    assert r.exit_code != 0 and not (tmp_path / "job").exists()
    assert (tmp_path / "job.optuna.db").exists() == (other is not None)


def test_a_study_file_a_failed_run_left_empty_is_removed(tmp_path, monkeypatch):
    """A full disk ended the run with a SpecError naming the study file, and the 0-byte file stayed:
    that path skipped the clean-up the other failures get."""
    db = tmp_path / "job.optuna.db"

    def disk_full(storage):
        db.write_bytes(b"")
        raise SpecError(f"--storage 'sqlite:///{db.name}': database or disk is full; free some space")
    _plan_then(monkeypatch, disk_full)
    r = CliRunner().invoke(main, ["plan", "--model", "llama2-7b", "--cluster", "H100-SXM", "--gpus", "8",
                                  "--global-batch", "64", "--method", "optuna", "--trials", "5",
                                  "--out", str(tmp_path / "job")])
    assert r.exit_code == 2 and "disk is full" in r.output, r.output
    assert not db.exists()


def test_auto_scores_the_lattice_when_the_cross_rules_leave_few_layouts():
    """Eleven --seq-len and 33 --recompute-layers values combine to 13 M layouts before the cross
    rules and 171 K after: auto took an Optuna study (3,000 trials, minutes, 296 layouts scored) where
    the lattice scores all of them in seconds."""
    from planner import api
    from planner.search import EXPAND_LIMIT, LATTICE_LIMIT, choose_method
    r = api.plan("llama2-7b", "H100-SXM", gpus=64, global_batch=512,
                 seq_lens=[1024, 1536, 2048, 2560, 3072, 3584, 4096, 5120, 6144, 7168, 8192],
                 choices={"recompute_layers": list(range(33))})
    assert r.method == "lattice" and r.checked > LATTICE_LIMIT and r.lattice == r.scored < LATTICE_LIMIT
    assert choose_method("auto", 2 * LATTICE_LIMIT, False, lambda: 2 * LATTICE_LIMIT) == "optuna"
    assert choose_method("auto", EXPAND_LIMIT + 1, False, lambda: 1) == "optuna"
    assert choose_method("auto", 10, True, lambda: 1) == "optuna"
