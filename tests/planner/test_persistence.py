"""Nothing lost: interrupted writes, resumable Optuna studies, several workers on PostgreSQL."""
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

import planner

PLAN = [sys.executable, "-m", "planner.cli", "plan", "--model", "gpt-1.7b", "--cluster", "H100-SXM",
        "--gpus", "8", "--global-batch", "64", "--quiet"]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def private_cache(tmp_path_factory, monkeypatch):
    """Studies without --out go to ~/.cache; keep each test's own (outside the output's folder)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))


# The plan command with every file write slowed down (the writer patched in the child process), so a
# test can interrupt it half-way through the temporary directory.
SLOW_PLAN = [sys.executable, "-c",
             "import sys, time; import planner.emit.writer as w; from planner.cli import main; "
             "pause = float(sys.argv.pop(1)); write = w._write_file; "
             "w._write_file = lambda *a: (time.sleep(pause), write(*a))[1]; sys.exit(main())"]


def slow_plan(pause: float, args):
    """PLAN's command line run with a `pause` in seconds before each file the writer writes."""
    return SLOW_PLAN + [str(pause)] + PLAN[3:] + list(args)


def run(args, env=None, **kw):
    return subprocess.run(args, cwd=ROOT, env={**os.environ, **(env or {})}, capture_output=True, text=True, **kw)


