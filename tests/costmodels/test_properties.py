"""Invariants of the cost model (hypothesis)."""
import importlib

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from costmodels import LayoutBatch, catalog, estimate, estimate_batch
from costmodels.types import Layout, Offload, Precision, Recompute

MODELS = ["llama2-7b", "gpt-1.7b", "llama3.1-8b", "gpt-22b"]
CLUSTER = catalog.load_cluster("H100-SXM", num_gpus=64)
FW = catalog.load_framework("megatron-deepspeed")

layouts = st.builds(
    dict,
    model=st.sampled_from(MODELS),
    tp=st.sampled_from([1, 2, 4, 8]), pp=st.sampled_from([1, 2, 4]), cp=st.sampled_from([1, 2]),
    mbs=st.sampled_from([1, 2, 4]), m=st.sampled_from([1, 4, 16]),
    seq=st.sampled_from([1024, 2048, 4096]), zero=st.integers(0, 3),
    recompute=st.sampled_from(list(Recompute)), sp=st.booleans(), flash=st.booleans(),
    precision=st.sampled_from([Precision.BF16, Precision.FP16, Precision.FP8]),
    vpp=st.sampled_from([1, 2]),
)


def make(d, **over):
    d = {**d, **over}
    dp = 64 // (d["tp"] * d["pp"] * d["cp"])
    return catalog.load_model(d["model"]), Layout(
        tp=d["tp"], pp=d["pp"], dp=dp, cp=d["cp"], vpp=d["vpp"], mbs=d["mbs"], gbs=d["mbs"] * dp * d["m"],
        seq_len=d["seq"], zero=d["zero"], recompute=d["recompute"], sequence_parallel=d["sp"],
        flash_attention=d["flash"], precision=d["precision"])


@settings(max_examples=150, deadline=None)
@given(layouts)
def test_memory_never_falls_as_micro_batch_grows(d):
    model, small = make(d)
    _, big = make(d, mbs=d["mbs"] * 2)
    assert estimate(model, CLUSTER, FW, big).memory.total >= estimate(model, CLUSTER, FW, small).memory.total - 1


@settings(max_examples=150, deadline=None)
@given(layouts)
def test_memory_never_falls_as_micro_batch_grows_at_fixed_global_batch(d):
    model, small = make(d, m=16)
    big = small.replace(mbs=small.mbs * 2)
    assert estimate(model, CLUSTER, FW, big).memory.total >= estimate(model, CLUSTER, FW, small).memory.total - 1


@settings(max_examples=150, deadline=None)
@given(layouts)
def test_memory_never_falls_as_sequence_grows(d):
    model, short = make(d)
    _, long = make(d, seq=d["seq"] * 2)
    assert estimate(model, CLUSTER, FW, long).memory.total >= estimate(model, CLUSTER, FW, short).memory.total - 1


@settings(max_examples=150, deadline=None)
@given(layouts)
def test_model_state_memory_never_rises_with_zero_stage(d):
    model, layout = make(d)
    states = [estimate(model, CLUSTER, FW, layout.replace(zero=z)).memory.model_states for z in range(4)]
    assert all(b <= a + 1 for a, b in zip(states, states[1:]))


@settings(max_examples=150, deadline=None)
@given(layouts)
def test_activation_memory_never_rises_with_stronger_recompute(d):
    model, layout = make(d)
    acts = [estimate(model, CLUSTER, FW, layout.replace(recompute=r)).memory.activations
            for r in (Recompute.NONE, Recompute.SELECTIVE, Recompute.FULL)]
    assert acts[1] <= acts[0] + 1 and acts[2] <= acts[1] + 1


@settings(max_examples=40, deadline=None)
@given(st.lists(layouts, min_size=2, max_size=12))
def test_scalar_and_vectorised_estimates_agree(ds):
    model = catalog.load_model(ds[0]["model"])
    rows = [make({**d, "model": ds[0]["model"]})[1] for d in ds]
    batch = estimate_batch(model, CLUSTER, FW, LayoutBatch.from_layouts(rows))
    for i, layout in enumerate(rows):
        one = estimate(model, CLUSTER, FW, layout)
        assert np.isclose(batch.step_time_s[i], one.step_time_s, rtol=1e-12)
        assert np.isclose(batch.peak_memory_bytes[i], one.memory.total, rtol=1e-12)


