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
    # Quantities: dimension and physical range (issue 11 item 6).
    **{f"cluster_{k}.yaml": f"model: llama2-7b\ncluster: {{gpu: H100-SXM, num_gpus: 16, {v}}}\n"
                            "parallel: {tp: 1, pp: 1, dp: 16}\n" for k, v in {
        "neg_bw": "network_bandwidth: -400 Gb/s", "bare_bw": "network_bandwidth: 400",
        "gib_bw": "network_bandwidth: 400 GiB", "ms_bw": "network_bandwidth: 5 ms",
        "zero_bw": "network_bandwidth: 0 Gb/s", "nan_bw": "network_bandwidth: .nan",
        "eff": "network_efficiency: 5", "eff0": "nvlink_efficiency: 0", "price": "price_per_gpu_hour: -2",
        "price_str": "price_per_gpu_hour: cheap", "domain": "nvlink_domain: eight",
        "latency": "network_latency: -5 us", "host_mem": "host_memory: 2 TB/s",
    }.items()},
    "peak0.yaml": "model: llama2-7b\ncluster: {gpu: {name: X1, peak: {bf16: 0}, hbm: 80 GiB, hbm_bandwidth: 3 TB/s, "
                  "num_sms: 132, gemm_tile_intensity: 32}, num_gpus: 8}\nparallel: {tp: 1, pp: 1, dp: 8}\n",
    "tokens_nan.yaml": "model: llama2-7b\ncluster: H100-SXM\nparallel: {tp: 1, pp: 1, dp: 8}\n"
                       "training: {total_tokens: .nan}\n",
    "tokens_neg.yaml": "model: llama2-7b\ncluster: H100-SXM\nparallel: {tp: 1, pp: 1, dp: 8}\n"
                       "training: {total_tokens: -1}\n",
    # Model fields with the wrong type (issue 11 items 7-8).
    **{f"model_{k}.yaml": "model: {num_layers: 4, hidden_size: 1024, num_attention_heads: 16, vocab_size: 32000, "
                          f"seq_length: 2048, {v}}}\ncluster: H100-SXM\nparallel: {{tp: 1, pp: 1, dp: 8}}\n"
       for k, v in {"gated": "gated_mlp: 'no'", "rope": "rope_theta: fast",
                    "dropout": "hidden_dropout: high"}.items()},
    "model_layers.yaml": "model: {num_layers: 1000000000000000000000000000000, hidden_size: 1024, "
                         "num_attention_heads: 16, vocab_size: 32000, seq_length: 2048}\n"
                         "cluster: H100-SXM\nparallel: {tp: 1, pp: 1, dp: 8}\n",
    "case.yaml": "model: llama2-7b\ncluster: H100-SXM\nparallel: {tp: 1, pp: 1, dp: 8}\n",
    "m.yaml": "num_layers: 4\nhidden_size: 1024\nnum_attention_heads: 16\nvocab_size: 32000\nseq_length: 2048\n",
    "plan.json": '{"layout": {}}',
    "fw_empty.yaml": "model: llama2-7b\ncluster: H100-SXM\nframework: ''\nparallel: {tp: 1, pp: 1, dp: 8}\n",
    # A key written twice: YAML and JSON loaders keep the last silently, so the first value was lost.
    "dup_model.yaml": "num_layers: 4\nhidden_size: 1024\nnum_attention_heads: 16\nvocab_size: 32000\n"
                      "seq_length: 2048\nhidden_size: 2048\n",
    "dup_case.yaml": "model: llama2-7b\ncluster: H100-SXM\nparallel: {tp: 2, pp: 1, dp: 4, tp: 4}\n",
    "dup_cfg.json": '{"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, '
                    '"num_hidden_layers": 32, "intermediate_size": 11008, "vocab_size": 32000, "hidden_size": 8192}',
}

