"""Emitted Megatron-DeepSpeed jobs: golden files, DeepSpeed's own config parser, flag names."""
import json
import re
import subprocess
from pathlib import Path

import pytest

import planner
from planner.emit.shell import parse_args_block
from planner.emit.writer import render_files, write_plan

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
FLAGS_FILE = Path(__file__).resolve().parents[1] / "data" / "megatron_ds_flags.txt"
TEXT_FILES = ("launch.sh", "ds_config.json", "plan.json", "hostfile", ".deepspeed_env")

CASES = {
    # Llama GQA with bf16 and tensor parallelism, two nodes. (Megatron sequence parallelism is refused
    # under --deepspeed: test_sequence_parallel_is_refused_for_megatron_deepspeed.)
    "llama3-8b-gqa-bf16-tp2": dict(model="llama3.1-8b", cluster="H100-SXM", gpus=16, global_batch=256,
                                   choices={"tp": [2], "precision": ["bf16"], "cp": [1], "zero": [1]}),
    # Dense GPT (no GQA) in fp8 through Transformer Engine.
    "gpt-7.5b-fp8-te": dict(model="gpt-7.5b", cluster="H100-SXM", gpus=8, global_batch=512,
                            choices={"precision": ["fp8"], "cp": [1]}),
    # ZeRO-3 with CPU optimizer offload.
    "llama2-13b-zero3-offload": dict(model="llama2-13b", cluster="A100-40GB", gpus=8, global_batch=128,
                                     choices={"zero": [3], "offload_optimizer": ["cpu"], "cp": [1],
                                              "grad_comm": ["fp32"]}),
    # Pipeline parallelism across nodes with ZeRO-1.
    "gpt3-175b-pp-zero1": dict(model="gpt3-175b", cluster="A100-80GB", gpus=256, global_batch=1024,
                               choices={"pp": [8], "zero": [1], "cp": [1], "recompute": ["full"]}),
}


@pytest.fixture(scope="module")
def rendered():
    out = {}
    for name, kw in CASES.items():
        result = planner.plan(**kw)
        out[name] = (result, render_files(result))
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden_files(case, rendered, update_golden):
    _, files = rendered[case]
    folder = GOLDEN / case
    for name in TEXT_FILES:
        if name not in files:
            assert not (folder / name).exists() or update_golden, f"{case}/{name} no longer emitted"
            continue
        if update_golden:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / name).write_bytes(files[name])
        assert (folder / name).exists(), f"missing golden {case}/{name}; run pytest --update-golden"
        assert files[name] == (folder / name).read_bytes(), f"{case}/{name} differs from golden"


@pytest.mark.parametrize("case", sorted(CASES))
def test_outputs_have_no_timestamps_or_absolute_paths(case, rendered):
    _, files = rendered[case]
    for name in TEXT_FILES:
        text = files.get(name, b"").decode()
        assert "/work/" not in text and "/tmp/" not in text and "/root" not in text
        assert not re.search(r"\b[0-2]\d:[0-5]\d:[0-5]\d\b", text)  # no time of day (generation timestamps)


@pytest.mark.parametrize("case", sorted(CASES))
def test_deepspeed_accepts_the_json(case, rendered, monkeypatch):
    pytest.importorskip("deepspeed")
    from deepspeed.runtime.config import DeepSpeedConfig
    import deepspeed.comm as dist

    result, files = rendered[case]
    layout = result.best.layout
    monkeypatch.setattr(dist, "get_rank", lambda *a, **k: 0)   # no process group offline

    class FakeMpu:
        def get_data_parallel_world_size(self):
            return layout.dp * layout.cp

    cfg = json.loads(files["ds_config.json"])
    ds = DeepSpeedConfig(cfg, mpu=FakeMpu())
    assert ds.world_size == layout.dp * layout.cp
    assert ds.train_batch_size == layout.gbs
    assert ds.train_micro_batch_size_per_gpu == layout.mbs
    assert ds.gradient_accumulation_steps * layout.mbs * layout.dp * layout.cp == layout.gbs
    assert ds.zero_optimization_stage == layout.zero


def _known_flags():
    flags = set()
    for line in FLAGS_FILE.read_text().splitlines():
        if line.startswith("--"):
            flags.add(line.split("\t")[0])
    return flags


@pytest.mark.parametrize("case", sorted(CASES))
def test_launch_script_flags_exist_and_agree_with_plan_json(case, rendered):
    _, files = rendered[case]
    launch = files["launch.sh"].decode()
    plan = json.loads(files["plan.json"])
    argv = parse_args_block(launch)
    assert argv == plan["megatron_args"]
    known = _known_flags()
    used = [a for a in argv if a.startswith("--")]
    assert set(used) <= known, sorted(set(used) - known)
    # the JSON and the flags tell DeepSpeed the same thing (megatron_deepspeed.md §4)
    cfg = json.loads(files["ds_config.json"])
    assert int(argv[argv.index("--micro-batch-size") + 1]) == cfg["train_micro_batch_size_per_gpu"]
    assert int(argv[argv.index("--global-batch-size") + 1]) == cfg["train_batch_size"]
    assert int(argv[argv.index("--zero-stage") + 1]) == cfg["zero_optimization"]["stage"]