def snapshot(d: Path):
    return {p.name: p.read_bytes() for p in d.iterdir()} if d.exists() else None


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT])
def test_interrupted_write_leaves_the_old_output_whole(tmp_path, sig):
    out = tmp_path / "job"
    assert run(PLAN + ["--out", str(out)]).returncode == 0
    old = snapshot(out)
    proc = subprocess.Popen(slow_plan(0.5, ["--out", str(out), "--force", "--tp", "2"]), cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline and not any(p.name.endswith(".tmp") for p in tmp_path.iterdir()):
        time.sleep(0.05)
    time.sleep(0.7)                                   # a couple of files written into the temporary dir
    assert proc.poll() is None, "the write finished before it could be interrupted"
    proc.send_signal(sig)
    proc.wait(timeout=30)
    assert snapshot(out) == old                       # the old plan, complete and unchanged
    if sig != signal.SIGKILL:                         # a clean stop also removes its temporary files
        assert [p.name for p in tmp_path.iterdir()] == ["job"]


def test_a_killed_write_leaves_no_temporary_folder_behind_the_next_run(tmp_path):
    out = tmp_path / "job"
    proc = subprocess.Popen(slow_plan(0.5, ["--out", str(out)]), cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline and not any(p.name.endswith(".tmp") for p in tmp_path.iterdir()):
        time.sleep(0.05)
    proc.kill()
    proc.wait(timeout=30)
    assert any(p.name.endswith(".tmp") for p in tmp_path.iterdir())      # kill -9 cannot clean up
    assert not out.exists()
    assert run(PLAN + ["--out", str(out)]).returncode == 0
    assert [p.name for p in tmp_path.iterdir()] == ["job"]               # the next run removed it


def test_two_writers_without_force_cannot_both_win(tmp_path):
    """The existence check and the rename are one step (renameat2 RENAME_NOREPLACE): of two runs that
    both found --out missing, one writes it and the other says it exists; nothing is mixed."""
    out = tmp_path / "job"
    procs = [subprocess.Popen(slow_plan(0.3, ["--out", str(out), "--tp", str(tp)]), cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for tp in (1, 2)]
    outs = [p.communicate(timeout=120) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 2], outs
    loser = outs[[p.returncode for p in procs].index(2)][1]
    assert loser.startswith("error: ") and "already exists" in loser and len(loser.splitlines()) == 1
    winner_tp = (1, 2)[[p.returncode for p in procs].index(0)]
    assert json.loads((out / "plan.json").read_text())["layout"]["tp"] == winner_tp
    assert [p.name for p in tmp_path.iterdir()] == ["job"]


def test_publish_refuses_an_existing_target(tmp_path):
    from costmodels.errors import SpecError
    from planner.emit.writer import _publish_new

    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    (src / "a").write_text("new")
    dst.mkdir()
    (dst / "b").write_text("old")
    with pytest.raises(SpecError, match="already exists"):
        _publish_new(src, dst, "dst")
    assert (dst / "b").read_text() == "old" and (src / "a").exists()


def test_the_writer_has_no_environment_pause(tmp_path, monkeypatch):
    """The old PLANNER_WRITE_PAUSE_S test hook is gone: a write never sleeps, whatever the environment."""
    import planner.emit.writer as writer

    def no_sleep(seconds):
        raise AssertionError(f"the writer slept {seconds} s")

    monkeypatch.setenv("PLANNER_WRITE_PAUSE_S", "30")
    monkeypatch.setattr(time, "sleep", no_sleep)
    writer.write_files({"a.txt": b"a", "sub/b.txt": b"b"}, tmp_path / "out")
    assert (tmp_path / "out" / "sub" / "b.txt").read_bytes() == b"b"


def test_completed_write_replaces_the_output_whole(tmp_path):
    out = tmp_path / "job"
    assert run(PLAN + ["--out", str(out)]).returncode == 0
    assert run(PLAN + ["--out", str(out), "--force", "--tp", "2"]).returncode == 0
    data = json.loads((out / "plan.json").read_text())
    assert data["layout"]["tp"] == 2
    assert {"launch.sh", "ds_config.json", "plan.json", "report.md"} <= set(snapshot(out))


def test_optuna_study_persists_and_resumes(tmp_path):
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    kw = dict(gpus=8, global_batch=256, method="optuna", storage=storage, study_name="resume-me", seed=3)
    first = planner.plan("llama2-7b", "H100-SXM", trials=60, **kw)
    assert first.study["resumed_from"] == 0
    second = planner.plan("llama2-7b", "H100-SXM", trials=100, **kw)
    assert second.study["resumed_from"] >= 60            # continued, not started over
    study = optuna.load_study(study_name="resume-me", storage=storage)
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(complete) == 100
    assert per_token(second) <= per_token(first)


def per_token(r):
    return r.best.estimate.step_time_s / r.best.estimate.tokens_per_step


def test_default_storage_is_sqlite_next_to_the_output(tmp_path):
    out = tmp_path / "job"
    r = run(PLAN + ["--out", str(out), "--method", "optuna", "--trials", "40", "--json"])
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["search"]["study"]["storage"] == "sqlite:///job.optuna.db"     # no local path recorded
    assert (tmp_path / "job.optuna.db").exists()


def test_progress_shows_trials_best_and_time_left(tmp_path):
    r = run(PLAN[:-1] + ["--method", "optuna", "--trials", "40", "--progress"])
    assert r.returncode == 0
    assert "40/40 trials" in r.stderr and "left" in r.stderr and "best" in r.stderr
    quiet = run(PLAN + ["--method", "optuna", "--trials", "40"])
    assert quiet.stderr == ""


@pytest.mark.skipif(not os.environ.get("PLANNER_TEST_POSTGRES"), reason="no PostgreSQL (scripts/postgres.sh)")
def test_several_workers_share_one_postgres_study():
    url = os.environ["PLANNER_TEST_POSTGRES"]
    name = f"workers-{os.getpid()}-{time.time_ns()}"
    args = PLAN + ["--method", "optuna", "--storage", url, "--study-name", name, "--trials", "240", "--json"]
    procs = [subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(3)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1] for o in outs]
    study = optuna.load_study(study_name=name, storage=url)
    states = [t.state for t in study.trials]
    complete = states.count(optuna.trial.TrialState.COMPLETE)
    assert complete >= 240                                  # the target was reached
    assert all(s == optuna.trial.TrialState.COMPLETE for s in states)   # none lost, failed or stuck
    assert len({t.number for t in study.trials}) == len(study.trials)
    # every worker reports a finite best of the shared study
    bests = [json.loads(o[0])["estimate"]["step_time_s"] for o in outs]
    assert len(bests) == len(procs) and all(math.isfinite(b) and b > 0 for b in bests)


@pytest.mark.parametrize("umask, files, script, folder", [(0o022, 0o644, 0o755, 0o755),
                                                          (0o077, 0o600, 0o700, 0o700)])
def test_the_job_folder_takes_the_users_umask(tmp_path, umask, files, script, folder):
    """The job folder and its files get the modes a plain write would: a user with umask 077 keeps
    the job private (it was always 0755 / 0644, readable by everyone on a shared login node)."""
    out = tmp_path / "job"
    done = subprocess.run(["sh", "-c", f'umask {umask:03o} && exec "$@"', "sh"] + PLAN + ["--out", str(out), "--probe", "1"],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert out.stat().st_mode & 0o777 == folder
    for p in out.rglob("*"):
        want = folder if p.is_dir() else script if p.suffix == ".sh" else files
        assert p.stat().st_mode & 0o777 == want, p.name


def test_force_over_a_read_only_earlier_job_leaves_nothing_behind(tmp_path, monkeypatch):
    """--force over a job the user made read-only (0555): the old job, moved aside, could not be
    deleted by a non-root user and stayed as a hidden .tmp folder without the marker that lets a later
    run clean it up. Non-root permissions are emulated here (root may delete in a 0555 folder)."""
    import shutil
    import stat as st

    from planner.emit import writer

    def as_non_root(real):
        def call(path, *args, dir_fd=None, **kw):
            parent = os.path.dirname(os.fsdecode(path)) if dir_fd is None else f"/proc/self/fd/{dir_fd}"
            if not os.stat(parent or ".").st_mode & st.S_IWUSR:
                raise PermissionError(13, "Permission denied", path)
            return real(path, *args, dir_fd=dir_fd, **kw) if dir_fd is not None else real(path, *args, **kw)
        return call

    (tmp_path).chmod(0o2775)                    # the user's folder: its mode must survive
    old = tmp_path / ".job.123.abc.tmp"
    old.mkdir()
    (old / "plan.json").write_text("{}")
    (old / "probe").mkdir()
    (old / "probe" / "x.json").write_text("{}")
    for d in (old / "probe", old):
        d.chmod(0o555)
    monkeypatch.setattr(os, "unlink", as_non_root(os.unlink))
    monkeypatch.setattr(os, "rmdir", as_non_root(os.rmdir))
    writer._remove_ours(old)
    assert not old.exists()
    assert tmp_path.stat().st_mode & 0o7777 == 0o2775
    # the old behaviour, for contrast: rmtree ignoring errors leaves it
    again = tmp_path / ".job.456.def.tmp"
    again.mkdir()
    (again / "plan.json").write_text("{}")
    again.chmod(0o555)
    shutil.rmtree(again, ignore_errors=True)
    assert again.exists()
    again.chmod(0o755)