VALIDATION_DIRS = {"val_yaml": "[unclosed\n", "val_record": "- {foo: 1}\n", "val_scalar": "42\n"}
PLAN_JSON = '{"layout": {}, "estimate": {}, "inputs": {}, "search": {}}'
PLAN_ARGS = ["plan", "--model", "gpt-1.7b", "--cluster", "H100-SXM", "--gpus", "8", "--global-batch", "64"]

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
    # issue 11: quantities with a dimension and a physical range
    ("negative bandwidth", ["estimate", "{d}/cluster_neg_bw.yaml"], "cluster network_bandwidth: '-400 Gb/s' is out of range"),
    ("bandwidth without unit", ["estimate", "{d}/cluster_bare_bw.yaml"], "400 has no unit; expected a bandwidth"),
    ("size as bandwidth", ["estimate", "{d}/cluster_gib_bw.yaml"], "'400 GiB' is not a bandwidth"),
    ("time as bandwidth", ["estimate", "{d}/cluster_ms_bw.yaml"], "'5 ms' is not a bandwidth"),
    ("zero network bandwidth", ["estimate", "{d}/cluster_zero_bw.yaml"], "greater than zero"),
    ("nan bandwidth", ["estimate", "{d}/cluster_nan_bw.yaml"], "expected a finite number, got nan"),
    ("efficiency above 1", ["estimate", "{d}/cluster_eff.yaml"], "network_efficiency: 5 is out of range; expected a number in [0.01, 1]"),
    ("efficiency 0", ["estimate", "{d}/cluster_eff0.yaml"], "nvlink_efficiency: 0 is out of range"),
    ("negative price", ["estimate", "{d}/cluster_price.yaml"], "cluster price_per_gpu_hour must be an amount from 0 to 1e6 per GPU-hour, got -2"),
    ("price as a word", ["estimate", "{d}/cluster_price_str.yaml"], "price_per_gpu_hour takes an amount with an optional currency (2.5, '2.5 USD'), got 'cheap'"),
    ("nvlink domain as a word", ["estimate", "{d}/cluster_domain.yaml"], "nvlink_domain: expected a whole number"),
    ("negative latency", ["estimate", "{d}/cluster_latency.yaml"], "network_latency: '-5 us' is out of range"),
    ("bandwidth as memory", ["estimate", "{d}/cluster_host_mem.yaml"], "'2 TB/s' is not a size"),
    ("gpu without peak", ["estimate", "{d}/peak0.yaml"], "peak needs a positive fp32, fp16 or bf16 rate"),
    ("nan token budget in a case", ["estimate", "{d}/tokens_nan.yaml"], "training.total_tokens: expected a finite number"),
    ("negative token budget in a case", ["estimate", "{d}/tokens_neg.yaml"], "training.total_tokens: -1 is out of range"),
    ("gated_mlp as a string", ["estimate", "{d}/model_gated.yaml"], "gated_mlp must be true or false"),
    ("rope_theta as a word", ["estimate", "{d}/model_rope.yaml"], "rope_theta must be a finite number"),
    ("10^30 layers", ["estimate", "{d}/model_layers.yaml"], "31-digit integer, beyond any real quantity"),
    ("dropout as a word", ["estimate", "{d}/model_dropout.yaml"], "hidden_dropout must be a finite number"),
    ("--tokens nan", PLAN_ARGS + ["--tokens", "nan", "--method", "optuna"], "tokens (training budget): nan is out of range"),
    ("--tokens inf", PLAN_ARGS + ["--tokens", "inf"], "tokens (training budget): inf is out of range"),
    ("--tokens -1", PLAN_ARGS + ["--tokens", "-1"], "tokens (training budget): -1.0 is out of range"),
    ("estimate --tokens nan", ["estimate", "{d}/case.yaml", "--tokens", "nan"], "tokens (training budget): nan"),
    ("--top 0", PLAN_ARGS + ["--top", "0"], "top (plans to report): 0 is out of range"),
    ("--trials 0", PLAN_ARGS + ["--trials", "0", "--method", "optuna"], "trials (the Optuna study's target): 0 is out of range"),
    # issue 11: output locations that would lose work
    ("--out empty", PLAN_ARGS + ["--out", ""], "--out needs a directory name"),
    ("explain into its own folder", ["explain", "{d}/existing", "--out", "{d}/existing", "--force"], "holds the input"),
    ("plan --out holding the model", ["plan", "--model", "{d}/existing/m.yaml", "--cluster", "H100-SXM", "--out",
                                      "{d}/existing", "--force"], "holds the input"),
    ("--out the temp root's parent", PLAN_ARGS + ["--out", "{d}/..", "--force"], "names the current or a parent directory"),
    ("--out under a file", PLAN_ARGS + ["--out", "{d}/cfg.json/job"], "is not a directory"),
    ("--out under /proc", PLAN_ARGS + ["--out", "/proc/planner-job"], "cannot write in /proc"),
    ("--out name too long", PLAN_ARGS + ["--out", "{d}/" + "x" * 260], "bytes long"),
    ("--out root", PLAN_ARGS + ["--out", "/", "--force"], "names the current or a parent directory"),
    ("--out with a newline", PLAN_ARGS + ["--out", "{d}/new\nline"], "contains a control character"),
    ("an empty item in a list", PLAN_ARGS + ["--tp", "1,,2"], "an empty item in a comma-separated list"),
    ("framework ''", ["estimate", "{d}/fw_empty.yaml"], "framework: an empty name"),
    ("key twice in a model file", ["plan", "--model", "{d}/dup_model.yaml", "--cluster", "H100-SXM"],
     "key 'hidden_size' appears twice (lines 2 and 6); keep one"),
    ("key twice in a case", ["estimate", "{d}/dup_case.yaml"], "key 'tp' appears twice (lines 3 and 3)"),
    ("key twice in config.json", ["plan", "--model", "{d}/dup_cfg.json", "--cluster", "H100-SXM"],
     "key 'hidden_size' appears twice"),
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
    (tmp_path / "existing" / "m.yaml").write_text(CASES["m.yaml"])
    (tmp_path / "existing" / "plan.json").write_text(PLAN_JSON)
    for name, text in VALIDATION_DIRS.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "published_dev.yaml").write_text(text)
    return tmp_path


def test_table_has_at_least_60_cases():
    assert len(TABLE) >= 60


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


# ---- issue 11: exhaustion, tampered plans, interrupts -----------------------------------------------

LAUGHS = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi"))

MODEL4 = "num_layers: 4, hidden_size: 1024, num_attention_heads: 16, vocab_size: 32000, seq_length: 2048"
HF = ('{{"model_type": "llama", "hidden_size": {h}, "num_attention_heads": 32, "num_hidden_layers": {l}, '
      '"intermediate_size": 14336, "vocab_size": 32000{extra}}}')