def test_breakdowns_add_up():
    model = catalog.load_model("llama2-70b")
    layout = Layout(tp=8, pp=4, dp=2, mbs=1, gbs=256, seq_len=4096, zero=1, recompute=Recompute.FULL,
                    sequence_parallel=True)
    """The parts each breakdown shows add up to the step time and the peak memory that the vectorised
    estimator ranks by (its own `step_time_s` and `peak_memory_bytes` columns), so no cost is ranked
    that the report's breakdown leaves out, or shown and not ranked."""
    e = estimate(model, CLUSTER, FW, layout)
    batch = estimate_batch(model, CLUSTER, FW, LayoutBatch.from_layouts([layout]))
    d = e.to_dict()
    parts = {k: v for k, v in d["time_breakdown_s"].items() if k != "step"}
    assert len(parts) >= 10 and all(v >= 0 for v in parts.values())
    assert sum(parts.values()) == pytest.approx(float(batch.step_time_s[0]), rel=1e-9)
    memory = {k: v for k, v in d["memory_breakdown_bytes"].items()
              if k not in ("allocated", "reserved", "total", "step_peak")}     # step_peak: another moment
    assert len(memory) >= 8 and all(v >= 0 for v in memory.values())
    assert sum(memory.values()) == pytest.approx(float(batch.peak_memory_bytes[0]), rel=1e-9)


def test_offload_trades_memory_for_time():
    model = catalog.load_model("llama2-13b")
    cluster = catalog.load_cluster("A100-80GB", num_gpus=8)
    base = Layout(tp=1, pp=1, dp=8, mbs=1, gbs=64, seq_len=4096, zero=2)
    off = base.replace(offload_optimizer=Offload.CPU)
    a, b = estimate(model, cluster, FW, base), estimate(model, cluster, FW, off)
    assert b.memory.total < a.memory.total and b.step_time_s > a.step_time_s


@settings(max_examples=120, deadline=None)
@given(model=st.sampled_from(MODELS), tp=st.sampled_from([1, 8]), pp=st.integers(1, 32),
       mbs=st.sampled_from([1, 2]), fw=st.sampled_from(["megatron-deepspeed", "megatron-core", "torchtitan",
                                                        "megatron-bridge", "llm-foundry"]),
       flash=st.booleans(), recompute=st.sampled_from(list(Recompute)))
def test_nothing_offloaded_costs_no_offload_time(model, tp, pp, mbs, fw, flash, recompute):
    """Whatever the stage sizes (down to one layer per stage, where a review found the activation
    offload term charging a layer's forward and backward with nothing offloaded)."""
    m = catalog.load_model(model)
    pp = min(pp, m.num_layers) if tp == 8 else min(pp, 8)     # whole 8-GPU nodes, or one smaller node
    cluster = catalog.load_cluster("H100-SXM", num_gpus=tp * pp, gpus_per_node=min(8, tp * pp))
    layout = Layout(tp=tp, pp=pp, dp=1, mbs=mbs, gbs=mbs * 4, seq_len=2048, zero=1, recompute=recompute,
                    flash_attention=flash, precision=Precision.BF16)
    framework = catalog.load_framework(fw)
    assert estimate(m, cluster, framework, layout).time.offload == 0.0
    batch = estimate_batch(m, cluster, framework, LayoutBatch.from_layouts([layout]))
    assert float(batch.columns["time_offload"][0]) == 0.0


@settings(max_examples=15, deadline=None)
@given(st.lists(layouts, min_size=5, max_size=20))
def test_chunked_batches_equal_one_pass(ds):
    """Above CHUNK rows the batch is scored in chunks (in threads) written into preallocated columns:
    every column, fit flags included, must equal the one-pass result row for row."""
    E = importlib.import_module("costmodels.estimate")     # the module, not the function of that name
    model = catalog.load_model(ds[0]["model"])
    batch = LayoutBatch.from_layouts([make({**d, "model": ds[0]["model"]})[1] for d in ds])
    whole = estimate_batch(model, CLUSTER, FW, batch).columns
    old = E.CHUNK
    try:
        E.CHUNK = 3
        chunked = estimate_batch(model, CLUSTER, FW, batch).columns
    finally:
        E.CHUNK = old
    assert set(chunked) == set(whole)
    for k in whole:
        assert chunked[k].dtype == np.asarray(whole[k]).dtype, k
        assert np.array_equal(chunked[k], np.broadcast_to(whole[k], chunked[k].shape), equal_nan=True), k


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 2**40), min_size=1, max_size=50), st.sampled_from([1, 2, 3, 4, 7, 8, 12, 128]))
def test_whole_is_the_modulo_test(values, d):
    """vec.whole(x / d) replaces `x % d == 0` on whole-number floats (numpy's float modulo is ten
    times slower): the same answer for arrays and for plain numbers, fractions included."""
    from costmodels.vec import whole
    x = np.array(values, dtype=float)
    assert np.array_equal(whole(x / d), x % d == 0)
    assert [whole(v / d) for v in values] == [v % d == 0 for v in values]
    assert not whole(np.array([0.5, 2.25])).any() and whole(3.0) and not whole(1.5)
