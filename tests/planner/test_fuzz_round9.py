"""Inputs fuzzing round 9 (2026-11-24, Optuna storage, option lists, config.json, emitted scripts):
each test failed before its fix."""
import json
import os
import sqlite3
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from planner.cli import main

OPTUNA = ["plan", "--model", "gpt-1.7b", "--cluster", "H100-SXM", "--gpus", "8", "--global-batch", "64",
          "--method", "optuna", "--trials", "5", "-q"]


def run(*argv, env=None):
    return CliRunner(env=env).invoke(main, [str(a) for a in argv])


def one_error(r, fragment):
    assert r.exit_code == 2, (r.exit_code, r.output)
    assert r.exception is None or isinstance(r.exception, SystemExit)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and fragment in lines[0], r.stderr
    return lines[0]


def foreign_db(path: Path) -> Path:
    con = sqlite3.connect(path)
    con.execute("create table customers(name text)")
    con.commit()
    con.close()
    return path


def tables(path: Path) -> set:
    con = sqlite3.connect(path)
    try:
        return {r[0] for r in con.execute("select name from sqlite_master where type = 'table'")}
    finally:
        con.close()


@pytest.mark.parametrize("name,url", [("my data.db", "my%20data.db"), ("y.db#1", "y.db#1")])
def test_a_users_database_behind_an_escaped_name_is_refused(tmp_path, name, url):
    """The check read the URL's raw path while SQLAlchemy decodes %20 and keeps '#': Optuna's 13 tables
    were added to a user's own database (and it was switched to WAL mode)."""
    db = foreign_db(tmp_path / name)
    one_error(run(*OPTUNA, "--storage", f"sqlite:///{tmp_path}/{url}"), "holds tables Optuna did not make")
    assert tables(db) == {"customers"}
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]            # no stray 'y.db' beside it


def test_sqlite_uri_file_names_are_refused(tmp_path):
    """sqlite:///file:x.db?uri=true opened another file than the one checked."""
    foreign_db(tmp_path / "plain.db")
    one_error(run(*OPTUNA, "--storage", f"sqlite:///file:{tmp_path}/plain.db?uri=true"),
              "SQLite URI file names (uri=true) are not taken")
    assert tables(tmp_path / "plain.db") == {"customers"}


def test_a_study_inside_out_is_refused_when_escaped(tmp_path):
    """sqlite:///job%2Fs.db got past the 'study inside --out' refusal."""
    job = tmp_path / "job"
    assert run(*OPTUNA[:9], "-q", "--out", job).exit_code == 0
    one_error(run(*OPTUNA, "--out", job, "--force", "--storage", f"sqlite:///{tmp_path}/job%2Fs.db"),
              "puts the Optuna study inside --out")


def test_the_default_study_file_beside_out_is_named_after_out(tmp_path):
    """The default study URL pasted the --out path unescaped: --out 'job?x' studied in a file 'job'."""
    out = tmp_path / "job?x"
    r = run(*OPTUNA, "--out", out)
    assert r.exit_code == 0, r.output
    assert (tmp_path / "job?x.optuna.db").is_file() and not (tmp_path / "job").exists()
    assert json.loads((out / "plan.json").read_text())["search"]["study"]["storage"] == \
        "sqlite:///job%3Fx.optuna.db"


def test_an_sqlite_url_with_a_password_is_not_echoed(tmp_path):
    """sqlite://fz:hunter2@db-host/optuna was echoed whole and called an in-memory database."""
    line = one_error(run(*OPTUNA, "--storage", "sqlite://fz:hunter2@db-host/optuna"),
                     "an SQLite URL takes a file, not a user, password or host")
    assert "hunter2" not in line


def test_a_unix_socket_folder_is_not_recorded():
    """A PostgreSQL socket folder (host=/var/run/...) reached plan.json as a local path."""
    from planner.study import public_storage
    shown = public_storage("postgresql://u@/db?host=/tmp/x/pgdata&password=pw&sslmode=require")
    assert "pgdata" not in shown and "tmp" not in shown and "pw" not in shown and "sslmode=require" in shown


def test_too_long_a_study_path_says_so(tmp_path):
    """A study file beside an --out over 512 bytes failed as 'unable to open database file; ... needs
    the file and its directory writable', which it was."""
    deep = tmp_path / ("a" * 200) / ("b" * 200) / ("c" * 200)
    deep.mkdir(parents=True)
    one_error(run(*OPTUNA, "--out", deep / "job"), "SQLite opens paths of at most 512")


def test_fewer_gpus_per_node_shrink_a_node_local_nvlink_domain():
    """64 H100 as 16 nodes of 4 kept the 8-GPU NVLink domain: tp 8 across two nodes was priced at
    NVLink speed. A rack-scale domain (GB200 NVL72) spans nodes and is kept."""
    from costmodels import catalog
    assert catalog.load_cluster("H100-SXM", num_gpus=64, gpus_per_node=4).nvlink_domain == 4
    assert catalog.load_cluster("H100-SXM", num_gpus=64).nvlink_domain == 8
    assert catalog.load_cluster({"gpu": "H100-SXM", "num_gpus": 64, "gpus_per_node": 4,
                                 "nvlink_domain": 8}).nvlink_domain == 8          # said so: kept
    assert catalog.load_cluster("GB200", num_gpus=64).nvlink_domain == 72