HOSTILE = {
    "typo_kv.yaml": f"model: {{{MODEL4}, num_kv_head: 4}}\ncluster: H100-SXM\nparallel: {{tp: 1, pp: 1, dp: 8}}\n",
    "typo_ffn.yaml": f"model: {{{MODEL4}, ffn_hiden_size: 4096}}\ncluster: H100-SXM\nparallel: {{tp: 1, pp: 1, dp: 8}}\n",
    "typo_act.yaml": f"model: {{{MODEL4}, activaton: swiglu}}\ncluster: H100-SXM\nparallel: {{tp: 1, pp: 1, dp: 8}}\n",
    "banana.yaml": f"model: {{{MODEL4}, activation: banana}}\ncluster: H100-SXM\nparallel: {{tp: 1, pp: 1, dp: 8}}\n",
    "typo_bw.yaml": "model: llama2-7b\ncluster: {gpu: H100-SXM, num_gpus: 8, network_bandwith: 400 Gb/s}\n"
                    "parallel: {tp: 1, pp: 1, dp: 8}\n",
    "typo_top.yaml": "model: llama2-7b\ncluster: H100-SXM\nparallel: {tp: 1, pp: 1, dp: 8}\ntrainig: {total_tokens: 1e12}\n",
    "moe.json": HF.format(h=4096, l=32, extra=', "num_local_experts": 8, "num_experts_per_tok": 2'),
    "hf_str.json": HF.format(h='"4096"', l=32, extra=""),
    "hf_float.json": HF.format(h=4096, l=32.7, extra=""),
    "hf_bool.json": HF.format(h=4096, l="true", extra=""),
    "hf_rope.json": HF.format(h=4096, l=32, extra=', "rope_theta": "fast"'),
    "hf_tie.json": HF.format(h=4096, l=32, extra=', "tie_word_embeddings": "yes"'),
    "hf_act.json": HF.format(h=4096, l=32, extra=', "hidden_act": 5'),
    # a lone surrogate escape parses to a string no file or terminal can encode (was a traceback)
    "hf_surrogate.json": HF.format(h=4096, l=32, extra=', "torch_dtype": "\\ud800"'),
    "surrogate.yaml": f"model: {{{MODEL4}, name: \"evil\\ud800\"}}\ncluster: H100-SXM\nparallel: {{tp: 1, pp: 1, dp: 8}}\n",
    "laughs.yaml": LAUGHS,
    "deep.yaml": "[" * 5000 + "]" * 5000 + "\n",
    "deep.json": "[" * 50000 + "]" * 50000,
    "nan.json": '{"model_type": "llama", "hidden_size": NaN, "num_attention_heads": 32, "num_hidden_layers": 2}',
    "binary.json": b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe",
    "tp_word.yaml": "model: llama2-7b\ncluster: {gpu: H100-SXM}\nparallel: {tp: abc, pp: 1, dp: 8}\n",
    "mbs_huge.yaml": "model: llama2-7b\ncluster: H100-SXM\nparallel: {tp: 1, pp: 1, dp: 8, "
                     "micro_batch: 1000000000000000000000000000000}\n",
    # issue 9 / the bad-input contract, found by a hostile-input audit (2026-11-24): each was a traceback,
    # a NaN estimate or a lost file before
    "hf_bigint.json": HF.format(h=4096, l=32, extra=', "rope_theta": 1' + "0" * 400),
    "digits.yaml": "num_layers: " + "9" * 5000 + "\n",
    "tokens_big.yaml": "model: llama2-7b\ncluster: H100-SXM\nparallel: {tp: 1, pp: 1, dp: 8}\n"
                       "training: {total_tokens: " + "9" * 400 + "}\n",
    "rl_big.yaml": "model: llama2-7b\ncluster: H100-SXM\nparallel: {tp: 1, pp: 1, dp: 8, recompute: full, "
                   "recompute_layers: 10000000000000}\n",
    "cluster5.yaml": "model: llama2-7b\ncluster: 5\nparallel: {tp: 1}\n",
    "latency_big.yaml": "model: llama2-7b\ncluster: {gpu: H100-SXM, num_gpus: 16, network_latency: 1e308 s}\n"
                        "parallel: {tp: 2, pp: 1, dp: 8}\n",
    "bw_tiny.yaml": "model: llama2-7b\ncluster: {gpu: H100-SXM, num_gpus: 16, network_bandwidth: 1e-300 B/s}\n"
                    "parallel: {tp: 2, pp: 1, dp: 8}\n",
    "runs_nan.yaml": "- {model: {}, cluster: {}, parallel: {}, measured: {step_time_s: .nan}}\n",
    "runs_meas5.yaml": "- {model: {}, cluster: {}, parallel: {}, measured: 5}\n",
    "runs_laughs.yaml": LAUGHS.replace("a: &a", "- a: &a", 1).replace("\nb:", "\n  b:").replace(
        "\nc:", "\n  c:").replace("\nd:", "\n  d:").replace("\ne:", "\n  e:").replace("\nf:", "\n  f:").replace(
        "\ng:", "\n  g:").replace("\nh:", "\n  h:").replace("\ni:", "\n  i:"),
    "calib_laughs.yaml": LAUGHS + "constants: {compute_scale: *i}\n",
    "calib_bin.yaml": b"constants: {compute_scale: \xff\xfe}\n",
    # hexadecimal literals have no digit limit in Python, but str() of them does
    "hex_cluster.yaml": "gpu: H100-SXM\nnum_gpus: 0x" + "f" * 4000 + "\n",
    "runs_tp0.yaml": "- {model: {name: m, num_layers: 4, hidden_size: 1024, ffn_hidden_size: 4096, "
                     "num_attention_heads: 16, num_kv_heads: 16, vocab_size: 32000, seq_length: 2048, "
                     "activation: gelu}, cluster: {gpu: H100-SXM, num_gpus: 8, gpus_per_node: 8}, "
                     "parallel: {tp: 0, pp: 1, dp: 8, cp: 1, micro_batch: 1, global_batch: 8}, "
                     "measured: {step_time_s: 0.5}}\n",
}
HOSTILE["runs_tptwo.yaml"] = HOSTILE["runs_tp0.yaml"].replace("tp: 0", "tp: two")
HOSTILE["runs_idmap.yaml"] = HOSTILE["runs_tp0.yaml"].replace("tp: 0", "tp: 1").replace("- {model", "- {id: {a: 1}, model")

