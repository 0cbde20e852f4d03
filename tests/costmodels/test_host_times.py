"""The host time per counted kernel (`host_overhead`) against the emitted job's own host time, measured on
the CPU (benchmarks/gpu/host_time, benchmarks/data/host_times.yaml), and the arithmetic of its summarise
script. Issue 8, item 3: the constant was held up by vTrain alone; left out, it fell to a 20 us guess."""
from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest
import yaml

from costmodels import catalog
from costmodels.compute import _kernel_counts
from planner.validation import SOURCES, cases, records_from_vtrain

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "benchmarks" / "gpu" / "host_time"
# loaded from its file, as tests/costmodels/test_op_counts.py loads its summarise script
_spec = importlib.util.spec_from_file_location("host_time_summarise", HERE / "summarise.py")
summarise = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(summarise)


@pytest.fixture(scope="module")
def measured():
    return yaml.safe_load((ROOT / "benchmarks" / "data" / "host_times.yaml").read_text())


@pytest.fixture(scope="module")
def fit():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import fit as fitmod
    return fitmod


def _vtrain_job(measured):
    return next(j for j in measured["jobs"]
                if j["zero"] == 0 and j["recompute"] == "full" and j["precision"] == "fp16")


def test_the_timed_layer_is_vtrains_layer(tmp_path):
    """The timed job runs the layer vTrain's rows are predicted with: GPT-2 style, fp16, full recompute,
    ZeRO-0, no FlashAttention, dropout 0.1; so its counted kernels are the ones those rows are charged."""
    layers = yaml.safe_load((HERE / "layers.yaml").read_text())
    rules = SOURCES["vtrain"]
    assert (layers["norm"], layers["position"], layers["bias"], layers["gated_mlp"]) == ("layernorm", "learned", True, False)
    assert layers["hidden_dropout"] == layers["attention_dropout"] == rules["dropout"]
    assert layers["ffn_hidden"] == 4 * layers["hidden"] and layers["num_kv_heads"] == layers["num_heads"]
    assert (rules["zero"], rules["recompute"], rules["precision"], rules["flash"]) == (0, "full", "fp16", False)
    csv = tmp_path / "one.csv"
    csv.write_text("# GPUs,global batch,micro batch,hidden size,attention heads,# layers,sequence length,"
                   "tensor parallelism,data parallelism,pipeline parallelism,iteration time (ms)\n"
                   "2,8,1,1024,16,12,1024,2,1,1,100\n")
    m = cases(records_from_vtrain(csv))[0].model
    fwd, bwd = (float(x) for x in _kernel_counts(m, False))
    assert summarise.counted_kernels("full") == 2 * (fwd + 2) + (bwd + 2) == 88
    assert summarise.counted_kernels("none") == (fwd + 2) + (bwd + 2) == 66


def test_the_prior_of_host_overhead_is_the_measured_figure(measured, fit):
    """fit.py takes the measurement as its prior (it was a 20 us guess with sigma 0.7: left out, vTrain's
    rows were predicted with it and came out 23% off), and the measurement sits inside the bounds."""
    job = _vtrain_job(measured)
    (p,) = [p for p in fit.PARAMETERS if p.field == "host_overhead_s"]
    assert p.prior == pytest.approx(job["host_per_counted_kernel_us"] * 1e-6)
    assert p.sigma <= 0.3
    assert p.low < p.prior < p.high
    # the extrapolated host time is most of the per-layer time at the shortest sequence: the ops' arithmetic
    # on tiny tensors is a small part of what the CPU run measures
    shortest = min(job["per_layer_ms"])
    assert job["host_per_layer_ms"] >= 0.8 * job["per_layer_ms"][shortest]
    assert job["largest_residual_ms"] <= 0.1 * job["host_per_layer_ms"]


def test_fitted_host_overhead_agrees_with_the_measurement(measured):
    """The constant the step times fit (catalog) and the one the CPU measures agree within the prior's
    spread (a factor e^0.3): the host floor vTrain's small models show is the framework's host time."""
    job = _vtrain_job(measured)
    fitted = catalog.load_framework("megatron-deepspeed").host_overhead_s
    assert abs(math.log(fitted / (job["host_per_counted_kernel_us"] * 1e-6))) <= 0.3


def _report(per_call, micro=4, iterations=3, slow=None):
    calls = []
    for it in range(1, iterations + 1):
        for mb in range(micro):
            for call in ("forward", "backward"):
                t = per_call[call] * (5.0 if it == 1 else 1.0) * (3.0 if mb == micro - 1 else 1.0)
                t *= slow(it, mb) if slow else 1.0
                calls.append({"call": call, "iteration": it, "micro_batch": mb, "wall_s": t, "cpu_s": t})
        calls.append({"call": "step", "iteration": it, "micro_batch": micro - 1, "wall_s": 1.0, "cpu_s": 1.0})
    return {"calls": calls, "torch": "x", "threads": 1}


def test_summarise_takes_the_fastest_steady_micro_batch_per_layer_and_extrapolates(tmp_path):
    """Per job the smallest CPU time over steady micro-batches (not iteration 1, not the boundary
    micro-batch) and over passes; per layer the layers' difference; then host + b s^2 through s = 0."""
    import json
    host, b, outside = 3.0e-3, 0.3e-6, 1.0e-3
    for p in (1, 2):
        out = tmp_path / f"pass{p}"
        out.mkdir()
        for s in (20, 28, 40):
            for layers in (2, 8):
                layer = host + b * s * s
                per_call = {"forward": outside + layers * layer / 3, "backward": outside + layers * 2 * layer / 3}
                # the first pass is slowed down throughout, the second in one micro-batch only
                slow = (lambda it, mb: 1.4) if p == 1 else (lambda it, mb: 2.0 if (it, mb) == (2, 1) else 1.0)
                (out / f"z0-full-mbs1-s{s}-l{layers}-fp16.{100 * s + layers}.json").write_text(
                    json.dumps(_report(per_call, slow=slow)))
    times = summarise.job_times([tmp_path / "pass1", tmp_path / "pass2"])
    assert times["z0-full-mbs1-s20-l2-fp16"]["passes"] == 2
    by_seq = summarise.per_layer(times)[(0, "full", 1, "fp16")]
    assert by_seq[28] == pytest.approx(host + b * 28 * 28)
    got_host, got_b, resid = summarise.extrapolate(by_seq)
    assert got_host == pytest.approx(host) and got_b == pytest.approx(b) and resid < 1e-12


def test_zero3_hook_constants_are_the_measured_ones():
    """megatron-deepspeed.yaml's zero3_module_hooks are benchmarks/data/zero3_hooks.yaml's means (CPU time of
    DeepSpeed ZeRO-3's per-module hooks, in counted kernels of the same passes), and the two layer
    structures measured agree within a quarter: a cost per module, not per layer shape."""
    data = yaml.safe_load((ROOT / "benchmarks" / "data" / "zero3_hooks.yaml").read_text())
    fw = catalog.load_framework("megatron-deepspeed")
    assert fw.zero3_module_hooks_forward == data["forward_kernels_per_module"]
    assert fw.zero3_module_hooks_backward == data["backward_kernels_per_module"]
    for call in ("forward", "backward"):
        per_layer = [row[f"{call}_kernels_per_module"] for row in data["layers"]]
        assert len(per_layer) == 2 and max(per_layer) / min(per_layer) < 1.25