def test_a_zero_stage_list_with_an_impossible_stage_is_refused(tmp_path):
    """--zero 1,4 planned with the 4 dropped silently (--zero 4 alone was refused)."""
    one_error(run(*OPTUNA[:9], "--zero", "1,4", "--out", tmp_path / "job"), "--zero must be 3 or less, got 4")


def test_a_config_json_without_its_ffn_width_is_refused(tmp_path):
    """A Llama config.json without intermediate_size was planned with 4 x hidden (Hugging Face's
    LlamaConfig default is 11008); vocab_size null said 'vocab must be a positive integer, got 0'."""
    base = {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, "num_hidden_layers": 32,
            "intermediate_size": 11008, "vocab_size": 32000, "hidden_act": "silu", "max_position_embeddings": 4096}
    for drop, fragment in (("intermediate_size", "missing 'intermediate_size'"), ("vocab_size", "missing 'vocab_size'")):
        cfg = tmp_path / drop / "config.json"
        cfg.parent.mkdir()
        cfg.write_text(json.dumps({**base, drop: None}))
        one_error(run("plan", "--model", cfg, "--cluster", "H100-SXM", "--gpus", "8", "--global-batch", "64"),
                  fragment)


@pytest.mark.parametrize("price", ["2.5e", "2.5 USD/h"])
def test_a_price_with_a_currency_that_is_not_one_is_refused(tmp_path, price):
    """'2.5e' was 2.5 in currency 'e' ('5.', 5 in currency '.', is refused as a cut amount since round 11:
    test_fuzz_round11.py)."""
    one_error(run(*OPTUNA[:9], "--price-per-gpu-hour", price, "--out", tmp_path / "job"),
              "the currency must be a name of letters")


def test_the_time_to_train_hint_gives_a_budget_that_works():
    """The warning said 'give --tokens (e.g. 2T)', which --tokens refuses."""
    r = run(*OPTUNA[:9], "--objective", "time-to-train")
    assert r.exit_code == 0 and "--tokens (e.g. 2e12)" in r.output, r.output
    assert run(*OPTUNA[:9], "--tokens", "2e12").exit_code == 0


def test_a_resumed_study_notice_is_printable(tmp_path):
    """The 'resumed study' notice printed a model name's terminal escape raw on stderr."""
    m = tmp_path / "m.yaml"
    m.write_text('name: "ev\\e]0;PWNED\\aX"\nnum_layers: 4\nhidden_size: 512\nnum_attention_heads: 8\n'
                 "vocab_size: 32000\nseq_length: 1024\n")
    args = ["plan", "--model", m, "--cluster", "H100-SXM", "--gpus", "8", "--global-batch", "32", "--method",
            "optuna", "--trials", "5", "--storage", f"sqlite:///{tmp_path}/s.db"]
    assert run(*args).exit_code == 0
    r = run(*args)
    assert r.exit_code == 0 and "resumed study" in r.stderr, r.output
    assert "\x1b" not in r.stderr and "\x07" not in r.stderr


def test_scripts_in_a_folder_whose_name_starts_with_a_dash_find_their_folder(tmp_path):
    """`bash -- -job/launch.sh` ran dirname on '-job/...' as an option: the parent folder's hostfile
    and ds_config.json were used and probe.sh wrote its logs into the parent. An exported CDPATH made
    cd print the folder into SCRIPT_DIR."""
    job = tmp_path / "-job"
    r = CliRunner().invoke(main, OPTUNA[:9] + ["--probe", "1", "--out", str(job)])
    assert r.exit_code == 0, r.output
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "deepspeed"
    fake.write_text('#!/bin/sh\necho "DS $*"\n')
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "CDPATH": "/usr"}
    out = subprocess.run(["bash", "--", "-job/launch.sh"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert f"--deepspeed_config {job}/ds_config.json" in out.stdout, out.stdout + out.stderr
    subprocess.run(["bash", "--", "-job/probe.sh"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert (job / "probe" / "1.log").is_file() and not (tmp_path / "probe").exists()


@pytest.mark.parametrize("option,value,fragment", [
    ("--tp", "1_0", "--tp takes whole numbers, got '1_0'"),
    ("--mbs", "0_8", "--mbs takes whole numbers, got '0_8'"),
    ("--seq-len", "1_024", "--seq-len takes whole numbers separated by commas, got '1_024'"),
    ("--objective", "time,", "has an empty item"),
    ("--objective", ",time", "has an empty item"),
])
def test_number_and_list_forms_python_reads_but_no_one_writes_are_refused(tmp_path, option, value, fragment):
    """int() read '1_0' as 10 and '0_8' as 8; --objective 'time,' was taken while --tp 1,,2 is refused."""
    one_error(run(*OPTUNA[:9], option, value, "--out", tmp_path / "job"), fragment)