HOSTILE_TABLE = [
    ("billion laughs", ["estimate", "{d}/laughs.yaml"], "aliases"),
    ("billion laughs as a model", PLAN_ARGS[:1] + ["--model", "{d}/laughs.yaml", "--cluster", "H100-SXM"], "aliases"),
    ("billion laughs as a cluster", PLAN_ARGS[:1] + ["--model", "gpt-1.7b", "--cluster", "{d}/laughs.yaml"], "aliases"),
    ("deeply nested yaml", ["estimate", "{d}/deep.yaml"], "nested more than"),
    ("deeply nested json", PLAN_ARGS[:1] + ["--model", "{d}/deep.json", "--cluster", "H100-SXM"], "nested too deeply"),
    ("NaN in config.json", PLAN_ARGS[:1] + ["--model", "{d}/nan.json", "--cluster", "H100-SXM"], "holds NaN"),
    ("binary config.json", PLAN_ARGS[:1] + ["--model", "{d}/binary.json", "--cluster", "H100-SXM"], "is not UTF-8 text"),
    ("fifo", ["estimate", "{d}/fifo.yaml"], "not a regular file"),
    ("/dev/zero as a model", PLAN_ARGS[:1] + ["--model", "/dev/zero", "--cluster", "H100-SXM"], "not a regular file"),
    ("tp as a word", ["estimate", "{d}/tp_word.yaml"], "parallel.tp must be a whole number"),
    ("10^30 micro batch", ["estimate", "{d}/mbs_huge.yaml"], "31-digit integer, beyond any real quantity"),
    ("--mbs 10^30", PLAN_ARGS + ["--mbs", "1" + "0" * 30], "beyond any real layout"),
    ("--top -1", PLAN_ARGS + ["--top", "-1"], "top (plans to report): -1 is out of range"),
    ("--objective time,time", PLAN_ARGS + ["--objective", "time,time"], "names time twice"),
    ("--seed -1", PLAN_ARGS + ["--seed", "-1", "--method", "optuna"], "seed: -1 is out of range"),
    ("--seed 10^20", PLAN_ARGS + ["--seed", "1" + "0" * 20], "seed: 100000000000000000000 is out of range"),
    ("--study-name ''", PLAN_ARGS + ["--study-name", "", "--method", "optuna"], "study name must be a non-empty"),
    ("--global-batch 10^20", ["plan", "--model", "gpt-1.7b", "--cluster", "H100-SXM", "--global-batch",
                              "1" + "0" * 20], "beyond any real run"),
    ("validate: broken YAML", ["validate", "--data", "{d}/val_yaml", "--no-vtrain"], "is not valid YAML at line"),
    ("validate: malformed run", ["validate", "--data", "{d}/val_record", "--no-vtrain"], "run 1: id must be a non-empty string"),
    ("validate: not a list", ["validate", "--data", "{d}/val_scalar", "--no-vtrain"], "must hold a list of runs"),
    # usage errors: one line too (issue 11 item 10)
    ("--gpus not a number", PLAN_ARGS + ["--gpus", "x"], "Invalid value for '--gpus'"),
    ("unknown option", PLAN_ARGS + ["--bogus"], "No such option '--bogus'"),
    ("unknown command", ["nope"], "No such command 'nope'"),
    ("missing --model", ["plan", "--cluster", "H100-SXM"], "Missing option '--model'"),
    # unknown keys get the closest valid one (issue 11 item 7)
    ("model key typo num_kv_head", ["estimate", "{d}/typo_kv.yaml"], "unknown key 'num_kv_head'; did you mean num_kv_heads?"),
    ("model key typo ffn_hiden_size", ["estimate", "{d}/typo_ffn.yaml"], "did you mean ffn_hidden_size?"),
    ("model key typo activaton", ["estimate", "{d}/typo_act.yaml"], "did you mean activation?"),
    ("activation banana", ["estimate", "{d}/banana.yaml"], "unknown activation 'banana'"),
    ("cluster key typo", ["estimate", "{d}/typo_bw.yaml"], "unknown key 'network_bandwith'; did you mean network_bandwidth?"),
    ("top-level key typo", ["estimate", "{d}/typo_top.yaml"], "unknown key 'trainig'; did you mean training?"),
    ("Mixtral config.json", PLAN_ARGS[:1] + ["--model", "{d}/moe.json", "--cluster", "H100-SXM"], "Mixture-of-Experts"),
    ("hidden_size as a string", PLAN_ARGS[:1] + ["--model", "{d}/hf_str.json", "--cluster", "H100-SXM"],
     "hidden_size must be a whole number, got '4096'"),
    ("layers as a fraction", PLAN_ARGS[:1] + ["--model", "{d}/hf_float.json", "--cluster", "H100-SXM"],
     "num_hidden_layers must be a whole number, got 32.7"),
    ("layers as true", PLAN_ARGS[:1] + ["--model", "{d}/hf_bool.json", "--cluster", "H100-SXM"],
     "num_hidden_layers must be a whole number, got True"),
    ("HF rope_theta a word", PLAN_ARGS[:1] + ["--model", "{d}/hf_rope.json", "--cluster", "H100-SXM"],
     "rope_theta must be a number, got 'fast'"),
    ("HF tie_word_embeddings 'yes'", PLAN_ARGS[:1] + ["--model", "{d}/hf_tie.json", "--cluster", "H100-SXM"],
     "tie_word_embeddings must be true or false"),
    ("HF hidden_act a number", PLAN_ARGS[:1] + ["--model", "{d}/hf_act.json", "--cluster", "H100-SXM"],
     "hidden_act must be a string"),
    ("lone surrogate in config.json", PLAN_ARGS[:1] + ["--model", "{d}/hf_surrogate.json", "--cluster", "H100-SXM"],
     "(key 'torch_dtype') holds a lone surrogate escape"),
    ("lone surrogate in a model name", ["estimate", "{d}/surrogate.yaml"], "holds a lone surrogate escape"),
    ("10^400 rope_theta in config.json", PLAN_ARGS[:1] + ["--model", "{d}/hf_bigint.json", "--cluster", "H100-SXM"],
     "401-digit integer, beyond any real quantity"),
    ("5,000-digit integer", PLAN_ARGS[:1] + ["--model", "{d}/digits.yaml", "--cluster", "H100-SXM"],
     "holds a number too long to read"),
    ("400-digit token budget", ["estimate", "{d}/tokens_big.yaml"], "beyond any real quantity"),
    ("recompute_layers 10^13", ["estimate", "{d}/rl_big.yaml"], "recompute_layers must be a whole number from 0 to 10^9"),
    ("cluster: 5", ["estimate", "{d}/cluster5.yaml"], "cluster: expected a GPU name, a cluster file or a mapping"),
    ("latency 1e308 s", ["estimate", "{d}/latency_big.yaml", "--json"], "network_latency: '1e308 s' is out of range; "
                                                                       "expected at most 1 s"),
    ("bandwidth 1e-300 B/s", ["estimate", "{d}/bw_tiny.yaml", "--json"], "below 1 MB/s"),
    ("calibrate: NaN step time", ["calibrate", "{d}/runs_nan.yaml", "--json"],
     "measured.step_time_s must be a number of seconds from 0.001 to 86400"),
    ("calibrate: measured is a number", ["calibrate", "{d}/runs_meas5.yaml"], "each a mapping"),
    ("calibrate: billion laughs", ["calibrate", "{d}/runs_laughs.yaml"], "aliases"),
    ("calibrate: a fifo", ["calibrate", "{d}/fifo.yaml"], "not a regular file"),
    ("calibration file: billion laughs", ["estimate", "{d}/case.yaml", "--calibration", "{d}/calib_laughs.yaml"],
     "aliases"),
    ("calibration file: not UTF-8", ["estimate", "{d}/case.yaml", "--calibration", "{d}/calib_bin.yaml"],
     "is not UTF-8 text"),
    ("calibration file: a fifo", ["estimate", "{d}/case.yaml", "--calibration", "{d}/fifo.yaml"],
     "not a regular file"),
    ("--global-batch-tokens -4M", PLAN_ARGS[:7] + ["--global-batch-tokens", "-4M"], "got '-4M'"),
    ("4,000-digit hex integer", PLAN_ARGS[:1] + ["--model", "gpt-1.7b", "--cluster", "{d}/hex_cluster.yaml"],
     "beyond any real quantity"),
    ("calibrate: tp 0", ["calibrate", "{d}/runs_tp0.yaml"], "record 1: parallel.tp must be a whole number from 1"),
    ("calibrate: tp as a word", ["calibrate", "{d}/runs_tptwo.yaml"], "parallel.tp must be a whole number from 1 to "
                                                                       "10^7, got 'two'"),
    ("calibrate: id a mapping", ["calibrate", "{d}/runs_idmap.yaml"], "record 1: id must be a string"),
]


