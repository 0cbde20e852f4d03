"""Review items left after round 10 (2026-11-24): a link to launch.sh used the files beside the link;
'5.' was refused as a currency '.' and '300 円' refused while explain rendered any currency an edited plan.json
held; a model file without its vocabulary size got no hint; --gpus-per-node did not shrink a bridged
PCIe pair or a cluster file's NVLink domain; SQLite URLs of the wrong shape and an over-long default
study path got messages that named other things. Each test failed before its fix."""
import json
import os
import subprocess

import pytest
from click.testing import CliRunner

from costmodels.catalog import load_cluster
from planner.cli import main

PLAN = ["plan", "--model", "gpt-1.7b", "--cluster", "H100-SXM", "--gpus", "8", "--global-batch", "64", "-q"]
OPTUNA = PLAN + ["--method", "optuna", "--trials", "5"]


def run(*argv):
    return CliRunner().invoke(main, [str(a) for a in argv])


def one_error(r, fragment):
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in r.output, r.output
    assert fragment in lines[0], lines[0]
    return lines[0]


def _fake_deepspeed(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "deepspeed"
    fake.write_text('#!/bin/sh\necho "DS $*"\n')
    fake.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


def test_a_link_to_the_scripts_runs_the_job_beside_the_target(tmp_path):
    """`ln -s job/launch.sh ~/run.sh; bash ~/run.sh` looked for ds_config.json and the hostfile beside
    the link, and probe.sh wrote its logs there."""
    job = tmp_path / "job"
    r = run(*PLAN, "--probe", "1", "--out", job)
    assert r.exit_code == 0, r.output
    links = tmp_path / "links"
    links.mkdir()
    (links / "run.sh").symlink_to(os.path.relpath(job / "launch.sh", links))     # relative target
    (tmp_path / "run2.sh").symlink_to(links / "run.sh")                            # a link to the link
    (links / "probe.sh").symlink_to(job / "probe.sh")
    env = _fake_deepspeed(tmp_path)
    out = subprocess.run(["bash", "run2.sh"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert f"--deepspeed_config {job}/ds_config.json" in out.stdout, out.stdout + out.stderr
    subprocess.run(["bash", str(links / "probe.sh")], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert (job / "probe" / "1.log").is_file() and not (links / "probe").exists()


@pytest.mark.parametrize("price, amount, currency", [
    (".5 EUR", 0.5, "EUR"), ("300 円", 300.0, "円"), ("5 元", 5.0, "元"), ("€2", 2.0, "EUR"),
])
def test_prices_float_reads_and_one_letter_currencies_are_taken(price, amount, currency):
    r = run(*PLAN, "--price-per-gpu-hour", price, "--json")
    assert r.exit_code == 0, r.output
    cost = json.loads(r.stdout)["cost"]
    assert (cost["price_per_gpu_hour"], cost["currency"]) == (amount, currency)


@pytest.mark.parametrize("price", ["2.5e", "2.5 USD/h", "5 x"])
def test_a_typo_is_still_no_currency(price):
    one_error(run(*PLAN, "--price-per-gpu-hour", price), "the currency must be")


@pytest.mark.parametrize("price", ["5.", "5. USD"])
def test_an_amount_cut_after_its_point_is_named_as_such(price):
    """'5.' (perhaps a cut '5.5') was refused as 'currency '.''."""
    line = one_error(run(*PLAN, "--price-per-gpu-hour", price), "the amount '5.' ends in a '.'")
    assert "currency" not in line


@pytest.mark.parametrize("where", ["cost", "cluster"])
def test_explain_refuses_a_currency_plan_would_refuse(tmp_path, where):
    job = tmp_path / "job"
    assert run(*PLAN, "--price-per-gpu-hour", "2.5 USD", "--out", job).exit_code == 0
    data = json.loads((job / "plan.json").read_text())
    target = data["cost"] if where == "cost" else data["inputs"]["cluster"]
    target["currency"] = "USD/h <b>x</b>"
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(data))
    line = one_error(run("explain", edited), "currency must be")
    assert "damaged" in line
    assert run("explain", job / "plan.json").exit_code == 0


def test_a_model_without_its_vocabulary_says_what_to_add(tmp_path):
    m = tmp_path / "m.yaml"
    m.write_text("name: x\nnum_layers: 4\nhidden_size: 512\nnum_attention_heads: 8\nseq_length: 1024\n")
    line = one_error(run(*PLAN[:1], "--model", m, *PLAN[3:]), "missing required field 'vocab'")
    assert "vocabulary size" in line and "vocab_size" in line and "add it" in line
    hf = tmp_path / "config.json"
    hf.write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 512,
                              "num_attention_heads": 8, "intermediate_size": 1024}))
    line = one_error(run(*PLAN[:1], "--model", hf, *PLAN[3:]), "missing 'vocab_size'")
    assert "vocabulary size" in line and "add it" in line


