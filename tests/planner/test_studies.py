"""Optuna studies: no endless search, workers that share a study, no secrets or local paths in outputs."""
import json
import os
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import optuna
import pytest
from click.testing import CliRunner

import planner
from costmodels.errors import SpecError
from planner.cli import main
from planner.study import make_storage, public_storage

ROOT = Path(__file__).resolve().parents[2]
ARGS = ["plan", "--model", "gpt-1.7b", "--cluster", "H100-SXM", "--gpus", "8", "--global-batch", "64",
        "--quiet", "--method", "optuna"]
KW = dict(gpus=8, global_batch=64, method="optuna")
PG = os.environ.get("PLANNER_TEST_POSTGRES")


@pytest.fixture(autouse=True)
def private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))


def one_error_line(r):
    assert r.exit_code == 2, (r.output, r.stderr)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert "Traceback" not in r.output
    return lines[0]


# ---- endless search --------------------------------------------------------------------------------

def test_resuming_with_another_number_of_objectives_is_refused(tmp_path):
    storage = f"sqlite:///{tmp_path / 's.db'}"
    common = ARGS + ["--storage", storage, "--study-name", "s", "--trials", "20"]
    assert CliRunner().invoke(main, common + ["--objective", "time"]).exit_code == 0
    line = one_error_line(CliRunner().invoke(main, common + ["--objective", "time,memory"]))
    assert "created for --objective time" in line and "--study-name" in line
    study = optuna.load_study(study_name="s", storage=storage)
    assert [t.state for t in study.trials].count(optuna.trial.TrialState.FAIL) == 0


def test_resuming_with_other_inputs_is_refused(tmp_path):
    storage = f"sqlite:///{tmp_path / 's.db'}"
    planner.plan("gpt-1.7b", "H100-SXM", trials=20, storage=storage, study_name="s", **KW)
    with pytest.raises(SpecError, match="created for other inputs"):
        planner.plan("gpt-1.7b", "H100-SXM", trials=20, storage=storage, study_name="s",
                     **{**KW, "gpus": 16})
    with pytest.raises(SpecError, match="created for other inputs"):
        planner.plan("gpt-1.7b", "H100-SXM", trials=20, storage=storage, study_name="s", total_tokens=1e9, **KW)
    again = planner.plan("gpt-1.7b", "H100-SXM", trials=30, storage=storage, study_name="s", **KW)
    assert again.study["completed"] == 30           # the same inputs resume


def test_a_study_not_made_by_the_planner_is_refused(tmp_path):
    storage = f"sqlite:///{tmp_path / 's.db'}"
    optuna.create_study(study_name="foreign", storage=storage)
    with pytest.raises(SpecError, match="another program or an older planner"):
        planner.plan("gpt-1.7b", "H100-SXM", trials=20, storage=storage, study_name="foreign", **KW)


@pytest.mark.parametrize("tokens", ["nan", "inf", "-1", "-inf"])
def test_nonsense_token_budgets_are_refused_before_searching(tmp_path, tokens):
    line = one_error_line(CliRunner().invoke(main, ARGS + ["--tokens", tokens, "--trials", "20"]))
    assert "tokens" in line and "nan B" not in line


def test_trials_that_keep_failing_stop_the_search(monkeypatch):
    import planner.optuna_search as search

    monkeypatch.setattr(search, "objective_values", lambda o, batch, *a: np.full(len(batch), np.nan))
    with pytest.raises(SpecError, match="estimated trials failed"):
        planner.plan("gpt-1.7b", "H100-SXM", trials=1000, storage=None, **KW)


# ---- shared studies ----------------------------------------------------------------------------------

def run_workers(storage, name, n=3, trials=90):
    args = [sys.executable, "-m", "planner.cli"] + ARGS + ["--storage", storage, "--study-name", name,
                                                           "--trials", str(trials), "--json"]
    procs = [subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(n)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0] * n, [o[1][-2000:] for o in outs]
    return [json.loads(o[0]) for o in outs]


def check_shared_study(storage, name, workers, trials):
    study = optuna.load_study(study_name=name, storage=storage)
    states = Counter(t.state for t in study.trials)
    complete = states[optuna.trial.TrialState.COMPLETE]
    # The target, overshot by at most the trials in flight when the workers last looked (one each).
    assert trials <= complete <= trials + workers, states
    assert set(states) == {optuna.trial.TrialState.COMPLETE}, states          # nothing failed or stuck
    # Seed layouts are enqueued once, by the worker that created the study.
    fixed = [json.dumps(t.system_attrs["fixed_params"], sort_keys=True) for t in study.trials
             if "fixed_params" in t.system_attrs]
    assert fixed and len(fixed) == len(set(fixed))
    # Every worker ran trials, each with its own seed: their random start-up samples differ.
    by_worker = {}
    for t in sorted(study.trials, key=lambda t: t.number):
        if "fixed_params" not in t.system_attrs:
            by_worker.setdefault(t.user_attrs["worker"], []).append(json.dumps(t.params, sort_keys=True))
    assert len(by_worker) >= 2           # a worker that started late may find the target reached
    starts = [tuple(v[:5]) for v in by_worker.values()]
    assert len(set(starts)) == len(starts), "two workers sampled the same sequence (same seed)"
    # Duplicated parameter sets: no more than a single worker's own TPE repeats would explain.
    params = [json.dumps(t.params, sort_keys=True) for t in study.trials]
    assert len(params) - len(set(params)) < complete // 2