@pytest.fixture
def hostile(inputs):
    for name, text in HOSTILE.items():
        (inputs / name).write_bytes(text if isinstance(text, bytes) else text.encode())
    os.mkfifo(inputs / "fifo.yaml")
    return inputs


@pytest.mark.parametrize("name,argv,fragment", HOSTILE_TABLE, ids=[t[0] for t in HOSTILE_TABLE])
def test_hostile_input(name, argv, fragment, hostile):
    before = snapshot_meta(hostile)
    args = [a.replace("{d}", str(hostile)) for a in argv]
    result = CliRunner().invoke(main, args)
    check_one_error(result, fragment)
    assert snapshot_meta(hostile) == before


def snapshot_meta(d: Path):
    """Like snapshot, without opening FIFOs."""
    return {str(p): (p.read_bytes() if p.is_file() else None) for p in sorted(d.rglob("*"))}


def check_one_error(result, fragment, code=2):
    assert result.exit_code == code, (result.output, result.stderr)
    assert "Traceback" not in result.output + result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert fragment in lines[0], lines[0]


def test_table_and_hostile_inputs_have_at_least_60_rows():
    assert len(TABLE) + len(HOSTILE_TABLE) >= 60


def test_an_error_line_echoing_a_huge_input_stays_short(tmp_path):
    """An error quotes what it refuses; a 3 MiB model name made a 3 MiB error line."""
    m = tmp_path / "m.yaml"
    m.write_text("name: " + "A" * 3_000_000 + "\nbogus_key: 1\n")
    r = CliRunner().invoke(main, ["plan", "--model", str(m), "--cluster", "H100-SXM"])
    check_one_error(r, "error: model")
    assert len(r.stderr) < 1100 and "characters ...]" in r.stderr


