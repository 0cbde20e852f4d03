"""Review of the round-9 fixes (2026-11-24): a PostgreSQL password before a query with no database
name reached plan.json and stdout; a raw '@' in a password sent the rest of it to the server as the
host name (and into its error); whole-number and number options took '1_6' (16) and other scripts'
digits. Each test failed before its fix."""
import pytest
from click.testing import CliRunner

from planner.cli import main
from planner.study import public_storage

OPTUNA = ["plan", "--model", "gpt-1.7b", "--cluster", "H100-SXM", "--gpus", "8", "--global-batch", "64",
          "--method", "optuna", "--trials", "5", "-q"]


def run(*argv):
    return CliRunner().invoke(main, [str(a) for a in argv])


@pytest.mark.parametrize("url, shown", [
    ("postgresql://pv:S3CRETplain@127.0.0.1:54329?sslmode=disable", "postgresql://pv:***@127.0.0.1:54329?sslmode=disable"),
    ("postgresql://pv:S3CRETplain@host&x/db", "postgresql://pv:***@host&x/db"),
    ("postgresql://pv:ab@S3CRETplain@127.0.0.1:54329/optv", "postgresql://pv:***@127.0.0.1:54329/optv"),
    ("postgresql://u:pa/ss?w@h/db?user=a@b.com", "postgresql://u:***@h/db?user=a%40b.com"),
])
def test_public_storage_hides_the_password(url, shown):
    assert public_storage(url) == shown
    assert "S3CRET" not in public_storage(url) and "pa/ss" not in public_storage(url)


def test_a_query_email_is_not_taken_for_credentials():
    assert public_storage("postgresql://h/db?user=a@b.com") == "postgresql://h/db?user=a%40b.com"


def test_raw_at_in_a_password_is_refused_without_any_of_it(tmp_path):
    r = run(*OPTUNA, "--study-name", "x", "--storage", "postgresql://pv:ab@S3CRETHOST@127.0.0.1:1/optv",
            "--out", tmp_path / "out")
    assert r.exit_code == 2, r.output
    assert "%40" in r.stderr and "S3CRETHOST" not in r.output + r.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("option, value", [("--gpus", "1_6"), ("--gpus", "８"), ("--gpus", "٨"),
                                           ("--global-batch", "6_4"), ("--top", "1_0"), ("--seed", "1_0"),
                                           ("--tokens", "1_0e9"), ("--tokens", "２e9")])
def test_number_options_take_ascii_digits_only(option, value, tmp_path):
    argv = ["plan", "--model", "gpt-1.7b", "--cluster", "H100-SXM", "--gpus", "8", "--global-batch", "64",
            "--out", tmp_path / "out", "-q"]
    at = argv.index(option) + 1 if option in argv else None
    if at:
        argv[at] = value
    else:
        argv += [option, value]
    r = run(*argv)
    assert r.exit_code == 2, r.output
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "ASCII digits" in lines[0] and option in lines[0], r.stderr
    assert not (tmp_path / "out").exists()


def test_plain_ascii_numbers_still_work(tmp_path):
    r = run("plan", "--model", "gpt-1.7b", "--cluster", "H100-SXM", "--gpus", "+8", "--global-batch", " 64",
            "--tokens", "2E9", "--out", tmp_path / "out", "-q")
    assert r.exit_code == 0, r.output
