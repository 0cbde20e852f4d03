"""Defects the first real run of an emitted job found (issue 10): each of these stopped launch.sh on a
machine with CUDA 13 and without NVIDIA apex's CUDA extensions, or kept the probe from shortening a run.
Each test fails on the emitter before the fix (d71457a)."""
import os
import stat
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

import planner
from planner.emit.megatron_ds import build_job
from planner.emit.writer import render_files

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


@pytest.fixture(scope="module")
def result():
    return planner.plan(model="llama2-7b", cluster="H100-SXM", gpus=8, global_batch=64, method="lattice",
                        choices={"tp": [1], "pp": [1], "zero": [1], "flash_attention": [True]})


def test_flash_attention_turns_off_the_fused_softmax_it_replaces(result):
    # Left on, Megatron JIT-builds its fused softmax kernels at start (initialize.py _compile_dependencies
    # -> fused_kernels.load) with -gencode for sm_70, which CUDA 13's nvcc refuses: the job never trains.
    layout = result.best.layout
    assert layout.flash_attention
    argv = build_job(result.model, layout).argv
    assert "--use-flash-attn-v2" in argv and "--no-masked-softmax-fusion" in argv
    plain = build_job(result.model, replace(layout, flash_attention=False)).argv
    assert "--no-masked-softmax-fusion" not in plain       # the unfused path uses the fused softmax


def test_gradient_accumulation_fusion_is_off(result):
    # A no-op at the pinned commit (core/tensor_parallel/layers.py:360-368 commented out), yet on by
    # default it requires apex's fused_weight_gradient_mlp_cuda in every linear layer (layers.py:592).
    assert "--no-gradient-accumulation-fusion" in build_job(result.model, result.best.layout).argv


def _fake_launcher(tmp_path: Path) -> dict:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("deepspeed", "torchrun"):
        p = bin_dir / name
        p.write_text('#!/bin/bash\nfor a in "$@"; do printf "%s\\n" "[$a]"; done\n')
        p.chmod(p.stat().st_mode | stat.S_IEXEC)
    return dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}")


@pytest.mark.parametrize("launcher", ["deepspeed", "torchrun"])
def test_launch_sh_passes_its_own_arguments_on_last(result, tmp_path, launcher):
    files = render_files(result, launcher=launcher)
    job = tmp_path / "job"
    job.mkdir()
    (job / "launch.sh").write_bytes(files["launch.sh"])
    out = subprocess.run(["bash", str(job / "launch.sh"), "--log-interval", "1", "--save", ""],
                         env=_fake_launcher(tmp_path), capture_output=True, text=True, check=True).stdout
    words = out.splitlines()
    assert words[-4:] == ["[--log-interval]", "[1]", "[--save]", "[]"]
    assert "[--train-iters]" in words                      # the planned arguments come first, unchanged


def test_golden_launch_scripts_forward_their_arguments():
    for script in GOLDEN.glob("*/launch.sh"):
        assert script.read_text().count('"${ARGS[@]}" "$@"') == 2, script