def test_three_workers_share_one_sqlite_study(tmp_path):
    storage = f"sqlite:///{tmp_path / 'shared.db'}"
    outs = run_workers(storage, "shared")
    check_shared_study(storage, "shared", 3, 90)
    assert all(o["search"]["study"]["storage"] == "sqlite:///shared.db" for o in outs)


@pytest.mark.skipif(not PG, reason="no PostgreSQL (scripts/postgres.sh)")
def test_three_workers_share_one_postgres_study():
    name = f"shared-{os.getpid()}-{time.time_ns()}"
    run_workers(PG, name)
    check_shared_study(PG, name, 3, 90)


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")
def test_stale_running_trials_are_failed_on_resume(tmp_path):
    """A worker killed with kill -9 leaves its trials RUNNING; once their heartbeat is older than the
    grace period the next worker fails them, and the study reaches its target in complete trials."""
    db = tmp_path / "s.db"
    storage = f"sqlite:///{db}"
    planner.plan("gpt-1.7b", "H100-SXM", trials=20, storage=storage, study_name="s", **KW)
    store = make_storage(optuna, storage)
    study = optuna.load_study(study_name="s", storage=store)
    orphans = [study.ask() for _ in range(3)]
    for t in orphans:
        store.record_heartbeat(t._trial_id)
    store.engine.dispose()
    with sqlite3.connect(db) as con:       # the killed worker was last heard of long ago
        con.execute("UPDATE trial_heartbeats SET heartbeat = '2000-01-01 00:00:00'")
    result = planner.plan("gpt-1.7b", "H100-SXM", trials=40, storage=storage, study_name="s", **KW)
    study = optuna.load_study(study_name="s", storage=storage)
    states = Counter(t.state for t in study.trials)
    assert states[optuna.trial.TrialState.RUNNING] == 0
    assert states[optuna.trial.TrialState.FAIL] == 3
    assert states[optuna.trial.TrialState.COMPLETE] == 40 == result.study["completed"]


def test_a_trial_finished_elsewhere_is_not_told_twice(tmp_path):
    """Two workers told the same trial: the search's tell (planner/optuna_search.py `_tell`) skips a
    trial another worker finished, for a finite value and for a failed (non-finite) one, instead of
    raising 'Cannot tell a COMPLETE trial'."""
    from planner.optuna_search import _tell
    storage = f"sqlite:///{tmp_path / 's.db'}"
    study = optuna.create_study(study_name="s", storage=storage)
    trials = [study.ask(), study.ask()]
    for t in trials:                                   # the other worker finishes both first
        study.tell(t.number, 2.0)
    with pytest.raises(ValueError, match="Cannot tell a COMPLETE trial"):
        study.tell(trials[1].number, state=optuna.trial.TrialState.FAIL)     # what the old code did
    failed, worked = _tell(optuna, study, trials, [[1.0], [float("nan")]], broken=[0, 0], excess=[0.0, 0.0],
                           evaluated={0, 1}, two=False)
    assert (failed, worked) == (1, 1)
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.COMPLETE] * 2
    assert [t.value for t in study.trials] == [2.0, 2.0]


# ---- secrets and local paths ----------------------------------------------------------------------

@pytest.mark.parametrize("url,shown", [
    ("postgresql://user:secret@db-host:5432/optuna", "postgresql://user:***@db-host:5432/optuna"),
    ("postgresql+psycopg://user:s%40cret@db/optuna?sslmode=require&password=x",
     "postgresql+psycopg://user:***@db/optuna?sslmode=require&password=***"),
    ("postgresql://user@db-host/optuna", "postgresql://user@db-host/optuna"),
    ("sqlite:////home/alice/project/job.optuna.db", "sqlite:///job.optuna.db"),
    ("sqlite:///relative/dir/x.db", "sqlite:///x.db"),
    (None, "in-memory"),
    ("user:secret@db-host", "user:***@db-host"),           # no scheme: was shown whole
    ("alice:p@ss@host/db", "alice:***@host/db"),           # an @ in the password
    ("host/db", "host/db"),
])
def test_storage_urls_are_shown_without_secrets_or_local_paths(url, shown):
    assert public_storage(url) == shown


