"""Bad argument types and shapes to the Python API (planner.estimate / plan / write_job, PlanResult.write)
are refused at the boundary with a one-line SpecError naming the argument and what it takes, never a
TypeError / ValueError / AttributeError / OverflowError from deep inside (fuzzing review)."""
from __future__ import annotations

import math
import re

import pytest

import planner
from costmodels.errors import SpecError

MODEL, CLUSTER = "gpt-1.7b", "H100-SXM"
SMALL = dict(gpus=8, global_batch=64)            # a tiny, fast search


@pytest.fixture(scope="module")
def result():
    return planner.plan(MODEL, CLUSTER, **SMALL, top_k=2, advice=False)


@pytest.mark.parametrize("case, fragment", [
    (5, "case: expected a case YAML path"),
    ([1], "case: expected a case YAML path"),
    (b"path", "decode a bytes path first"),
])
def test_estimate_refuses_a_case_of_the_wrong_type(case, fragment):
    with pytest.raises(SpecError, match=re.escape(fragment)):
        planner.estimate(case)


@pytest.mark.parametrize("kwargs, fragment", [
    # global_batch_tokens: a (low, high) pair of numbers or the CLI's text
    (dict(global_batch_tokens="1X-4M"), "global_batch_tokens takes a (low, high) pair"),
    (dict(global_batch_tokens=(1,)), "global_batch_tokens takes a (low, high) pair"),
    (dict(global_batch_tokens=(1, 2, 3)), "global_batch_tokens takes a (low, high) pair"),
    (dict(global_batch_tokens=5), "global_batch_tokens takes a (low, high) pair"),
    (dict(global_batch_tokens=("a", "b")), "global_batch_tokens takes a (low, high) pair"),
    (dict(global_batch_tokens=(True, 2**20)), "global_batch_tokens takes a (low, high) pair"),
    (dict(global_batch_tokens=(math.inf, math.inf)), "give finite token counts"),
    (dict(global_batch_tokens=(10**400, 10**400)), "give finite token counts"),
    # seq_lens: whole numbers only, never cut (4096.5 is not 4096)
    (dict(SMALL, seq_lens=[2048.5]), "seq_lens takes a whole number of tokens"),
    (dict(SMALL, seq_lens=[math.inf]), "seq_lens takes a whole number of tokens"),
    (dict(SMALL, seq_lens=["a"]), "seq_lens takes a whole number of tokens"),
    (dict(SMALL, seq_lens="abc"), "seq_lens takes a whole number of tokens"),
    (dict(SMALL, seq_lens=[True]), "seq_lens takes a whole number of tokens"),
    (dict(SMALL, seq_lens={"a": 1}), "seq_lens takes a whole number of tokens"),
    # global_batch: a whole number of sequences, never cut (64.5 is not 64)
    (dict(gpus=8, global_batch=64.5), "global_batch takes a positive whole number"),
    (dict(gpus=8, global_batch="abc"), "global_batch takes a positive whole number"),
    (dict(gpus=8, global_batch=math.nan), "global_batch takes a positive whole number"),
    (dict(gpus=8, global_batch=math.inf), "global_batch takes a positive whole number"),
    (dict(gpus=8, global_batch=[1]), "global_batch takes a positive whole number"),
    (dict(gpus=8, global_batch=True), "global_batch takes a positive whole number"),
    # framework: a name
    (dict(SMALL, framework=3), "framework takes a framework name"),
    # choices: a mapping of knob name to values
    (dict(SMALL, choices=[1]), "choices takes a mapping of knob name"),
    (dict(SMALL, choices=5), "choices takes a mapping of knob name"),
    (dict(SMALL, choices={1: [4]}), "knob names are strings"),
    (dict(SMALL, choices={"tp": [4.5]}), "choices['tp'] takes whole numbers"),
    (dict(SMALL, choices={"tp": math.inf}), "choices['tp'] takes whole numbers"),
    # callbacks
    (dict(SMALL, progress=5), "progress takes a function"),
    (dict(SMALL, notify=5), "notify takes a function"),
])
def test_plan_refuses_arguments_of_the_wrong_type(kwargs, fragment):
    with pytest.raises(SpecError, match=re.escape(fragment)):
        planner.plan(MODEL, CLUSTER, **{"gpus": 8, **kwargs})


@pytest.mark.parametrize("call, fragment", [
    (lambda res, d: planner.write_job(res, 5), "out: expected a directory path"),
    (lambda res, d: res.write(5), "out: expected a directory path"),
    (lambda res, d: planner.write_job(res, b"/tmp/x"), "decode a bytes path first"),
    (lambda res, d: planner.write_job(res, None), "out: expected a directory path"),
    (lambda res, d: planner.write_job(None, d / "job"), "write_job takes the PlanResult"),
    (lambda res, d: planner.write_job("job", d / "job"), "write_job takes the PlanResult"),
    (lambda res, d: res.write(d / "job", probe="x"), "probe"),
])
def test_write_refuses_arguments_of_the_wrong_type(result, tmp_path, call, fragment):
    with pytest.raises(SpecError, match=re.escape(fragment)):
        call(result, tmp_path)
    assert not (tmp_path / "job").exists()


def test_valid_calls_still_work(result, tmp_path):
    assert result.best is not None and result.request.global_batch == 64
    res = planner.plan(MODEL, CLUSTER, **SMALL, seq_lens=[2048], top_k=1, advice=False)
    assert res.request.seq_lens == (2048,)
    res = planner.plan(MODEL, CLUSTER, gpus=8, global_batch_tokens=(2**20, 2**22), top_k=1, advice=False)
    assert res.request.global_batch_tokens == (2**20, 2**22)
    assert planner.write_job(result, tmp_path / "job").is_dir()


@pytest.mark.parametrize("kwargs, attr, expected", [
    (dict(SMALL, seq_lens=2048), "seq_lens", (2048,)),                    # one length, not a list
    (dict(SMALL, seq_lens=2048.0), "seq_lens", (2048,)),                  # a whole float
    (dict(gpus=8, global_batch=64.0), "global_batch", 64),
    (dict(gpus=8, global_batch_tokens="1M-4M"), "global_batch_tokens", (2**20, 2**22)),   # the CLI's text
    (dict(gpus=8, global_batch_tokens=[2**20, 2**22]), "global_batch_tokens", (2**20, 2**22)),
])
def test_friendly_forms_are_accepted(kwargs, attr, expected):
    res = planner.plan(MODEL, CLUSTER, **kwargs, top_k=1, advice=False)
    value = getattr(res.request, attr)
    assert value == expected and type(value) is type(expected)        # 64, not 64.0; a tuple, not a list
