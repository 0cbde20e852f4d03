"""Emitters as a registry (issue 12, One house): the writer asks the framework profile's target for the
job files and adds only the target-neutral ones (plan.json, report.md, figures)."""
import json
import os
from dataclasses import replace

import pytest

import planner
from costmodels.errors import SpecError
from planner.emit.emitter import Emitter
from planner.emit.targets import EMITTERS, emitter_for
from planner.emit.writer import render_files, write_plan


@pytest.fixture(scope="module")
def result():
    return planner.plan("gpt-1.7b", "H100-SXM", gpus=8, global_batch=64, top_k=2)


def _dummy_render(result, launcher):
    layout = result.best.layout
    return {"run.sh": f"#!/bin/sh\necho tp={layout.tp} via {launcher}\n".encode(), "job.toml": b"x = 1\n"}, \
        {"dummy_job": {"tp": layout.tp}}


def _dummy_probe(result, k, launcher):
    return {"probe.sh": b"#!/bin/sh\n"}, {"candidates": k}


DUMMY = Emitter("dummy-target", "Dummy", _dummy_render, _dummy_probe)


def test_a_registered_second_emitter_is_used_for_a_profile_naming_it(result, monkeypatch, tmp_path):
    monkeypatch.setitem(EMITTERS, "dummy-target", DUMMY)
    other = replace(result, profile=replace(result.profile, name="dummy-fw", emitter="dummy-target"))
    assert emitter_for(other.profile) is DUMMY
    files = render_files(other, launcher="torchrun", probe=2)
    assert files["run.sh"] == f"#!/bin/sh\necho tp={result.best.layout.tp} via torchrun\n".encode()
    assert "launch.sh" not in files and "ds_config.json" not in files      # nothing of Megatron-DeepSpeed
    data = json.loads(files["plan.json"])
    assert data["dummy_job"] == {"tp": result.best.layout.tp} and data["probe"] == {"candidates": 2}
    assert "megatron_args" not in data and "report.md" in files
    out = write_plan(other, tmp_path / "job")
    assert os.access(out / "run.sh", os.X_OK) and not os.access(out / "job.toml", os.X_OK)


def test_an_unknown_target_is_a_clear_error(result):
    other = replace(result, profile=replace(result.profile, emitter="no-such-target"))
    with pytest.raises(SpecError, match="names the target 'no-such-target', which no emitter writes "
                                        r"\(known targets: megatron-deepspeed\)"):
        render_files(other)


def test_megatron_deepspeed_is_the_registered_target(result):
    assert emitter_for(result.profile) is EMITTERS["megatron-deepspeed"]
    assert {"launch.sh", "ds_config.json", "plan.json", "report.md"} <= set(render_files(result))


def test_a_profile_without_a_target_writes_the_plan_only_and_cannot_probe():
    lm = planner.plan("gpt-1.7b", "H100-SXM", gpus=8, global_batch=64, top_k=2, framework="megatron-lm")
    assert emitter_for(lm.profile) is None
    files = render_files(lm)
    assert "launch.sh" not in files and {"plan.json", "report.md"} <= set(files)
    with pytest.raises(SpecError, match="^--probe writes a Megatron-DeepSpeed job: it needs --framework "
                                        "megatron-deepspeed$"):
        render_files(lm, probe=2)