def test_error_messages_keep_the_url_shape_and_hide_the_password():
    from planner.study import _first_line
    url = "postgresql://alice:pw@db.example.com:5432/optuna"
    assert _first_line(Exception(f"could not connect to {url}"), url) == \
        "could not connect to postgresql://alice:***@db.example.com:5432/optuna"
    assert _first_line(Exception("bad 'alice:p@ss@host/db'"), "alice:p@ss@host/db") == "bad 'alice:***@host/db'"


def test_a_storage_url_without_scheme_keeps_its_password_off_stderr():
    r = CliRunner().invoke(main, ARGS + ["--trials", "5", "--storage", "user:SECRET9@host"])
    assert r.exit_code == 2 and "error: cannot open Optuna storage 'user:***@host'" in r.stderr
    assert "SECRET9" not in r.output + r.stderr


def test_default_sqlite_storage_leaves_no_local_path_in_any_output(tmp_path):
    out = tmp_path / "job"
    r = CliRunner().invoke(main, ARGS + ["--trials", "20", "--out", str(out), "--json"])
    assert r.exit_code == 0, r.output
    assert str(tmp_path) not in r.stdout
    assert json.loads(r.stdout)["search"]["study"]["storage"] == "sqlite:///job.optuna.db"
    for f in out.iterdir():
        assert str(tmp_path).encode() not in f.read_bytes(), f.name
        assert os.path.expanduser("~").encode() + b"/" not in f.read_bytes(), f.name


def test_unreachable_storage_error_hides_the_password():
    pytest.importorskip("psycopg")
    line = one_error_line(CliRunner().invoke(main, ARGS + ["--storage",
                                                           "postgresql://user:hunter2@127.0.0.1:1/db"]))
    assert "hunter2" not in line and "cannot open Optuna storage" in line


def test_an_sqlite_file_that_cannot_be_opened_says_what_would_fix_it(tmp_path, monkeypatch):
    """SQLite's own words ("unable to open database file") named neither the cause nor the fix: a missing
    or read-only directory (SQLite writes a journal beside the file)."""
    line = one_error_line(CliRunner().invoke(main, ARGS + ["--storage", f"sqlite:///{tmp_path}/missing/x.db"]))
    assert "the folder 'missing' that should hold the SQLite file does not exist; create it" in line
    assert str(tmp_path) not in line
    (tmp_path / "afile").write_text("")
    line = one_error_line(CliRunner().invoke(main, ARGS + ["--storage", f"sqlite:///{tmp_path}/afile/x.db"]))
    assert "'afile', which should be the folder holding the SQLite file, is a file" in line   # was: "does not exist"
    (tmp_path / "ro").mkdir()
    os.chmod(tmp_path / "ro", 0o555)
    try:
        if os.access(tmp_path / "ro", os.W_OK):
            # root may write in a 0555 folder (and CI may run as root): SQLite's own refusal, emulated
            import optuna
            import sqlalchemy.exc

            def refuse(url, *a, **k):
                raise sqlalchemy.exc.OperationalError("connect", {}, Exception("unable to open database file"))
            monkeypatch.setattr(optuna.storages, "RDBStorage", refuse)
        line = one_error_line(CliRunner().invoke(main, ARGS + ["--storage", f"sqlite:///{tmp_path}/ro/x.db"]))
        assert "unable to open database file" in line and "its directory writable" in line
        assert str(tmp_path) not in line
    finally:
        os.chmod(tmp_path / "ro", 0o755)


@pytest.mark.skipif(not PG, reason="no PostgreSQL (scripts/postgres.sh)")
def test_postgres_password_is_not_written(tmp_path):
    url = PG.replace("postgres@", "postgres:hunter2@", 1)       # trust authentication ignores it
    out = tmp_path / "job"
    name = f"secret-{os.getpid()}-{time.time_ns()}"
    r = CliRunner().invoke(main, ARGS + ["--trials", "20", "--storage", url, "--study-name", name, "--out",
                                         str(out), "--json"])
    assert r.exit_code == 0, r.output
    assert "hunter2" not in r.stdout
    for f in out.iterdir():
        assert b"hunter2" not in f.read_bytes(), f.name


def test_seeds_are_queued_before_other_workers_may_start(tmp_path, monkeypatch):
    """A flaky run of test_three_workers_share_one_sqlite_study left 13 seed trials WAITING: the
    creating worker set the fingerprint the others wait for before it queued the seeds, so under
    load the others reached the target first. The seeds now go in first."""
    from planner import study as S

    seen = []
    real = optuna.study.Study.set_user_attr

    def spy(self, key, value):
        if key == S.FINGERPRINT_ATTR:
            seen.append(len(self.get_trials(deepcopy=False)))
        return real(self, key, value)

    monkeypatch.setattr(optuna.study.Study, "set_user_attr", spy)
    seeds = [{"tp": 1}, {"tp": 2}, {"tp": 4}]
    S.open_study(optuna, "s", f"sqlite:///{tmp_path / 's.db'}", optuna.samplers.RandomSampler(seed=0),
                 ("time",), "fp", seeds=seeds)
    assert seen == [len(seeds)]
