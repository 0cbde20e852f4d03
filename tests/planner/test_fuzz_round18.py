"""Fuzzing round 18 (2026-11-25, what round 17's audit left): a model name such as
`<img src=x onerror=...>` or `[a](javascript:...)` reached report.md's title as live HTML / a live link;
a model folder without config.json was called "a directory; give a YAML file" (folders with one are
read); a config.json's model_type was shown lower-cased in its error; a file of 150,000 plain keys was
said to expand "through aliases"; an --out of bytes that are not UTF-8 was called a control character;
`host_memory: 1e30 TiB` was taken; JSON could nest as deep as the parser's recursion limit where YAML
stops at 64 levels. Each test failed before."""
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_fuzz_round11 import one_error, run  # noqa: E402

from costmodels.catalog import MAX_NESTING, load_cluster
from costmodels.errors import SpecError

PLAN = ["plan", "--cluster", "H100-SXM", "--gpus", "8", "--global-batch", "64", "-q"]
TINY = "num_layers: 2\nhidden: 512\nnum_heads: 8\nvocab: 1000\nmax_seq_len: 512\n"


def test_a_model_name_is_literal_text_in_the_report(tmp_path):
    name = "<img src=x onerror=alert(1)> [a](javascript:alert(1)) *b* `c` & d"
    model = tmp_path / "m.yaml"
    model.write_text(f"name: {json.dumps(name)}\n" + TINY)
    r = run(*PLAN, "--model", model, "--out", tmp_path / "job")
    assert r.exit_code == 0, r.output
    title = (tmp_path / "job" / "report.md").read_text().splitlines()[0]
    assert "<" not in title and ">" not in title and "](" not in title, title
    assert "&lt;img src=x onerror=alert\\(1\\)&gt;" in title and "\\[a\\]\\(javascript" in title, title
    assert "&amp; d" in title and "\\*b\\*" in title and "\\`c\\`" in title, title
    # plan.json keeps the name as given
    assert json.loads((tmp_path / "job" / "plan.json").read_text())["inputs"]["model"]["name"] == name


def test_a_model_folder_without_config_json_says_so(tmp_path):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    line = one_error(run(*PLAN, "--model", folder, "--out", tmp_path / "job"), "has no config.json")
    assert "Hugging Face checkpoint folder" in line and "is a directory" not in line
    assert not (tmp_path / "job").exists()


def test_model_type_is_shown_as_written(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "GPT_BigCode", "num_hidden_layers": 2}))
    one_error(run(*PLAN, "--model", cfg, "--out", tmp_path / "job"), "model_type 'GPT_BigCode' is not a family")


def test_many_plain_keys_are_not_called_aliases(tmp_path):
    model = tmp_path / "many.yaml"
    model.write_text("name: x\n" + "".join(f"k{i}: 1\n" for i in range(150_000)))
    line = one_error(run(*PLAN, "--model", model, "--out", tmp_path / "job"), "holds more than 200,000 values")
    assert "alias" not in line


def test_an_alias_bomb_is_still_called_one(tmp_path):
    lines = ["a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    for i, prev in zip("bcdefg", "abcdef"):
        lines.append(f"{i}: &{i} [" + ", ".join([f"*{prev}"] * 10) + "]")
    model = tmp_path / "laughs.yaml"
    model.write_text("\n".join(lines) + "\n")
    one_error(run(*PLAN, "--model", model, "--out", tmp_path / "job"), "through its aliases")


def test_an_out_name_that_is_not_utf8_says_so(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.yaml").write_text("name: x\n" + TINY)
    line = one_error(run(*PLAN, "--model", "m.yaml", "--out", "job\udcffx"), "is not UTF-8 text")
    assert "control character" not in line and "job\\xffx" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.yaml"]


@pytest.mark.parametrize("key", ["host_memory", "nvme"])
def test_node_storage_beyond_any_server_is_refused(key):
    extra = {"nvme_bandwidth": "25 GB/s"} if key == "nvme" else {}
    with pytest.raises(SpecError, match=f"cluster {key}: '1e30 TiB' per node is above 1 PiB"):
        load_cluster({"gpu": "H100-SXM", key: "1e30 TiB", **extra})
    assert load_cluster({"gpu": "H100-SXM", key: "2 TiB", **extra})     # a real node


@pytest.mark.parametrize("depth, ok", [(MAX_NESTING - 1, True), (MAX_NESTING + 1, False), (500, False)])
def test_json_nests_no_deeper_than_yaml(tmp_path, depth, ok):
    cfg = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 512, "intermediate_size": 1376,
           "num_attention_heads": 8, "vocab_size": 1000, "max_position_embeddings": 512,
           "extra": json.loads("[" * depth + "]" * depth)}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    r = run(*PLAN, "--model", tmp_path / "config.json", "--out", tmp_path / "job")
    if ok:
        assert r.exit_code == 0, r.output
    else:
        one_error(r, f"is nested more than {MAX_NESTING} levels deep")
