"""Fuzzing round 19 (2026-12-06, a helper's review of every subcommand with hostile input): `planner
estimate` on a plan.json whose defaults_used is not a list ended in a traceback (explain refused it);
a model of 10^9 layers (the old limit) ran the search for minutes before it said nothing fits; a local
absolute path in a model file's `source:` reached plan.json. Each test failed before."""
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_fuzz_round11 import one_error, run  # noqa: E402

PLAN = ["plan", "--cluster", "H100-SXM", "--gpus", "8", "--global-batch", "64", "-q"]
TINY = "num_layers: 2\nhidden: 512\nnum_heads: 8\nvocab: 1000\nmax_seq_len: 512\n"


@pytest.fixture(scope="module")
def plan_json(tmp_path_factory):
    d = tmp_path_factory.mktemp("job")
    model = d / "m.yaml"
    model.write_text("name: tiny\n" + TINY)
    assert run(*PLAN, "--model", model, "--out", d / "job").exit_code == 0
    return json.loads((d / "job" / "plan.json").read_text())


@pytest.mark.parametrize("command", ["estimate", "explain"])
@pytest.mark.parametrize("value", [3.5, True, {"a": 1}, [1, 2]])
def test_a_plan_whose_defaults_used_is_not_sentences_is_damaged(tmp_path, plan_json, command, value):
    data = dict(plan_json, defaults_used=value)
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(data))
    line = one_error(run(command, edited), "defaults_used must be a list of sentences")
    assert "damaged" in line and "re-run `planner plan --out`" in line


def test_a_model_deeper_than_any_real_one_is_refused_at_once(tmp_path):
    model = tmp_path / "deep.yaml"
    model.write_text("name: deep\nnum_layers: 1000000000\nhidden: 2048\nffn_hidden: 8192\nnum_heads: 16\n"
                     "vocab: 50304\nmax_seq_len: 2048\n")
    line = one_error(run(*PLAN, "--model", model, "--out", tmp_path / "job"), "num_layers = 1000000000")
    assert "beyond any real model (max 10,000)" in line
    assert not (tmp_path / "job").exists()


def test_a_local_path_in_a_models_source_does_not_reach_plan_json(tmp_path):
    model = tmp_path / "src.yaml"
    model.write_text("name: mymodel\nsource: converted from /home/alice/ckpts/llama/config.json and "
                     "~/notes.txt, see https://huggingface.co/meta-llama/Llama-3.1-8B\n" + TINY)
    r = run(*PLAN, "--model", model, "--out", tmp_path / "job")
    assert r.exit_code == 0, r.output
    text = (tmp_path / "job" / "plan.json").read_text()
    assert "/home/alice" not in text and "~/" not in text
    source = json.loads(text)["inputs"]["model"]["source"]
    assert source == "converted from config.json and notes.txt, see https://huggingface.co/meta-llama/Llama-3.1-8B"
