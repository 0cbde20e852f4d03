"""Every bad input: one line on stderr, exit code 2, no traceback, nothing written or changed."""
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from planner.cli import main

CASES = {
    "malformed.yaml": "model: [unclosed\n",
    "empty.yaml": "",
    "list.yaml": "[1, 2, 3]\n",
    "zero_layers.yaml": "model: {num_layers: 0, hidden_size: 4096, num_attention_heads: 32, vocab_size: 32000, "
                        "seq_length: 2048}\ncluster: H100-SXM\nparallel: {tp: 1}\n",
    "heads.yaml": "model: {num_layers: 4, hidden_size: 4001, num_attention_heads: 32, vocab_size: 32000, "
                  "seq_length: 2048}\ncluster: {gpu: H100-SXM, num_gpus: 1}\nparallel: {tp: 1}\n",
    "negative.yaml": "model: llama2-7b\ncluster: {gpu: H100-SXM, num_gpus: 8}\nparallel: {tp: -2}\n",
    "huge.yaml": "model: llama2-7b\ncluster: {gpu: H100-SXM, num_gpus: 1000000000000}\nparallel: {tp: 1}\n",
    "gpu.yaml": "model: llama2-7b\ncluster: {gpu: Z100, num_gpus: 8}\nparallel: {tp: 1}\n",
    "preset.yaml": "model: llama9-7b\ncluster: H100-SXM\nparallel: {tp: 1}\n",
    "world.yaml": "model: llama2-7b\ncluster: {gpu: H100-SXM, num_gpus: 8}\nparallel: {tp: 2, pp: 1, dp: 2}\n",
    "tp_heads.yaml": "model: llama2-7b\ncluster: {gpu: H100-SXM, num_gpus: 6}\nparallel: {tp: 3, pp: 1, dp: 2}\n",
    "gbs.yaml": "model: llama2-7b\ncluster: H100-SXM\nparallel: {tp: 2, pp: 1, dp: 4, micro_batch: 1, global_batch: 7}\n",
    "unknown_key.yaml": "model: llama2-7b\ncluster: H100-SXM\nparallel: {tp: 2, pp: 1, dp: 4, tq: 1}\n",
    "no_cluster.yaml": "model: llama2-7b\n",
    "bad_precision.yaml": "model: llama2-7b\ncluster: H100-SXM\nparallel: {tp: 1, pp: 1, dp: 8, precision: fp4}\n",
    "bad_unit.yaml": "model: llama2-7b\ncluster: {gpu: H100-SXM, num_gpus: 8, network_bandwidth: 400 furlongs}\n"
                     "parallel: {tp: 1, pp: 1, dp: 8}\n",
    "cfg.json": '{"model_type": "llama", "hidden_size": 4096',
    "plan.json": '{"layout": {}}',
}