def test_flag_list_records_its_commit():
    head = FLAGS_FILE.read_text().splitlines()[:3]
    from planner.emit.megatron_ds import MEGATRON_DEEPSPEED_COMMIT
    assert any(MEGATRON_DEEPSPEED_COMMIT in line for line in head)


@pytest.mark.parametrize("case", sorted(CASES))
def test_launch_script_is_valid_bash(case, rendered, tmp_path):
    _, files = rendered[case]
    script = tmp_path / "launch.sh"
    script.write_bytes(files["launch.sh"])
    subprocess.run(["bash", "-n", str(script)], check=True)


def test_multi_node_environment_goes_through_deepspeed_env(rendered):
    _, files = rendered["llama3-8b-gqa-bf16-tp2"]
    assert b"CUDA_DEVICE_MAX_CONNECTIONS=1" in files[".deepspeed_env"]
    assert b"export CUDA_DEVICE_MAX_CONNECTIONS=1" in files["launch.sh"]
    assert files["hostfile"].count(b"slots=8") == 2


def test_figures_are_deterministic(rendered):
    result, files = rendered["gpt-7.5b-fp8-te"]
    again = render_files(result)
    for name in ("memory.png", "time.png", "layouts.png", "tradeoff.png"):
        assert files[name] == again[name]
        assert files[name].startswith(b"\x89PNG")


def test_write_is_atomic_and_refuses_existing_output(rendered, tmp_path):
    from costmodels.errors import SpecError
    result, _ = rendered["gpt-7.5b-fp8-te"]
    out = tmp_path / "job"
    write_plan(result, out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(SpecError, match="already exists"):
        write_plan(result, out)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    (out / "probe.sh").write_text("old")                 # an earlier plan's file: replaced with the rest
    write_plan(result, out, force=True)
    assert not (out / "probe.sh").exists() and (out / "launch.sh").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["job"]          # no temporary leftovers
    (out / "notes.txt").write_text("mine")                # not the planner's: --force refuses
    with pytest.raises(SpecError, match="holds 'notes.txt', which the planner did not write"):
        write_plan(result, out, force=True)
    assert (out / "notes.txt").read_text() == "mine"


def test_explain_rerenders_the_same_report(rendered, tmp_path):
    from planner.emit.plan_file import load_plan_json
    from planner.report import render_figures, render_report
    result, files = rendered["llama2-13b-zero3-offload"]
    (tmp_path / "plan.json").write_bytes(files["plan.json"])
    data = load_plan_json(tmp_path / "plan.json")
    assert render_report(data, figures=render_figures(data)).encode() == files["report.md"]


def test_sequence_parallel_is_refused_for_megatron_deepspeed():
    from costmodels.errors import InfeasibleError
    with pytest.raises(InfeasibleError, match="norm gradients"):
        planner.plan("llama3.1-8b", "H100-SXM", gpus=16, global_batch=256, choices={"sequence_parallel": [True]})
    r = planner.plan("llama3.1-8b", "H100-SXM", gpus=16, global_batch=256, framework="megatron-lm",
                     choices={"sequence_parallel": [True]})
    assert r.best.layout.sequence_parallel


def test_llama3_arguments(rendered):
    _, files = rendered["llama3-8b-gqa-bf16-tp2"]
    argv = json.loads(files["plan.json"])["megatron_args"]
    assert argv[argv.index("--rotary-position-embeddings-theta") + 1] == "500000"
    assert argv[argv.index("--num-key-value-heads") + 1] == "8"
    divisor = int(argv[argv.index("--make-vocab-size-divisible-by") + 1])
    assert divisor * 2 == 128256          # padded vocabulary = divisor x tp = the model's


def test_activation_offload_is_emitted_with_deepspeed_checkpointing():
    """--checkpoint-in-cpu acts only with --deepspeed-activation-checkpointing (initialize.py:186-194,
    megatron_deepspeed.md §4), which the full-recompute layouts already carry."""
    from costmodels.types import Layout, Offload, Precision, Recompute
    from planner.emit.megatron_ds import deepspeed_args, layout_args
    layout = Layout(tp=1, pp=1, dp=64, mbs=2, gbs=512, seq_len=8192, zero=3, recompute=Recompute.FULL,
                    precision=Precision.BF16, offload_activations=Offload.CPU)
    args = layout_args(layout) + deepspeed_args(layout)
    assert args.index("--checkpoint-in-cpu") > args.index("--deepspeed-activation-checkpointing")
    assert {a for a in args if a.startswith("--")} <= _known_flags()
    assert "--checkpoint-in-cpu" not in deepspeed_args(Layout(recompute=Recompute.FULL))