def test_validate_refuses_impossible_measurements(tmp_path, validation_dir):
    """A damaged validation file (a step time of 0 or NaN) was a ZeroDivisionError or a NaN MAPE; one of
    1e-320 s gave 'mape_overall: Infinity' in validate --json (fuzzing round 9)."""
    import yaml

    runs = yaml.safe_load((validation_dir / "published_dev.yaml").read_text())
    rec = next(r for r in runs if r["measured"].get("step_time_s"))
    for value in (0, float("nan"), -3.0, 1.0e-320, 1e6):
        rec["measured"]["step_time_s"] = value
        d = tmp_path / f"v{value}"
        d.mkdir()
        (d / "published_dev.yaml").write_text(yaml.safe_dump([rec]))
        r = CliRunner().invoke(main, ["validate", "--data", str(d), "--no-vtrain"])
        check_one_error(r, "is outside any real run's")


def test_validate_refuses_a_fifo_for_the_vtrain_table(tmp_path, validation_dir):
    import yaml

    runs = yaml.safe_load((validation_dir / "published_dev.yaml").read_text())
    (tmp_path / "published_dev.yaml").write_text(yaml.safe_dump(runs[:1]))
    (tmp_path / "vtrain").mkdir()
    os.mkfifo(tmp_path / "vtrain" / "ground_truth_single.csv")
    check_one_error(CliRunner().invoke(main, ["validate", "--data", str(tmp_path)]), "not a regular file")