def test_smaller_nodes_shrink_an_nvlink_domain_inside_the_node(tmp_path):
    # the bridged pair of H100 PCIe cards, in nodes of one card, spanned two nodes
    assert load_cluster("H100-PCIe", num_gpus=8, gpus_per_node=1).nvlink_domain == 1
    assert load_cluster("H100-PCIe", num_gpus=6, gpus_per_node=3).nvlink_domain == 2
    # a cluster file of 8-GPU nodes with NVLink over the node, run as nodes of 4
    f = tmp_path / "c.yaml"
    f.write_text("gpu: H100-SXM\nnvlink_domain: 8\nnum_gpus: 16\n")
    assert load_cluster(f).nvlink_domain == 8
    assert load_cluster(f, gpus_per_node=4).nvlink_domain == 4
    # a domain the file itself makes larger than its nodes spans them (rack-scale NVLink), as GB200's
    rack = tmp_path / "rack.yaml"
    rack.write_text("gpu: H100-SXM\nnvlink_domain: 8\ngpus_per_node: 4\nnum_gpus: 16\n")
    assert load_cluster(rack, gpus_per_node=2).nvlink_domain == 8
    assert load_cluster("GB200", num_gpus=8, gpus_per_node=4).nvlink_domain == 72


def test_a_pcie_node_of_one_card_plans_no_tp_over_the_bridge():
    """tp 2 was planned at the NVLink bridge's speed between two one-card machines."""
    base = ["plan", "--model", "gpt-1.7b", "--cluster", "H100-PCIe", "--gpus", "8", "--gpus-per-node", "1",
            "--global-batch", "64", "-q"]
    r = run(*base, "--json")
    assert r.exit_code == 0, r.output
    plan = json.loads(r.stdout)
    assert plan["inputs"]["cluster"]["nvlink_domain"] == 1 and plan["layout"]["tp"] == 1
    one_error(run(*base, "--tp", "2"), "inside one NVLink domain (1 GPUs)")


@pytest.mark.parametrize("url, fragments", [
    ("sqlite:x.db", ["'sqlite:x.db'", "sqlite:///FILE.db"]),
    ("sqlite:///", ["'sqlite:///' is an in-memory"]),
    ("sqlite:////", ["names the folder '/'", "not a file"]),
])
def test_sqlite_urls_of_the_wrong_shape_are_named_as_given(tmp_path, url, fragments):
    line = one_error(run(*OPTUNA, "--storage", url, "--out", tmp_path / "job"), fragments[0])
    assert all(f in line for f in fragments)
    assert "exists and is not a regular file" not in line and not (tmp_path / "job").exists()


def test_a_too_long_default_study_path_is_not_blamed_on_a_file(tmp_path):
    deep = tmp_path.joinpath(*["d" * 100] * 5)
    deep.mkdir(parents=True)
    line = one_error(run(*OPTUNA, "--out", deep / "job"), "SQLite opens paths of at most 512")
    assert "move that file away" not in line and "shorter --out" in line
    assert not (deep / "job").exists() and not (deep / "job.optuna.db").exists()


def test_a_foreign_file_at_the_default_study_path_is_still_named(tmp_path):
    (tmp_path / "job.optuna.db").write_text("not a database")
    line = one_error(run(*OPTUNA, "--out", tmp_path / "job"), "is not an SQLite database")
    assert "move that file away" in line