TABLE = [
    # (id, argv with {d} for the temp dir, expected message fragment)
    ("malformed yaml", ["estimate", "{d}/malformed.yaml"], "not valid YAML at line"),
    ("empty yaml", ["estimate", "{d}/empty.yaml"], "is empty"),
    ("yaml list", ["estimate", "{d}/list.yaml"], "must hold a mapping"),
    ("directory for a file", ["estimate", "{d}/adir"], "is a directory"),
    ("missing file", ["estimate", "{d}/nope.yaml"], "does not exist"),
    ("zero layers", ["estimate", "{d}/zero_layers.yaml"], "num_layers must be a positive integer"),
    ("heads not dividing hidden", ["estimate", "{d}/heads.yaml"], "not divisible by 32 heads"),
    ("negative tp", ["estimate", "{d}/negative.yaml"], "tp must be a positive integer"),
    ("10^12 GPUs", ["estimate", "{d}/huge.yaml"], "beyond any real cluster"),
    ("unknown gpu in case", ["estimate", "{d}/gpu.yaml"], "unknown GPU 'Z100': did you mean"),
    ("unknown model in case", ["estimate", "{d}/preset.yaml"], "did you mean llama2-7b"),
    ("world size mismatch", ["estimate", "{d}/world.yaml"], "make them equal"),
    ("tp not dividing heads", ["estimate", "{d}/tp_heads.yaml"], "tp must divide the 32 attention heads"),
    ("batch not divisible", ["estimate", "{d}/gbs.yaml"], "not divisible by micro batch"),
    ("unknown layout field", ["estimate", "{d}/unknown_key.yaml"], "unknown field(s) tq"),
    ("missing section", ["estimate", "{d}/no_cluster.yaml"], "missing 'cluster' section"),
    ("unknown precision", ["estimate", "{d}/bad_precision.yaml"], "unknown precision 'fp4'"),
    ("bad unit", ["estimate", "{d}/bad_unit.yaml"], "unknown unit"),
    ("unknown model preset", ["plan", "--model", "llama9-7b", "--cluster", "H100-SXM"], "did you mean"),
    ("unknown gpu", ["plan", "--model", "llama2-7b", "--cluster", "Z100"], "unknown gpu 'Z100'"),
    ("broken config.json", ["plan", "--model", "{d}/cfg.json", "--cluster", "H100-SXM"], "not valid JSON"),
    ("zero gpus", ["plan", "--model", "llama2-7b", "--cluster", "H100-SXM", "--gpus", "0"], "must be positive"),
    ("partial node", ["plan", "--model", "llama2-7b", "--cluster", "H100-SXM", "--gpus", "12"], "whole number of 8-GPU nodes"),
    ("pinned knob breaks a rule", ["plan", "--model", "llama2-7b", "--cluster", "H100-SXM", "--tp", "3"], "free --tp"),
    ("precision the GPU lacks", ["plan", "--model", "llama2-7b", "--cluster", "V100-32GB", "--gpus", "16",
                                 "--precision", "bf16"], "does not support this precision"),
    ("model too large", ["plan", "--model", "llama3.1-405b", "--cluster", "A100-40GB", "--gpus", "8",
                         "--global-batch", "64"], "needs at least"),
    ("unknown objective", ["plan", "--model", "llama2-7b", "--cluster", "H100-SXM", "--objective", "fastest"],
     "unknown objective"),
    ("bad knob value", ["plan", "--model", "llama2-7b", "--cluster", "H100-SXM", "--precision", "fp4"],
     "unknown precision"),
    ("empty batch range", ["plan", "--model", "llama2-7b", "--cluster", "H100-SXM", "--global-batch-tokens",
                           "4M-1M"], "is empty"),
    ("bad sequence length", ["plan", "--model", "llama2-7b", "--cluster", "H100-SXM", "--seq-len", "abc"],
     "--seq-len takes whole numbers"),
    ("unknown framework", ["plan", "--model", "llama2-7b", "--cluster", "H100-SXM", "--framework", "jax"],
     "unknown framework"),
    ("output exists", ["plan", "--model", "gpt-1.7b", "--cluster", "H100-SXM", "--gpus", "8", "--global-batch",
                       "64", "--out", "{d}/existing"], "already exists; pass --force"),
    ("output not writable", ["plan", "--model", "gpt-1.7b", "--cluster", "H100-SXM", "--gpus", "8",
                             "--out", "{d}/missing-parent/job"], "does not exist"),
    ("output is a file", ["plan", "--model", "gpt-1.7b", "--cluster", "H100-SXM", "--out", "{d}/cfg.json"],
     "is not a directory"),
    ("explain a non-plan", ["explain", "{d}/plan.json"], "is not a plan.json"),
    ("explain bad json", ["explain", "{d}/malformed.yaml"], "not valid JSON"),
]


def snapshot(d: Path):
    out = {}
    for root, dirs, files in os.walk(d):
        for f in files + dirs:
            p = Path(root) / f
            out[str(p)] = p.read_bytes() if p.is_file() else None
    return out


@pytest.fixture
def inputs(tmp_path):
    for name, text in CASES.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "adir").mkdir()
    (tmp_path / "existing").mkdir()
    (tmp_path / "existing" / "keep.txt").write_text("mine")
    return tmp_path


def test_table_has_at_least_25_cases():
    assert len(TABLE) >= 25


@pytest.mark.parametrize("name,argv,fragment", TABLE, ids=[t[0] for t in TABLE])
def test_bad_input(name, argv, fragment, inputs):
    before = snapshot(inputs)
    args = [a.replace("{d}", str(inputs)) for a in argv]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, (result.output, result.stderr)
    assert "Traceback" not in result.output + result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert fragment in lines[0], lines[0]
    assert snapshot(inputs) == before          # nothing created, nothing changed