def test_an_oversized_input_file_is_refused(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_text("# padding\n" * 500_000)                # 5 MB
    check_one_error(CliRunner().invoke(main, ["estimate", str(big)]), "input files are limited to 4 MiB")


def test_cache_home_that_is_a_file(tmp_path):
    (tmp_path / "cache").write_text("not a directory")
    r = CliRunner().invoke(main, PLAN_ARGS + ["--method", "optuna", "--trials", "10"],
                           env={"XDG_CACHE_HOME": str(tmp_path / "cache")})
    check_one_error(r, "cannot create the study cache")


@pytest.fixture(scope="module")
def plan_json_text():
    import planner
    from planner.emit.writer import render_files

    return render_files(planner.plan("gpt-1.7b", "H100-SXM", gpus=8, global_batch=64))["plan.json"].decode()


def _tamper(data, path, value):
    *keys, last = path.split(".")
    for k in keys:
        data = data[k]
    if value is DELETE:
        del data[last]
    else:
        data[last] = value


DELETE = object()
TAMPERED = [
    ("tp 3", "layout.tp", 3, "tp*pp*dp*cp = 24 GPUs but the cluster has 8"),
    ("ZeRO-7", "layout.zero_stage", 7, "zero stage must be 0, 1, 2 or 3, got 7"),
    ("fp4", "layout.precision", "fp4", "unknown precision 'fp4'"),
    ("tp a word", "layout.tp", "abc", "whole number"),
    ("no model", "inputs.model", DELETE, "damaged: missing field 'model'"),
    ("inputs a list", "inputs", [], "damaged"),
    ("estimate a string", "estimate", "x", "damaged"),
    ("negative bandwidth", "inputs.cluster.network_bandwidth_bytes_per_s", -5, "out of range"),
    ("runner-up without layout", "runner_ups", [{"rank": 2}], "damaged"),
    # a hostile-input audit (2026-11-24): division by zero and figure overflows in `explain`
    ("zero step time", "estimate.step_time_s", 0, "must be above zero"),
    ("zero throughput", "estimate.tokens_per_s_per_gpu", 0, "must be above zero"),
    ("10^30 compute time", "estimate.time_breakdown_s.compute", 10**30, "beyond any real quantity"),
    ("1e30 compute time", "estimate.time_breakdown_s.compute", 1e30, "is not a value `planner plan` writes"),
    ("band from zero", "estimate.step_time_band_s", [0.0, 5.0], "must be above zero"),
    ("runner-ups a number", "runner_ups", 5, "runner_ups must be a list"),
    ("MFU 7", "estimate.mfu", 7.0, "mfu = 7 is above 1"),
]


STORED_ONLY = ("runner-up without layout", "zero step time", "zero throughput", "1e30 compute time", "band from zero",
               "runner-ups a number", "MFU 7")
TAMPERED_RUNS = [(c, *t) for t in TAMPERED for c in ("explain", "estimate")
                 if not (c == "estimate" and t[0] in STORED_ONLY)]   # estimate reads only the layout


@pytest.mark.parametrize("command,name,path,value,fragment", TAMPERED_RUNS,
                         ids=[f"{t[0]}-{t[1]}" for t in TAMPERED_RUNS])
def test_tampered_plan_json(command, name, path, value, fragment, plan_json_text, tmp_path):
    import json as _json

    data = _json.loads(plan_json_text)
    _tamper(data, path, value)
    f = tmp_path / "plan.json"
    f.write_text(_json.dumps(data))
    args = [command, str(f)] + (["--out", str(tmp_path / "report")] if command == "explain" else [])
    check_one_error(CliRunner().invoke(main, args), fragment)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.json"]


def test_ctrl_c_during_cp_sat_stops_with_exit_130(monkeypatch, tmp_path):
    """CP-SAT catches SIGINT and returns a partial enumeration; the search must not go on with it."""
    from ortools.sat.python import cp_model

    real = cp_model.CpSolver.solve

    def interrupted(self, model, callback=None):
        real(self, model, callback)
        return cp_model.FEASIBLE             # what CP-SAT answers when Ctrl-C stopped it

    monkeypatch.setattr(cp_model.CpSolver, "solve", interrupted)
    r = CliRunner().invoke(main, PLAN_ARGS + ["--out", str(tmp_path / "job")])
    check_one_error(r, "interrupted; nothing was written", code=130)
    assert not (tmp_path / "job").exists()


def test_a_merged_key_may_be_overridden(tmp_path):
    """Refusing duplicate keys must not refuse YAML's merge: `<<: *base` then an override is meant."""
    from costmodels.catalog import read_yaml_data
    path = tmp_path / "merged.yaml"
    path.write_text("base: &base {tp: 2, pp: 1, dp: 4}\nparallel: {<<: *base, tp: 4, dp: 2}\n")
    assert read_yaml_data(path, "case")["parallel"] == {"tp": 4, "pp": 1, "dp": 2}


def test_force_replaces_only_an_earlier_planner_output(tmp_path):
    """--force replaced any existing directory with everything in it: `--out ~ --force` from elsewhere,
    or a symbolic link to a data directory, deleted that directory. It now replaces only a directory
    the planner wrote (plan.json or report.md at its top) or an empty one; through a link, the target."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "notes.txt").write_text("mine")
    link = tmp_path / "link"
    link.symlink_to(data)
    before = snapshot(tmp_path)
    for out in (data, link):
        r = CliRunner().invoke(main, PLAN_ARGS + ["--out", str(out), "--force"])
        assert r.exit_code == 2, r.output
        lines = [line for line in r.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and "the planner did not write" in lines[0], r.stderr
        assert snapshot(tmp_path) == before
    # an earlier plan, reached through a link: replaced in place, the link kept
    r = CliRunner().invoke(main, PLAN_ARGS + ["--out", str(tmp_path / "job")])
    assert r.exit_code == 0, r.output + r.stderr
    (tmp_path / "job-link").symlink_to(tmp_path / "job")
    r = CliRunner().invoke(main, PLAN_ARGS + ["--out", str(tmp_path / "job-link"), "--force", "--tp", "2"])
    assert r.exit_code == 0, r.output + r.stderr
    assert (tmp_path / "job-link").is_symlink() and '"tp": 2' in (tmp_path / "job" / "plan.json").read_text()
    # an empty directory may be filled
    (tmp_path / "empty").mkdir()
    assert CliRunner().invoke(main, PLAN_ARGS + ["--out", str(tmp_path / "empty"), "--force"]).exit_code == 0
    # a name the planner also writes is not enough: a thesis with a report.md, a plan with probe logs
    thesis = tmp_path / "thesis"
    (thesis / "chapters").mkdir(parents=True)
    (thesis / "report.md").write_text("mine")
    (tmp_path / "job" / "probe").mkdir()
    (tmp_path / "job" / "probe" / "1.log").write_text("iteration 1/ 20 | elapsed time per iteration (ms): 5.0\n")
    before = snapshot(tmp_path)
    for out, words in ((thesis, "holds 'chapters'"), (tmp_path / "job-link", "holds 'probe/1.log'")):
        r = CliRunner().invoke(main, PLAN_ARGS + ["--out", str(out), "--force"])
        assert r.exit_code == 2 and words in r.stderr and "the planner did not write" in r.stderr, r.stderr
        assert snapshot(tmp_path) == before


def test_force_through_a_link_replaces_its_target_without_renameat2(tmp_path, monkeypatch):
    """Where renameat2 cannot exchange the two directories, the fallback renamed the link itself: the link
    became a real directory, the target kept the old plan and a stale link was left beside them."""
    from planner.emit import writer
    monkeypatch.setattr(writer, "_exchange", lambda a, b: False)
    assert CliRunner().invoke(main, PLAN_ARGS + ["--out", str(tmp_path / "job")]).exit_code == 0
    (tmp_path / "link").symlink_to(tmp_path / "job")
    r = CliRunner().invoke(main, PLAN_ARGS + ["--out", str(tmp_path / "link"), "--force", "--tp", "2"])
    assert r.exit_code == 0, r.output + r.stderr
    assert (tmp_path / "link").is_symlink()
    assert '"tp": 2' in (tmp_path / "job" / "plan.json").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job", "link"]


@pytest.mark.parametrize("line,fragment", [
    ("zero3_reduce_tensors_per_layer: abc", "zero3_reduce_tensors_per_layer must be a number, got 'abc'"),
    ("zero3_gathers_per_layer: .nan", "zero3_gathers_per_layer is nan; expected a number in [0, 1000]"),
    ("zero3_overlap: 1.5", "zero3_overlap is 1.5; expected a number in [0, 1]"),
    ("zero3_gather_efficiency: 0", "zero3_gather_efficiency is 0; expected a number in (0, 1]"),
    # a review fuzzed these: a traceback, a step shortened or stretched by a unit, nonsense taken silently
    ("zero3_reduce_bucket_params: 1.0e-300", "expected 0 (one call per gather unit) or a bucket of at least 1"),
    ("iteration_overhead: -22 ms", "iteration_overhead: '-22 ms' is out of range"),
    ("iteration_overhead: 22 GB", "iteration_overhead: '22 GB' is not a time"),
    ("host_overhead: 5 TB/s", "host_overhead: '5 TB/s' is not a time"),
    ("cuda_context: -1.5 GiB", "cuda_context: '-1.5 GiB' is out of range"),
    ("comm_buffers: 1.5 s", "comm_buffers: '1.5 s' is not a size"),
    ("attention_speedup: 1.0e-300", "attention_speedup is 1e-300; expected a number in [0.01, 100]"),
    ("grad_accumulation_bytes: 1.0e12", "grad_accumulation_bytes is 1000000000000.0; expected a number in [0, 64]"),
    ("attention_head_dims: [999999999999]", "attention_head_dims must be a list of whole numbers from 1 to 1024"),
    ("attention_head_dims: [true]", "attention_head_dims must be a list of whole numbers from 1 to 1024"),
    ("dp_overlapp: 0.3", "unknown field(s) dp_overlapp"),
    ("pp_scatter_gather: 'false'", "pp_scatter_gather must be true or false, got 'false'"),
    ("context_parallel: banana", "context_parallel must be ring, ring_allgather or ulysses, got 'banana'"),
    ("attention_kernel: cudnn", "attention_kernel must be flash-attention-2 or native, got 'cudnn'"),
    ("zero0_shards_optimizer: bf16", "zero0_shards_optimizer must be a list of precisions"),
])
def test_framework_numbers_are_checked(tmp_path, line, fragment):
    """A framework file's number fields went through float(): 'abc' ended in a traceback, .nan gave a
    NaN step time, an overlap of 1.5 hid more than all of the traffic; its times and sizes took any unit
    and sign, unknown keys and 'false' as true were taken silently."""
    base = (Path(__file__).resolve().parents[2] / "costmodels" / "catalog" / "frameworks" /
            "megatron-deepspeed.yaml").read_text().splitlines()
    key = line.split(":")[0]
    text = [f"{line}" if row.startswith(key + ":") else row for row in base]
    if not any(row == line for row in text):
        text.append(line)
    text = [row if not row.startswith("name:") else "name: mine" for row in text]
    (tmp_path / "fw.yaml").write_text("\n".join(text) + "\n")
    (tmp_path / "case.yaml").write_text(f"model: llama2-7b\ncluster: H100-SXM\nframework: {tmp_path / 'fw.yaml'}\n"
                                        "parallel: {tp: 1, pp: 1, dp: 8, zero_stage: 3}\n")
    r = CliRunner().invoke(main, ["estimate", str(tmp_path / "case.yaml")])
    assert r.exit_code == 2, r.output + r.stderr
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and fragment in lines[0], r.stderr


def test_a_gpu_with_only_an_fp32_peak_is_planned_in_fp32(tmp_path):
    """Its precision domain was empty: `plan` ended in a traceback (max() of an empty sequence), and
    non-flash attention divided by a zero fp16 rate."""
    text = (Path(__file__).resolve().parents[2] / "costmodels" / "catalog" / "gpus" / "h100-sxm.yaml").read_text()
    text = text.replace("name: H100-SXM", "name: MyFP32GPU")     # a file of one's own takes a name of its own
    a = text.index("peak:")
    b = text.index("\n", text.index("fp8:", a))
    (tmp_path / "gpu.yaml").write_text(text[:a] + "peak:\n  fp32: 67 TFLOP/s" + text[b:])
    r = CliRunner().invoke(main, ["plan", "--model", "gpt-1.7b", "--cluster", str(tmp_path / "gpu.yaml"),
                                  "--gpus", "8", "--global-batch", "64", "--json"])
    assert r.exit_code == 0, r.output + r.stderr
    assert "Warning" not in r.stderr and '"precision": "fp32"' in r.stdout


def test_price_and_framework_options_say_what_they_take(tmp_path):
    r = CliRunner().invoke(main, PLAN_ARGS + ["--price-per-gpu-hour", "1e300", "--objective", "cost"])
    assert r.exit_code == 2 and "must be an amount from 0 to 1e6 per GPU-hour" in r.stderr
    r = CliRunner().invoke(main, PLAN_ARGS + ["--framework", "./fw.yaml"])
    assert r.exit_code == 2 and "pass a YAML file path" not in r.stderr and "rules only" in r.stderr
    # PyYAML reads 1e6 (no '.' or exponent sign) as text: numbers written so are taken as numbers
    case = tmp_path / "case.yaml"
    case.write_text("model: llama2-7b\ncluster: {gpu: H100-SXM, num_gpus: 8, price_per_gpu_hour: 2e0}\n"
                    "parallel: {tp: 1, pp: 1, dp: 8}\n")
    r = CliRunner().invoke(main, ["estimate", str(case)])
    assert r.exit_code == 0, r.output + r.stderr


@pytest.mark.parametrize("old,new,fragment", [
    ("hbm_bandwidth:", "hbm_bandwidth: 1 B/s", "below 1 GB/s"),
    ("  kernel_overhead:", "  kernel_overhead: 1000000 s", "kernel_overhead: '1000000 s' is out of range"),
    ("  bf16:", "  bf16: 1 FLOP/s", "a peak below 100 GFLOP/s is not a GPU's"),
    ("  bf16:", "  bf16: 1.0e30 TFLOP/s", "peak.bf16: '1.0e30 TFLOP/s' is out of range"),
])
def test_gpu_quantities_have_ranges(tmp_path, old, new, fragment):
    """A GPU file took any magnitude: 1 B/s of HBM gave a 1.7e13 s step, a 1 FLOP/s peak a negative
    'overhead' in the time breakdown, a 10^6 s kernel overhead was accepted."""
    lines = (Path(__file__).resolve().parents[2] / "costmodels" / "catalog" / "gpus" / "h100-sxm.yaml"
             ).read_text().splitlines()
    lines = [new if line.startswith(old) else "name: MyH100" if line.startswith("name:") else line for line in lines]
    assert new in lines
    (tmp_path / "gpu.yaml").write_text("\n".join(lines) + "\n")
    r = CliRunner().invoke(main, ["plan", "--model", "gpt-1.7b", "--cluster", str(tmp_path / "gpu.yaml"),
                                  "--gpus", "8", "--global-batch", "64"])
    assert r.exit_code == 2, r.output + r.stderr
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and fragment in lines[0], r.stderr
