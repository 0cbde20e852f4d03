"""Defects of issue 8 (cost model out of sample): each test fails on the code before its fix."""
from dataclasses import replace

import pytest

import planner
from costmodels import catalog
from costmodels.errors import InfeasibleError, SpecError
from costmodels.gemm import gemm_efficiency_of_shape
from costmodels.types import BF16
from costmodels.units import GiB


def _llama7b_8xh100(zero, **extra):
    parallel = {"tp": 1, "pp": 1, "dp": 8, "micro_batch": 1, "global_batch": 64, "zero_stage": zero,
                "precision": "bf16", "recompute": "full", **extra}
    return planner.estimate(model="llama2-7b", cluster={"gpu": "H100-SXM", "num_gpus": 8},
                            parallel=parallel).estimate


def test_bf16_zero1_uses_deepspeeds_zero_optimizer_memory():
    """Item 4: at ZeRO-1 the emitted job runs DeepSpeedZeroOptimizer, 4 + 12/dp bytes per parameter
    through forward and backward and 2 + 20/dp at the step (stage_1_and_2.py: the gradient partition,
    its flat copy and the fp32 copy; traced on the CPU, benchmarks/data/mem_traces.yaml), not
    BF16_Optimizer's 8 + 12/dp: Llama-2 7B on 8 H100 fits (was 88 GiB)."""
    est = _llama7b_8xh100(1)
    params = 6.74e9
    states = est.memory.grads + est.memory.optimizer
    assert states / params == pytest.approx(2 + 12 / 8, rel=0.02)
    assert est.memory.step_peak / params == pytest.approx(2 + 20 / 8, rel=0.02)
    assert est.fits and est.peak_memory_bytes < 60 * GiB


def test_bf16_optimizer_reduction_is_not_overlapped():
    """Item 4: BF16_Optimizer (ZeRO-0 + bf16) all-reduces after backward with no hooks
    (bf16_optimizer.py:321-346): none of it hides behind backward; ZeRO-1's bucketed reduce does."""
    z0 = _llama7b_8xh100(0)
    z1 = _llama7b_8xh100(1)
    assert z0.time.dp_comm > 2.0 * z1.time.dp_comm
    assert z0.time.dp_comm > 0.05


def test_emitted_ds_config_selects_the_modelled_optimizer():
    from costmodels.types import Layout, Precision
    from planner.emit.megatron_ds import ds_config
    z1 = ds_config(Layout(dp=8, gbs=64, zero=1, precision=Precision.BF16))
    z0 = ds_config(Layout(dp=8, gbs=64, zero=0, precision=Precision.BF16))
    assert z1.get("data_types", {}).get("grad_accum_dtype") != "fp32"      # -> DeepSpeedZeroOptimizer
    assert z0["data_types"]["grad_accum_dtype"] == "fp32"                    # -> BF16_Optimizer


def test_zeropp_with_bf16_is_refused_for_megatron_deepspeed():
    """DeepSpeed 0.16.2's ZeRO++ quantisation kernels read their input as fp16 (pt_binding.cpp)."""
    with pytest.raises(InfeasibleError, match="fp16"):
        planner.plan("geniac-12.3b", "H100-SXM", gpus=48, global_batch=1536,
                     choices={"grad_comm": ["zeropp"], "precision": ["bf16"], "zero": [3]})


def test_gemm_efficiency_depends_on_shape():
    """Item 3: wave quantisation and small dimensions lower the GEMM rate; large GEMMs reach the
    fitted large-GEMM efficiency. vTrain's tp 8 QKV GEMM (1024 x 384 x 1024) on A100 is far below."""
    gpu = catalog.load_gpu("A100-80GB")
    peak = gpu.peak_flop_per_s["bf16"]
    big = gemm_efficiency_of_shape(8192, 8192, 8192, gpu, peak)
    skinny = gemm_efficiency_of_shape(1024, 384, 1024, gpu, peak)
    assert big == pytest.approx(gpu.gemm_efficiency, rel=0.05)
    assert skinny < 0.7 * big
    # One tile past a full wave costs a wave: 109 tiles of 128x128 on 108 SMs (other tiles recover some).
    t = gemm_efficiency_of_shape(128 * 109, 128, 8192, gpu, peak)
    assert t < 0.7 * big


def test_host_overhead_is_physical():
    """Item 3: the per-kernel host cost is one constant shared by every framework, inside eager
    PyTorch's range (5-20 us per Python-level op, about 2 ops per counted kernel), not 57 us."""
    values = {catalog.load_framework(name).host_overhead_s
              for name in ("megatron-deepspeed", "megatron-lm", "torchtitan", "megatron-core", "llm-foundry")}
    assert len(values) == 1
    value = values.pop()
    assert 3e-6 <= value <= 40e-6
    # not below the CPU side of the same op sequence, measured by benchmarks/host_overhead.py
    assert value >= 13e-6


def test_blackwell_gemm_efficiency_is_physical():
    """Item 2: Blackwell dense GEMMs at 28% of peak is not physical; B200 and GB200 take Hopper's
    fitted fraction of their own data-sheet peak (ASSUMED, no production run)."""
    h100 = catalog.load_gpu("H100-SXM")
    for name in ("B200", "GB200"):
        assert catalog.load_gpu(name).gemm_efficiency == pytest.approx(h100.gemm_efficiency)


def test_fsdp_with_pipeline_keeps_the_stage_gathered():
    """Item 7: torchtitan's FSDP2 under a pipeline schedule does not reshard after forward, and the
    pipelining stage accumulates fp32 gradients unsharded until the last micro-batch. Llama 3.1 405B,
    tp 8 / pp 8 / FSDP 8 on 512 H100 (held-out, torchtitan 2024-12): 72.7-84.9 GiB reserved measured;
    predicted 39.7 GiB before this was modelled. Since the 1F1B runs take torchtitan's own split
    (15 / 16 x 6 / 15 layers, generate_split_points over pp stages), their first stage holds one layer
    fewer and two of the four read 11-14% above the model (the 256K-token context-parallel run and
    the 1F1B run): within 15%, not 10%, a known miss (README, held-out memory)."""
    from benchmarks.heldout import load_heldout
    from planner.validation import evaluate
    runs = [r for r in load_heldout() if r.id.startswith(("torchtitan-202412-t5", "torchtitan-202412-t6"))]
    assert len(runs) == 4
    errors = {res.record.id: res.memory_error for res in evaluate(runs)}
    assert all(abs(e) <= 0.15 for e in errors.values()), errors
    assert sum(abs(e) <= 0.10 for e in errors.values()) >= 2, errors


def test_torchtitan_loss_parallel_holds_more_of_the_logits():
    """Item 7: with tp > 1 torchtitan runs the loss under loss_parallel, whose decomposed DTensor
    log-softmax holds one more fp32 copy of the vocabulary-sharded logits (14 bytes per logit, 10 on the
    fused path). Llama 3.1 70B, FSDP 32 x TP 8 on 256 H100 (held-out, torchtitan 2024-12): 71.9 and
    67.6 GiB reserved measured; 57.4 predicted (-20%, -15%) before."""
    from benchmarks.heldout import load_heldout
    from costmodels.memory import logits_bytes
    from planner.validation import evaluate
    model = catalog.load_model("llama3.1-8b")
    titan = catalog.load_framework("torchtitan")
    assert logits_bytes(model, 1000, 1, titan) == pytest.approx(1000 * model.vocab * 10)
    assert logits_bytes(model, 1000, 8, titan) == pytest.approx(1000 * model.vocab / 8 * 14)
    mds = catalog.load_framework("megatron-deepspeed")           # vocab-parallel at every tp: one path
    # 16-bit logits, their fp32 copy, the max-subtracted fp32 logits (traced: benchmarks/data/mem_traces.yaml)
    assert logits_bytes(model, 1000, 8, mds) == pytest.approx(1000 * model.vocab / 8 * 10)
    runs = [r for r in load_heldout() if r.id.startswith("torchtitan-202412-t4-70b-2d")]
    assert len(runs) == 2
    for res in evaluate(runs):
        assert abs(res.memory_error) <= 0.10, (res.record.id, res.memory_error)


def test_torchtitan_from_april_2025_compiles_the_loss():
    """torchtitan compiles the loss with --training.compile from bbb1b616e (2025-04-02): no fp32 logits,
    4 bytes per logit. Llama 3.1 8B fp8 on 64 H200 (held-out, torchtitan 2025-06): 47.0 GiB reserved
    measured; 63.2 predicted (+35%) when read as the December 2024 code, whose loss stayed eager. With
    the compiled loss +7.1% at the hand-set allocator overhead (0.10), +10.4% at the fitted one (0.134),
    +6.9% since the compile factor is fitted (0.811, was set by hand at 0.85) and no staging is set by
    hand: the bound is 10%, far below the eager reading's error."""
    from benchmarks.heldout import load_heldout
    from planner.validation import cases, evaluate
    runs = {r.id: r for r in load_heldout()}
    h200 = runs["torchtitan-202506-h200-llama31-8b-fp8-64gpu"]
    assert cases([h200])[0].framework.name == "torchtitan-compile-2025"
    assert cases([runs["torchtitan-202412-t4-70b-2d-256gpu"]])[0].framework.name == "torchtitan-compile"
    assert catalog.load_framework("torchtitan-compile-2025").logits_bytes_per_element == 4
    (res,) = evaluate([h200])
    assert abs(res.memory_error) <= 0.10, res.memory_error


def test_fsdp_pipeline_gathers_once_per_step():
    """The same behaviour in time: one all-gather and one reduce-scatter per step, not per micro-batch."""
    from costmodels.estimate import estimate
    from costmodels.types import Layout, Precision, Recompute
    model = catalog.load_model("llama3.1-70b")
    cluster = catalog.load_cluster("H100-SXM", num_gpus=64)
    layout = Layout(tp=8, pp=2, dp=4, mbs=1, gbs=64, seq_len=4096, zero=3, recompute=Recompute.FULL,
                    precision=Precision.BF16)
    titan = catalog.load_framework("torchtitan")
    per_mb = estimate(model, cluster, replace(titan, fsdp_pp_unsharded=False), layout)
    once = estimate(model, cluster, titan, layout)
    assert once.time.zero_comm < per_mb.time.zero_comm / 4
    assert once.memory.weights > per_mb.memory.weights
    assert once.memory.grads > per_mb.memory.grads


def test_vtrain_host_bound_floor(validation_dir):
    """Item 3: vTrain's Megatron-DeepSpeed rows at tp 2, hidden 1024 take 83-90 ms per micro-batch
    whether it holds 1, 2 or 4 sequences: a host-bound floor. The model reproduces it (was 20-55% fast)."""
    from planner.validation import evaluate, records_from_vtrain
    rows = records_from_vtrain(validation_dir / "vtrain" / "ground_truth_single.csv")
    pick = [r for r in rows if r.case["parallel"]["tp"] == 2 and r.case["parallel"]["pp"] == 1
            and r.case["model"]["hidden_size"] == 1024 and r.case["model"]["num_layers"] == 24
            and r.case["parallel"]["micro_batch"] in (1, 2, 4)]
    assert len(pick) >= 20
    errors = [res.step_error for res in evaluate(pick)]
    assert sum(abs(e) for e in errors) / len(errors) <= 0.15


def test_all_reduce_matches_measured_nccl():
    """Collectives against measured NCCL: vTrain's nccl-tests all-reduce table on its A100 node
    (2-8 GPUs, 1 MiB-1 GiB; benchmarks/data/nccl). The per-call latency and the NVSwitch bus
    efficiency bring the model from 24% to about 6% mean error."""
    import csv
    from pathlib import Path
    from costmodels.comm import all_reduce_time
    table = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "nccl" / "vtrain_allreduce.csv"
    rows = [r for r in csv.DictReader(table.open()) if r["gpu"] == "A100"]
    assert len(rows) == 77
    cluster = catalog.load_cluster("A100-80GB", num_gpus=8, gpus_per_node=8)
    errors = []
    for r in rows:
        n, size = int(r["num_gpus"]), float(r["size_bytes"])
        errors.append(float(all_reduce_time(size, n, n, cluster)) / (float(r["time_us"]) * 1e-6) - 1.0)
    assert sum(abs(e) for e in errors) / len(errors) <= 0.10
    assert max(abs(e) for e in errors) <= 0.25


def test_zeropp_quantisation_kernels_cost_time():
    """Item 5: ZeRO++'s quantise / dequantise kernels are memory-bound work on the gather path; with a
    free network the ZeRO++ layout is not free (the kernels read and write every gathered weight)."""
    from costmodels.estimate import estimate
    from costmodels.types import GradComm, Layout, Precision
    model = catalog.load_model("llama2-13b")
    cluster = replace(catalog.load_cluster("A100-80GB", num_gpus=16), network_bytes_per_s=1e15,
                      nvlink_bytes_per_s=1e15, network_latency_s=0.0, nvlink_latency_s=0.0,
                      collective_latency_s=0.0)
    fw = replace(catalog.load_framework("megatron-deepspeed"), zero3_overlap=0.0)
    base = dict(tp=1, pp=1, dp=16, mbs=1, gbs=64, seq_len=4096, zero=3, precision=Precision.FP16)
    plain = estimate(model, cluster, fw, Layout(**base, grad_comm=GradComm.BF16))
    zpp = estimate(model, cluster, fw, Layout(**base, grad_comm=GradComm.ZEROPP))
    params_per_gpu = 13.0e9                   # no recompute: 2 gathers (qwZ) and one qgZ reduction
    hbm = cluster.gpu.hbm_bytes_per_s * cluster.gpu.hbm_efficiency
    per_mb = params_per_gpu * (2 * 6.0 + 5.0) / hbm
    assert zpp.time.zero_comm - plain.time.zero_comm == pytest.approx(4 * per_mb, rel=0.05)


def test_uneven_pipeline_is_expressible():
    """Item 6: Megatron-Core's uneven split, e.g. Llama 3.1 405B's 126 layers on 16 stages with one
    layer fewer on the first and the last (Dubey et al. 2024, §3.3.2): 7 / 8 x 14 / 7."""
    parallel = {"tp": 8, "pp": 16, "dp": 8, "micro_batch": 1, "global_batch": 512, "zero_stage": 1,
                "recompute": "full", "sequence_parallel": True, "precision": "bf16",
                "first_stage_layers": 7, "last_stage_layers": 7}
    est = planner.estimate(model="llama3.1-405b", cluster={"gpu": "H100-SXM", "num_gpus": 1024},
                           framework="megatron-core", parallel=parallel).estimate
    assert est.stage_layers == (7,) + (8,) * 14 + (7,)
    # The middle stages pace the pipeline: the step equals the even split whose stages all hold 8.
    even = planner.estimate(model="llama3.1-405b", cluster={"gpu": "H100-SXM", "num_gpus": 1024},
                            framework="megatron-core",
                            parallel={**parallel, "first_stage_layers": 0, "last_stage_layers": 0}).estimate
    assert est.step_time_s == pytest.approx(even.step_time_s, rel=0.01)
    with pytest.raises(SpecError, match="do not split evenly over the 14 middle stages"):
        planner.estimate(model="llama3.1-405b", cluster={"gpu": "H100-SXM", "num_gpus": 1024},
                         framework="megatron-core", parallel={**parallel, "last_stage_layers": 6})


def test_uneven_split_with_interleaving_is_expressible():
    """Item 6: the uneven split with vpp, as Megatron-Core takes it (Llama 3 405B ran 7 / 8 x 14 / 7
    under an interleaved schedule). --account-for-embedding/loss-in-pipeline-split counts the embedding
    and the loss as a layer each, so every stage holds 8 and 8 % vpp must be 0; the
    --decoder-first/last-pipeline-num-layers path needs each count divisible by vpp (Megatron-LM
    d98e8a64dd transformer_config.py:2306-2335). It was refused ("not modelled yet")."""
    parallel = {"tp": 8, "pp": 16, "dp": 8, "micro_batch": 1, "global_batch": 512, "zero_stage": 1,
                "recompute": "full", "sequence_parallel": True, "precision": "bf16",
                "first_stage_layers": 7, "last_stage_layers": 7}
    run = dict(model="llama3.1-405b", cluster={"gpu": "H100-SXM", "num_gpus": 1024}, framework="megatron-core")
    flat = planner.estimate(**run, parallel=parallel).estimate
    chunks = planner.estimate(**run, parallel={**parallel, "vpp": 2}).estimate
    assert chunks.stage_layers == (7,) + (8,) * 14 + (7,)
    # The interleaved schedule halves the fill and drain (Narayanan et al. 2021, §2.2.2).
    assert chunks.time.bubble == pytest.approx(flat.time.bubble / 2, rel=0.05)
    assert chunks.step_time_s < flat.step_time_s
    # 6 + 8 divisible by 2, the middle 8 too: the first/last-layers path.
    planner.estimate(**run, parallel={**parallel, "vpp": 2, "first_stage_layers": 6, "last_stage_layers": 8})
    with pytest.raises(SpecError, match="must each be divisible by vpp"):
        planner.estimate(**run, parallel={**parallel, "vpp": 16})


def test_heldout_interleaved_runs_are_read_with_their_chunks():
    """torchtitan @ 9dec370 runs 2 stages per rank under a multi-stage schedule when no split points
    are given (pipelining_utils.py:24-27): Llama 3.1 405B on pp 8 is 15 / 16 x 6 / 15 layers per rank
    with vpp 2; it was read as vpp 1 and predicted 33% too slow. Llama 3's V is not published: 2."""
    from benchmarks.heldout import _torchtitan_split, load_heldout
    assert _torchtitan_split(126, 16) == [7] + [8] * 14 + [7]
    runs = {r.id: r.case["parallel"] for r in load_heldout()}
    titan = runs["torchtitan-202412-t5-405b-3d-interleaved1f1b-512gpu"]
    assert (titan["vpp"], titan["first_stage_layers"], titan["last_stage_layers"]) == (2, 15, 15)
    assert runs["torchtitan-202412-t5-405b-3d-1f1b-512gpu"]["vpp"] == 1
    assert runs["llama3-405b-t4-row2-16384gpu-s8k"]["vpp"] == 2


def test_tp_wider_than_nvlink_is_estimated_with_a_warning():
    """Item 6: vTrain measured tp 16 over two 8-GPU nodes; `planner estimate` prices such a layout
    (its TP collectives cross the network) and says the search would not propose it."""
    parallel = {"tp": 16, "pp": 1, "dp": 4, "micro_batch": 2, "global_batch": 512, "zero_stage": 1,
                "recompute": "full", "precision": "bf16"}
    res = planner.estimate(model="llama2-7b", cluster={"gpu": "A100-80GB", "num_gpus": 64}, parallel=parallel)
    assert any(w.kind == "search_rule" and "NVLink domain" in w.message for w in res.warnings)
    tp8 = planner.estimate(model="llama2-7b", cluster={"gpu": "A100-80GB", "num_gpus": 64},
                           parallel={**parallel, "tp": 8, "dp": 8}).estimate
    assert res.estimate.time.tp_comm > 2 * tp8.time.tp_comm


def test_uneven_split_under_megatron_deepspeed_warns():
    parallel = {"tp": 8, "pp": 16, "dp": 8, "micro_batch": 1, "global_batch": 512, "zero_stage": 1,
                "recompute": "full", "precision": "bf16", "first_stage_layers": 7, "last_stage_layers": 7}
    res = planner.estimate(model="llama3.1-405b", cluster={"gpu": "H100-SXM", "num_gpus": 1024}, parallel=parallel)
    assert any("per-stage layer counts" in w.message for w in res.warnings)


def test_ring_latency_counts_every_rank():
    """Item 5 (collectives): NCCL's ring visits every rank, so a ring over n GPUs in d nodes pays n-d
    NVLink and d-1 network step latencies (NCCL src/graph/tuning.cc, ncclTopoTuneModel). Over 1,024
    GPUs in 128 nodes that is 896 NVLink steps per call; the model counted 7."""
    from costmodels.comm import all_gather_time, ring_latency
    c = catalog.load_cluster("A100-80GB", num_gpus=1024, gpus_per_node=8)
    expected = 896 * c.nvlink_latency_s + 127 * c.network_latency_s
    assert float(ring_latency(1024, 8, c)) == pytest.approx(expected)
    assert float(all_gather_time(0.0, 1024, 8, c)) == pytest.approx(c.collective_latency_s + expected)
    # one node: n-1 NVLink steps, as fitted on the measured NCCL table
    assert float(ring_latency(8, 8, c)) == pytest.approx(7 * c.nvlink_latency_s)


def test_zero3_pays_a_ring_latency_per_fetched_module(validation_dir):
    """Items 1 and 5: DeepSpeed ZeRO-3 fetches module by module, each an all-gather over every data-
    parallel rank. The Azure 175B sweep on 1,024 GPUs (deepspeed_runs.yaml) grows from 29.6 s at
    micro-batch 1 to 121.4 s at 16 (4.1x for 16x the work: a large fixed cost per step). One
    collective per pass gave 1.8x (+100% at micro-batch 1); per-module latency 2.6x (+50%), with a
    gather overlap fitted jointly with Narayanan 2021's ZeRO-3 rows. Those rows ran DeepSpeed v0.3.13,
    whose per-rank loops are now modelled (next test), so the gathers need not hide behind compute to
    fit them: at overlap 0 the ratio is within 15% of the measured 4.1x."""
    from planner.validation import evaluate, load_records
    recs = {r.id: r for r in load_records(validation_dir, include_vtrain=False)}
    mbs1, mbs16 = evaluate([recs["azure-ds-175b-seq1024-1024gpu-mbs1"], recs["azure-ds-175b-seq1024-1024gpu-mbs16"]])
    measured = mbs16.record.measured_step_s / mbs1.record.measured_step_s
    assert abs(mbs16.predicted_step_s / mbs1.predicted_step_s / measured - 1.0) < 0.15
    assert abs(mbs16.step_error) < 0.15
    assert abs(mbs1.step_error) < 0.15     # was +100%, then +50%


def test_early_deepspeed_zero3_loops_over_every_rank(validation_dir):
    """Narayanan et al. 2021 (Table 2) compared against DeepSpeed v0.3.13's ZeRO-3, which builds one
    view per rank in Python and lets torch's list collective copy each rank's piece with its own kernel,
    in every gather and every parameter's reduce-scatter: host work that grows with the ranks, so the
    174B run takes as long on 1,536 GPUs as on 768. Without it the six rows were predicted 6-22% too
    fast (mean 13.7%) and the gather efficiency came out at 0.24 for both DeepSpeed sources."""
    from planner.validation import evaluate, load_records
    rows = [r for r in load_records(validation_dir, include_vtrain=False) if r.id.startswith("narayanan21-t2-zero3")]
    assert len(rows) == 6
    results = evaluate(rows)
    assert sum(abs(r.step_error) for r in results) / len(results) < 0.12
    fw = catalog.load_framework("megatron-lm-2021")
    assert fw.zero3_rank_loop_host > 0 and fw.zero3_rank_loop_copies == 1 and fw.zero3_overlap == 0.0
    today = catalog.load_framework("megatron-deepspeed")      # DeepSpeed >= 0.5.5: flat _all_gather_base
    assert today.zero3_rank_loop_host == 0 and today.zero3_rank_loop_copies == 0
    # the loop is per rank: twice the ranks, twice the loop time per call
    from costmodels.layout_time import zero3_rank_loop_time
    cluster = catalog.load_cluster("A100-80GB", num_gpus=8)
    small, big = (float(zero3_rank_loop_time(cluster, fw, type("K", (), {"shard": n})(), 3.0, (385.0, 1153.0)))
                  for n in (768, 1536))
    assert big == pytest.approx(2 * small) and small > 1.0


def test_megascale_megatron_lm_baseline_is_not_read_as_full_recompute():
    """Held-out data: MegaScale's Megatron-LM baseline (2023) states no recompute mode; the 2021-22
    profile's default (full) contradicts its own 53% MFU (71% hardware FLOPs utilisation under full
    recompute, above every measured A100 run). Read as sequence parallelism + selective recompute, the
    Megatron-LM recipe since Korthikanti et al. 2022 (was: +25-46% too slow)."""
    from benchmarks.heldout import load_heldout
    rows = [r for r in load_heldout() if r.id.startswith("megascale-t2-megatronlm")]
    assert len(rows) == 4
    assert all(r.case["parallel"]["recompute"] == "selective" for r in rows)
    assert all(r.case["parallel"]["sequence_parallel"] for r in rows)


def _llama70b_tp4(framework, **extra):
    parallel = {"tp": 4, "pp": 4, "dp": 4, "micro_batch": 1, "global_batch": 128, "zero_stage": 1,
                "precision": "bf16", "recompute": "none", "sequence_parallel": True, **extra}
    return planner.estimate(model="llama2-70b", cluster={"gpu": "H100-SXM", "num_gpus": 64},
                            parallel=parallel, framework=framework).estimate


def test_tp_comm_overlap_leaves_one_chunk_of_each_tp_collective_exposed():
    """Item 5 (collectives overlapped as the framework does): Megatron-Core --tp-comm-overlap (TE
    userbuffers) pipelines each TP all-gather / reduce-scatter with its GEMM in tp chunks, so 1/tp of
    it stays exposed, forward and backward. NeMo's 70B configs, the Megatron-Core README runs and the
    Megatron-Bridge recipes use it; the model charged every forward collective in full (NeMo Llama-2
    70B +19%, Megatron-Core README 32B +18%)."""
    from costmodels.compute import layer_phases
    plain = _llama70b_tp4("megatron-core")
    overlapped = _llama70b_tp4("megatron-core", tp_comm_overlap=True)
    assert plain.time.tp_comm > 0.1
    assert overlapped.time.tp_comm < 0.5 * plain.time.tp_comm
    assert overlapped.step_time_s < plain.step_time_s
    # per layer: the forward collectives 1/tp exposed when pipelined, and the backward ones too unless
    # the weight-gradient GEMMs hide more (here, in a DGX, they do: the smaller figure is charged)
    model, cluster = catalog.load_model("llama2-70b"), catalog.load_cluster("H100-SXM", num_gpus=64)
    fw = catalog.load_framework("megatron-core")
    args = dict(tokens=4096.0, seq_len=4096.0, tp=4, sp=True, flash=True, precision=BF16, sparsity=0)
    fwd, bwd, _ = layer_phases(model, cluster, fw, **args)
    fwd_p, bwd_p, _ = layer_phases(model, cluster, fw, tp_pipelined=True, **args)
    assert float(fwd_p.tp_comm) == pytest.approx(float(fwd.tp_comm) / 4)
    assert float(bwd_p.tp_comm) == pytest.approx(float(fwd.tp_comm) / 4)
    assert float(bwd.tp_comm) > float(fwd.tp_comm) / 4       # unpipelined: the all-gathers stay exposed


def test_backward_tp_collectives_hide_behind_their_weight_gradient_gemms():
    """Megatron issues a column-parallel linear's input-gradient all-reduce (reduce-scatter with
    sequence parallelism) asynchronously and computes that linear's weight gradient meanwhile
    (Megatron-LM d98e8a64dd megatron/core/tensor_parallel/layers.py:683-725), so up to that GEMM's time
    is hidden; with sequence parallelism the row-parallel linears' output gradients are all-gathered
    synchronously (mappings.py:372-378), half of the bytes, always exposed. The model charged half of
    every backward collective whatever the shapes (tp_overlap 0.5, set by hand)."""
    import numpy as np

    from costmodels.compute import backward_tp_exposed, layer_phases
    # no SP: two all-reduces of 0.5 each; QKV's GEMM (0.2) hides 0.2 of its own, fc1's (1.5) all of its own
    assert backward_tp_exposed(1.0, 0.2, 1.5, 1.0, False) == pytest.approx(0.3)
    assert backward_tp_exposed(1.0, 0.2, 1.5, 0.0, False) == pytest.approx(1.0)     # in order: all exposed
    # SP: all-gathers 0.25 + 0.25 exposed; reduce-scatters 0.25 each, QKV's GEMM hides 0.2 of its own
    assert backward_tp_exposed(1.0, 0.2, 1.5, 1.0, True) == pytest.approx(0.55)
    assert backward_tp_exposed(1.0, 0.2, 1.5, 0.0, True) == pytest.approx(1.0)
    both = backward_tp_exposed(np.array([1.0, 1.0]), 0.2, 1.5, 1.0, np.array([False, True]))
    assert both == pytest.approx([0.3, 0.55])                                         # vectorised
    model, fw = catalog.load_model("llama2-70b"), catalog.load_framework("megatron-core")
    assert fw.tp_overlap == 1.0 and catalog.load_framework("megatron-deepspeed").tp_overlap == 0.0
    # the code of 2021 ran it in order (async came in cf7efd4f5a, 2021-08-30); 2022 code hid it
    assert catalog.load_framework("megatron-lm-2021").tp_overlap == 0.0
    assert catalog.load_framework("megatron-lm").tp_overlap == 1.0
    from planner.validation import SOURCES
    assert SOURCES["narayanan21"]["framework"] == SOURCES["megatron2021"]["framework"] == "megatron-lm-2021"
    assert SOURCES["korthikanti22"]["framework"] == "megatron-lm"
    args = dict(seq_len=4096.0, tp=8, flash=True, precision=BF16, sparsity=0)
    dgx = catalog.load_cluster("H100-SXM", num_gpus=64)
    # in a DGX without SP fc1's weight-gradient GEMM outlasts its all-reduce and the GQA QKV GEMM
    # (h x 1.25h / tp) hides about 40% of its own; with SP the all-gathers add half the bytes, exposed;
    # what hides still costs 24/132 of its time (NCCL's SMs, comm.overlap_slowdown)
    fwd, bwd, _ = layer_phases(model, dgx, fw, tokens=4096.0, sp=False, **args)
    assert 0.3 * float(fwd.tp_comm) < float(bwd.tp_comm) < 0.5 * float(fwd.tp_comm)
    fwd_sp, bwd_sp, _ = layer_phases(model, dgx, fw, tokens=4096.0, sp=True, **args)
    assert float(bwd_sp.tp_comm) > 0.5 * float(fwd_sp.tp_comm)
    # tp across nodes (PCIe-class links, small micro-batch): the collectives outlast the GEMMs
    slow = catalog.load_cluster("H100-PCIe", num_gpus=16, gpus_per_node=2)
    fwd, bwd, _ = layer_phases(model, slow, fw, tokens=1024.0, sp=False, **args)
    in_order = layer_phases(model, slow, replace(fw, tp_overlap=0.0), tokens=1024.0, sp=False, **args)[1]
    assert 0.0 < float(bwd.tp_comm) < float(in_order.tp_comm) == pytest.approx(float(fwd.tp_comm))


def test_tp_comm_overlap_is_refused_where_the_framework_has_none():
    with pytest.raises(InfeasibleError, match="Megatron-DeepSpeed has no --tp-comm-overlap"):
        planner.plan(model="llama2-70b", cluster={"gpu": "H100-SXM", "num_gpus": 64}, global_batch=128,
                     choices={"tp_comm_overlap": [True]})


def test_megatron_core_hides_interleaved_pipeline_sends():
    """Item 5: Megatron-Core's interleaved schedule posts its sends and receives asynchronously and runs
    the next model chunk meanwhile (overlap_p2p_comm, on by default: core_r0.8.0 arguments.py:1405,
    schedules.py:853-1014); the model charged all vpp x 2 sends per micro-batch (NeMo Llama-2 70B at
    vpp 20: 0.52 s of a 4.7 s step). Without interleaving nothing is overlapped (schedules.py:1286)."""
    inter = _llama70b_tp4("megatron-core", vpp=5)
    assert inter.time.pp_comm == 0.0
    flat = _llama70b_tp4("megatron-core")
    assert flat.time.pp_comm > 0.0


def test_deepspeed_pipeline_engine_partitions_sends_over_tp():
    """DeepSpeed's PipelineEngine with tp > 1 sends 1/tp of each activation and gradient and
    all-gathers it over TP on receipt (pipe_partitioned / grad_partitioned default true: DeepSpeed
    0.16.2 runtime/config.py:466-467, runtime/pipe/engine.py:144-145, 719-760). The model sent the
    whole tensor from every TP rank: vTrain's multi-node tp 8 x pp 16 runs came out 20-29% slow."""
    parallel = {"tp": 8, "pp": 8, "dp": 1, "micro_batch": 1, "global_batch": 64, "zero_stage": 1,
                "precision": "bf16", "recompute": "full"}
    est = planner.estimate(model="gpt3-175b", cluster={"gpu": "A100-80GB", "num_gpus": 64},
                           parallel=parallel, framework="megatron-deepspeed").estimate
    full = 64 * 2048 * 12288 * 2 * 2        # micro-batches x tokens x hidden x bytes x (fwd + bwd)
    per_gpu_nic = 25e9                      # 200 Gb/s HDR per GPU
    assert est.time.pp_comm < 0.5 * full / per_gpu_nic
    # and the emitted job leaves DeepSpeed's partitioning on
    from costmodels.types import Layout
    from planner.emit.megatron_ds import ds_config
    pipeline = ds_config(Layout(tp=8, pp=8, dp=1, gbs=64, zero=1)).get("pipeline", {})
    assert pipeline.get("pipe_partitioned", True) and pipeline.get("grad_partitioned", True)


def test_elementwise_backward_moves_three_halves_of_forward():
    """A memory-bound op's backward reads the saved input and the output gradient and writes the input
    gradient: 3 tensors against the forward's 2 (layer norm, GeLU, softmax, dropout). The model charged
    2x the forward traffic, which over-priced GPU-bound small-model rows (vTrain micro-batch 8: +16%)."""
    from costmodels.compute import layer_phases
    model = catalog.load_model("llama2-7b")
    cluster = catalog.load_cluster("A100-80GB", num_gpus=8)
    fw = catalog.load_framework("megatron-deepspeed")
    fwd, bwd, _ = layer_phases(model, cluster, fw, tokens=4096, seq_len=4096, tp=1, sp=False, flash=False,
                               precision=2, sparsity=0, grad_bytes_per_param=0.0)
    assert float(bwd.elementwise) == pytest.approx(1.5 * float(fwd.elementwise))


def test_gradient_accumulation_outside_the_gemm_is_charged_per_micro_batch():
    """Megatron-DeepSpeed returns each weight gradient to autograd (its wgrad accumulation fusion is
    commented out), so every micro-batch adds it into param.grad: 6 bytes per parameter of HBM
    traffic that the model did not charge. Megatron-Core fuses it into the GEMM (0 bytes); ZeRO-3
    drops the gradient after its reduce-scatter (nothing accumulates)."""
    from dataclasses import replace
    from costmodels.compute import layer_phases
    from costmodels.estimate import estimate
    from costmodels.params import layer_params
    from costmodels.types import Layout
    model = catalog.load_model("llama2-7b")
    cluster = catalog.load_cluster("A100-80GB", num_gpus=8)
    mds = catalog.load_framework("megatron-deepspeed")
    assert mds.grad_accumulation_bytes == 6
    assert catalog.load_framework("megatron-core").grad_accumulation_bytes == 0
    kw = dict(tokens=4096, seq_len=4096, tp=2, sp=False, flash=True, precision=2, sparsity=0)
    _, with_acc, _ = layer_phases(model, cluster, mds, **kw)
    _, without, _ = layer_phases(model, cluster, mds, grad_bytes_per_param=0.0, **kw)
    bw = cluster.gpu.hbm_bytes_per_s * cluster.gpu.hbm_efficiency
    assert float(with_acc.elementwise - without.elementwise) == pytest.approx(layer_params(model) / 2 * 6 / bw)
    # in a whole step: every micro-batch pays it (8 micro-batches of 1 here), and ZeRO-3 does not
    layout = Layout(tp=1, pp=1, dp=8, mbs=1, gbs=64, seq_len=4096, zero=1)
    free = replace(mds, grad_accumulation_bytes=0.0)
    extra = estimate(model, cluster, mds, layout).step_time_s - estimate(model, cluster, free, layout).step_time_s
    from costmodels.params import total_params
    assert extra == pytest.approx(8 * total_params(model) * 6 / bw, rel=0.05)
    z3 = replace(layout, zero=3)
    assert estimate(model, cluster, mds, z3).step_time_s == pytest.approx(
        estimate(model, cluster, free, z3).step_time_s)


def test_bf16_optimizer_moves_every_micro_batch_gradient_into_fp32():
    """DeepSpeed's BF16_Optimizer (bf16 at ZeRO-0, what the planner emits there) runs update_hp_grads
    after every backward (0.16.2 engine.py backward, pipe/engine.py:864-867): hp_grad.add_(lp.grad.to(
    fp32)) reads 2 + 4 + 4 bytes and writes 4 + 4 per parameter, 18 in all, where autograd's add into
    param.grad moves 6."""
    from costmodels.layout_time import BF16_OPTIMIZER_GRAD_BYTES, grad_accumulation_bytes_per_param
    from costmodels.stages import read_knobs
    from costmodels.types import Layout, LayoutBatch, Precision
    mds = catalog.load_framework("megatron-deepspeed")
    layouts = [Layout(tp=1, pp=1, dp=8, mbs=1, gbs=64, seq_len=4096, zero=z, precision=p)
               for z, p in ((0, Precision.BF16), (1, Precision.BF16), (0, Precision.FP16), (3, Precision.BF16))]
    k = read_knobs(LayoutBatch.from_layouts(layouts))
    got = [float(x) for x in grad_accumulation_bytes_per_param(mds, k)]
    assert BF16_OPTIMIZER_GRAD_BYTES == 18.0
    # ZeRO-3: DeepSpeed's gradient path every micro-batch, 28 + 24 / dp with fp32 reduction (counted on
    # the CPU since 2026-12-06, test_zero2_and_zero3_gradient_paths_move_bytes_every_micro_batch); 0 before
    assert got == [18.0, 6.0, 6.0, 28.0 + 24.0 / 8]


def test_zero0_optimizer_step_copies_follow_deepspeed_code():
    """DeepSpeed 0.16.2 at ZeRO-0: BF16_Optimizer's all-reduce casts each flat fp32 gradient group to
    the communication dtype (engine.py:2418-2461), concatenating groups that fit one 5e8-element
    bucket first; FP16_Optimizer.step makes an fp32 copy of every fp16 gradient before flattening
    (fp16/fused_optimizer.py:277-291). ZeRO-1+ runs another optimizer: no such copies."""
    from costmodels import memory
    from costmodels.types import GC_16BIT, GC_FP32
    mds = catalog.load_framework("megatron-deepspeed")
    big, small = 2e9, 1e8
    bf16, fp16 = 2, 1

    def copies(params, precision, zero, comm):
        return float(memory.zero0_step_copy_bytes(params, precision, zero, comm, mds)) / params

    assert copies(big, bf16, 0, GC_16BIT) == 2.0          # cast of a group alone in its bucket
    assert copies(big, bf16, 0, GC_FP32) == 0.0           # fp32 on the wire: a view, no copy
    assert copies(small, bf16, 0, GC_16BIT) == 6.0        # concatenated, then cast
    assert copies(small, bf16, 0, GC_FP32) == 4.0
    assert copies(big, fp16, 0, GC_16BIT) == 4.0          # FP16_Optimizer's fp32 gradient list
    assert copies(big, bf16, 1, GC_16BIT) == 0.0
    assert copies(big, fp16, 1, GC_16BIT) == 0.0
    megatron = catalog.load_framework("megatron-core")    # not DeepSpeed: none
    assert float(memory.zero0_step_copy_bytes(big, fp16, 0, GC_16BIT, megatron)) == 0.0


def test_activation_offload_keeps_one_layer_of_checkpoints_on_the_gpu():
    """DeepSpeed --checkpoint-in-cpu (checkpointing.py:530-531, 615-617): each layer's checkpointed
    input goes to host memory in forward and comes back for its recompute, with blocking copies. The
    GPU keeps one layer's working set instead of one checkpoint per layer and micro-batch in flight;
    host memory holds those; every micro-batch moves them across PCIe twice."""
    from costmodels.estimate import estimate
    from costmodels.memory import checkpoint_bytes
    from costmodels.types import Layout, Offload, Precision, Recompute
    model = catalog.load_model("llama3.1-70b")
    cluster = catalog.load_cluster("H100-SXM", num_gpus=64)
    mds = catalog.load_framework("megatron-deepspeed")
    base = Layout(tp=1, pp=1, dp=64, mbs=2, gbs=512, seq_len=8192, zero=3, recompute=Recompute.FULL,
                  precision=Precision.BF16)
    off = replace(base, offload_activations=Offload.CPU)
    e0, e1 = estimate(model, cluster, mds, base), estimate(model, cluster, mds, off)
    ckpt = float(checkpoint_bytes(model, 2 * 8192, 1, False, Precision.BF16.code))
    layers, n_micro = model.num_layers, 512 // (2 * 64)
    # the layer in backward brings its checkpoint back: it is part of that layer's working set
    assert e0.memory.activations - e1.memory.activations == pytest.approx((layers - 1) * ckpt, rel=1e-6)
    assert e1.time.offload - e0.time.offload == pytest.approx(
        n_micro * 2 * layers * ckpt / cluster.pcie_bytes_per_s, rel=1e-6)
    assert e1.time.step > e0.time.step and e1.memory.total < e0.memory.total
    from costmodels.estimate import estimate_batch
    from costmodels.types import LayoutBatch
    batch = estimate_batch(model, cluster, mds, LayoutBatch.from_layouts([base, off]))
    host = [float(x) for x in batch.columns["host_bytes_per_node"]]
    assert host == [0.0, pytest.approx(cluster.gpus_per_node * layers * ckpt, rel=1e-6)]
    # Under DeepSpeed's PipelineEngine each in-flight micro-batch keeps its received input and its
    # output in pipe_buffers on the GPU (pipe/engine.py:713-716, 760), offloaded checkpoints or not.
    piped = replace(off, pp=4, dp=16, zero=1, mbs=1)
    one = float(checkpoint_bytes(model, 8192, 1, False, Precision.BF16.code))
    from costmodels.layout_memory import stage_activations
    from costmodels.stages import read_knobs, stage_layers

    def first_stage(layout):
        k = read_knobs(LayoutBatch.from_layouts([layout]))
        return float(stage_activations(model, mds, k, stage_layers(model, k))[0][0])

    inflight, stage = 4, layers // 4         # first stage: 1F1B holds pp micro-batches of its 20 layers
    kept = first_stage(replace(piped, offload_activations=Offload.NONE))
    assert kept - first_stage(piped) == pytest.approx((inflight * (stage - 2) - 1) * one, rel=1e-6)


def test_flash_kernels_pad_the_head_dim_to_the_kernel_they_run():
    """A flash kernel is built for a few head dims and zero-pads a smaller one: FlashAttention-2 runs
    head dim 80 in its 96 kernel (static_switch.h HEADDIM_SWITCH), the triton kernel runs 96 in 128
    (flash_attn_triton.py: BLOCK_HEADDIM = next_power_of_2(d)). cuDNN (TE) takes any multiple of 8."""
    from costmodels.compute import attention_head_dim_share, layer_phases
    cluster = catalog.load_cluster("A100-80GB", num_gpus=8)
    hd128 = replace(catalog.load_model("gpt3-175b"), hidden=10240, num_heads=80, num_kv_heads=80)
    hd80 = replace(hd128, num_heads=128, num_kv_heads=128)
    assert hd80.head_dim == 80

    def attention(m, framework):
        fwd, _, _ = layer_phases(m, cluster, catalog.load_framework(framework), tokens=4096, seq_len=4096,
                                 tp=1, sp=False, flash=True, precision=2, sparsity=0)
        return float(fwd.attention)

    # the same attention work: FlashAttention-2 runs head dim 80 in its 96 kernel; cuDNN does not pad
    assert attention(hd80, "megatron-deepspeed") / attention(hd128, "megatron-deepspeed") == pytest.approx(96 / 80)
    assert attention(hd80, "megatron-core") == pytest.approx(attention(hd128, "megatron-core"))
    fa2, triton = catalog.load_framework("megatron-deepspeed"), catalog.load_framework("llm-foundry")
    assert attention_head_dim_share(hd128, fa2) == attention_head_dim_share(hd128, triton) == 1.0
    hd96 = replace(hd128, hidden=6144, num_heads=64, num_kv_heads=64)
    assert attention_head_dim_share(hd96, fa2) == 1.0
    assert attention_head_dim_share(hd96, triton) == 0.75


def test_long_sequence_deepspeed_runs_use_the_triton_kernel(validation_dir):
    """Megatron-DeepSpeed's long-sequence runs (tp 32, 32K and 128K tokens) were predicted 13% and 33%
    too fast: their scripts pass --use-flash-attn-triton (head dim 96 padded to 128, and the triton
    kernel's speed, both shared with llm-foundry's profile)."""
    from planner.validation import evaluate, load_records
    ids = {"mds-longseq-tp32-seq32k-a100", "mds-longseq-tp32-seq128k-a100"}
    long = [r for r in load_records(validation_dir) if r.id in ids]
    assert len(long) == 2
    for res in evaluate(long):
        assert abs(res.step_error) < 0.10, (res.record.id, res.step_error)
    assert all(r.case["framework"]["attention_head_dims"] == [16, 32, 64, 128] for r in long)


_SLOW = 24.0 / 132.0        # NCCL's thread blocks' share of an H100's SMs (comm.overlap_slowdown)


@pytest.mark.parametrize("overlap,compute,expected", [(0.0, 5.0, 10.0), (1.0, 5.0, 5.0 + 5.0 * _SLOW),
                                                      (1.0, 50.0, 0.25 + 9.75 * _SLOW)])
def test_zero3_first_gather_is_counted_once(monkeypatch, overlap, compute, expected):
    """Each pass's first gather cannot hide (nothing computes before it), the rest hides under compute as
    far as the framework overlaps. The first layer's share was added on top of the whole traffic, so a
    framework that hides nothing paid z3 x (1 + 1/layers): 1.2% of the 70B example's step at 80 layers.
    What hides still slows the compute by the SMs NCCL holds (test below)."""
    from types import SimpleNamespace as NS

    from costmodels import layout_time as LT
    from costmodels.types import GC_16BIT, ZERO3
    monkeypatch.setattr(LT, "zero3_gather_reduce_time", lambda *a: 10.0)     # 10 s of gathers and reduces
    fw = replace(catalog.load_framework("megatron-deepspeed"), zero3_overlap=overlap)
    k = NS(zero=ZERO3, pp=1, grad_comm=GC_16BIT, shard=8, tp=1)
    stages = NS(first=40, mid=40, last=40)
    out = LT.zero3_communication(catalog.load_cluster("H100-SXM", num_gpus=8), fw, k, stages,
                                 NS(per_gpu=1e9), NS(gathers=2.0, weight_bytes=2.0, grad_bytes=2.0), compute)
    assert float(out.per_microbatch) == pytest.approx(expected)


def test_hidden_collectives_slow_the_compute_they_hide_under(monkeypatch):
    """A collective hidden under compute is not free: its NCCL thread blocks (24 on H100, Nsight
    Systems beside a GEMM) hold SMs while it runs, so the compute it overlaps runs on the rest
    (Lee et al. 2025, arXiv:2507.03114: 18.9% mean compute slowdown under overlap on A100 / H100).
    Was: a gather, reduce-scatter or all-reduce that fit under compute cost nothing at all, so
    ZeRO-3 / FSDP and data-parallel layouts looked as fast as their compute whatever their traffic."""
    from types import SimpleNamespace as NS

    from costmodels import layout_time as LT
    from costmodels import steptime
    from costmodels.comm import overlap_slowdown
    from costmodels.types import GC_16BIT, ZERO1, ZERO2, ZERO3
    h100, a100 = (catalog.load_cluster(g, num_gpus=8) for g in ("H100-SXM", "A100-80GB"))
    assert overlap_slowdown(1.0, h100) == pytest.approx(24 / 132)
    assert overlap_slowdown(1.0, a100) == pytest.approx(24 / 108)
    fw = catalog.load_framework("megatron-core")
    # ZeRO-3 / FSDP: 10 s of gathers, all of it but the first layer's hidden under 50 s of compute
    monkeypatch.setattr(LT, "zero3_gather_reduce_time", lambda *a: 10.0)
    k = NS(zero=ZERO3, pp=1, grad_comm=GC_16BIT, shard=8, tp=1)
    out = LT.zero3_communication(h100, fw, k, NS(first=40, mid=40, last=40), NS(per_gpu=1e9),
                                 NS(gathers=2.0, weight_bytes=2.0, grad_bytes=2.0), 50.0)
    assert float(out.per_microbatch) == pytest.approx(0.25 + 9.75 * 24 / 132)
    # ZeRO-2's reduce-scatter under a backward window longer than it
    monkeypatch.setattr(LT, "reduce_scatter_time", lambda *a: 2.0)
    k2 = NS(zero=ZERO2, shard=8, tp=1)
    assert float(LT.zero2_communication(h100, k2, NS(per_gpu=1e9), NS(grad_bytes=2.0),
                                        NS(window=5.0))) == pytest.approx(2.0 * 24 / 132)
    # the step's gradient sync: 3 s hidden in a 5 s window, 1 s of weight gather hidden in forward
    monkeypatch.setattr(steptime, "dp_gradient_sync_time", lambda *a: (3.0, 1.0))
    k1 = NS(zero=ZERO1, shard=8, tp=1)
    sync = LT.dp_step_sync(h100, fw, k1, NS(per_gpu=1e9), NS(grad_bytes=2.0, weight_bytes=2.0),
                           NS(window=5.0, bf16_optimizer=False))
    assert fw.param_gather_overlap == 1.0
    assert float(sync) == pytest.approx((3.0 + 1.0) * 24 / 132)


def test_hidden_backward_tp_collectives_slow_their_weight_gradient_gemms():
    """Megatron's asynchronous input-gradient all-reduce hides under the weight-gradient GEMM, but its
    NCCL thread blocks take SMs from that GEMM meanwhile (comm.overlap_slowdown): a fully hidden
    backward all-reduce costs 24/132 of its time on H100. Was: nothing."""
    from costmodels.comm import all_reduce_time
    from costmodels.compute import layer_phases
    from costmodels.types import BF16 as PREC
    model = catalog.load_model("llama2-70b")
    cluster = catalog.load_cluster("H100-SXM", num_gpus=8)
    fw = catalog.load_framework("megatron-core")
    assert fw.tp_overlap == 1.0
    tokens = 8192.0
    _, bwd, _ = layer_phases(model, cluster, fw, tokens=tokens, seq_len=4096, tp=2, sp=False, flash=True,
                             precision=PREC, sparsity=0, tp_pipelined=False)
    tp_pass = 2.0 * all_reduce_time(tokens * model.hidden * 2.0, 2, 2, cluster)
    assert float(bwd.tp_comm) == pytest.approx(tp_pass * 24 / 132)      # hidden whole, not free


def test_megatron_core_activation_offload_is_expressible_and_modelled():
    """Item 6 (layouts people really ran): the Megatron-Bridge GB200 FSDP recipes offload the saved
    activations of N layers to host memory (--cpu-offloading-num-layers; Llama 3 70B fp8: 40 of 80,
    Megatron-Bridge v0.2.0 workload_base_configs.py:73-78). Before, no layout could say so: the run was
    priced with every layer's activations on the GPU (271 GiB of 173). Now N layers' saved tensors
    leave the GPU and wait in host memory, and only what each layer's copy takes beyond that layer's
    compute shows in the step (Transformer Engine copies on a side stream)."""
    from costmodels.estimate import estimate, estimate_batch
    from costmodels.layout_memory import stage_activations
    from costmodels.memory import layer_activation_bytes
    from costmodels.stages import read_knobs, stage_layers
    from costmodels.types import Layout, LayoutBatch, Precision

    model = catalog.load_model("llama3.1-70b")
    gb200 = catalog.load_cluster("GB200", num_gpus=64)
    core = catalog.load_framework("megatron-core")
    base = Layout(tp=1, pp=1, dp=64, mbs=2, gbs=256, seq_len=8192, zero=3, precision=Precision.FP8)
    off = replace(base, cpu_offload_layers=40)
    e0, e1 = estimate(model, gb200, core, base), estimate(model, gb200, core, off)
    stored, act_core = layer_activation_bytes(model, 2 * 8192, 8192, 1, False, True, Precision.FP8.code,
                                              core.fp8_saved_input_bytes)
    per_layer = float(stored + act_core) * core.saved_activation_factor
    assert e0.memory.activations - e1.memory.activations == pytest.approx(40 * per_layer, rel=1e-6)
    batch = estimate_batch(model, gb200, core, LayoutBatch.from_layouts([base, off]))
    assert [float(x) for x in batch.columns["host_bytes_per_node"]] == [
        0.0, pytest.approx(gb200.gpus_per_node * 40 * per_layer, rel=1e-6)]
    # over a 32 GB/s link each copy outlasts its layer's forward and backward, and that much shows
    from costmodels.layout_time import layer_times
    slow = replace(gb200, pcie_bytes_per_s=32e9)
    k = read_knobs(LayoutBatch.from_layouts([off]))
    lt = layer_times(model, slow, core, k)
    copy = per_layer / 32e9
    fwd, bwd = float(lt.fwd_gpu[0] + lt.fwd_tp[0]), float(lt.bwd_gpu[0] + lt.bwd_tp[0])
    assert copy > bwd > fwd
    # Transformer Engine's default synchronisation: layer i's copy, issued when its forward ends, is
    # done by the forward of layer L-N+i, and its reload, issued at the backward of layer L-1-N+i, by
    # its own backward: each copy has w = L-N-1 layers, and the N copies queue over L-2 layers
    n_micro, L = 256 // (2 * 64), model.num_layers

    def waits(n, x, f, b):
        w = L - n - 1
        return max(n * x - (L - 2) * f, n * (x - w * f), 0.0) + max(n * x - (L - 2) * b, n * (x - w * b), 0.0)

    assert estimate(model, slow, core, off).time.offload == pytest.approx(
        n_micro * waits(40, copy, fwd, bwd), rel=1e-6)
    # on GB200's own link the queue keeps up at N = 40 ...
    x = per_layer / gb200.pcie_bytes_per_s
    lt_gb = layer_times(model, gb200, core, k)
    f_gb, b_gb = float(lt_gb.fwd_gpu[0] + lt_gb.fwd_tp[0]), float(lt_gb.bwd_gpu[0] + lt_gb.bwd_tp[0])
    assert e1.time.offload == 0.0 and waits(40, x, f_gb, b_gb) == 0.0
    # ... but at N = L-1 every copy has no window, and each one shows (a review simulated TE's events)
    last = estimate(model, gb200, core, replace(base, cpu_offload_layers=L - 1))
    assert last.time.offload == pytest.approx(n_micro * 2 * (L - 1) * x, rel=1e-6) and last.time.offload > 1.0
    assert float(stage_activations(model, core, k, stage_layers(model, k))[0][0]) == pytest.approx(
        e1.memory.activations, rel=1e-6)
    # Outside Megatron-Core's limits (pp 1, no recompute) the cost model ignores N, whatever reached it
    # (a review found recompute full + N = 40 priced at -79 GiB)
    from costmodels.types import Recompute
    full = replace(base, recompute=Recompute.FULL)
    assert estimate(model, gb200, core, replace(full, cpu_offload_layers=40)).memory.total == pytest.approx(
        estimate(model, gb200, core, full).memory.total)
    # the held-out run itself: its step time, which no fit saw
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from heldout import load_heldout
    from planner.validation import evaluate
    rec = next(r for r in load_heldout() if r.id == "mbridge-2511-gb200-fp8cs-llama3-70b-64gpu-fsdp")
    assert rec.case["parallel"]["cpu_offload_layers"] == 40
    import copy as copy_module
    plain = copy_module.deepcopy(rec)
    plain.case["parallel"]["cpu_offload_layers"] = 0
    assert abs(evaluate([rec])[0].step_error) < 0.05
    from planner.specs import case_from_dict
    a, b = (case_from_dict(r.case) for r in (rec, plain))
    saved = (estimate(b.model, b.cluster, b.framework, b.layout).memory.activations
             - estimate(a.model, a.cluster, a.framework, a.layout).memory.activations)
    assert saved > 100 * GiB          # 40 of 80 layers' activations (271 GiB before)


def test_activation_offload_shows_in_the_estimate_output(tmp_path):
    """Fuzzing review: the layout line was the same with and without cpu_offload_layers, and the host
    memory the offloaded activations take was not shown (offload_needs looked at DeepSpeed's offloads only)."""
    import json

    import yaml
    from click.testing import CliRunner
    from planner.cli import main
    case = tmp_path / "case.yaml"
    case.write_text(yaml.safe_dump({"model": "llama3.1-70b", "cluster": {"gpu": "GB200", "num_gpus": 64},
                                    "framework": "megatron-core",
                                    "parallel": {"tp": 1, "pp": 1, "dp": 64, "micro_batch": 2, "global_batch": 256,
                                                 "zero_stage": 3, "precision": "fp8", "cpu_offload_layers": 40}}))
    text = CliRunner().invoke(main, ["estimate", str(case)])
    assert text.exit_code == 0, text.output
    assert "activations of 40 layers->cpu" in text.output and "offload needs host memory" in text.output
    data = json.loads(CliRunner().invoke(main, ["estimate", str(case), "--json"]).output)
    assert data["offload_per_node"]["host_bytes_per_node"] > 4 * 40 * GiB


@pytest.mark.parametrize("change, words", [
    ({"pp": 2, "dp": 32}, "needs pp = 1"),
    ({"recompute": "full"}, "needs recompute none"),
    ({"cpu_offload_layers": 80}, "below the model's 80 layers"),
    ({"offload_activations": "cpu", "recompute": "full"}, "needs recompute none"),
    ({"offload_activations": "cpu"}, "two kinds of activation offload"),
])
def test_activation_offload_outside_megatron_cores_limits_is_one_error(change, words, tmp_path):
    """Megatron-Core refuses these (transformer_config.py:1884-1900); so does the planner, in one line."""
    import yaml
    from click.testing import CliRunner
    from planner.cli import main
    parallel = {"tp": 1, "pp": 1, "dp": 64, "micro_batch": 1, "global_batch": 256, "zero_stage": 3,
                "cpu_offload_layers": 40, **change}
    case = tmp_path / "case.yaml"
    case.write_text(yaml.safe_dump({"model": "llama3.1-70b", "cluster": {"gpu": "GB200", "num_gpus": 64},
                                    "framework": "megatron-core", "parallel": parallel}))
    r = CliRunner().invoke(main, ["estimate", str(case)])
    assert r.exit_code == 2, r.output
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and words in lines[0], r.output


def test_activation_offload_in_a_framework_without_it_is_a_warning():
    res = planner.estimate(model="llama3.1-70b", cluster={"gpu": "H100-SXM", "num_gpus": 64},
                           parallel={"tp": 1, "pp": 1, "dp": 64, "micro_batch": 1, "global_batch": 256,
                                     "zero_stage": 3, "cpu_offload_layers": 20})
    assert any("no layer activation offload" in w.message for w in res.warnings)
    core = planner.estimate(model="llama3.1-70b", cluster={"gpu": "H100-SXM", "num_gpus": 64},
                            framework="megatron-core",
                            parallel={"tp": 1, "pp": 1, "dp": 64, "micro_batch": 1, "global_batch": 256,
                                      "zero_stage": 3, "cpu_offload_layers": 20})
    assert not any("no layer activation offload" in w.message for w in core.warnings)


def test_megatrons_fused_softmax_falls_back_where_its_kernel_does_not_apply():
    """Megatron's fused scaled-masked softmax needs micro-batch x heads-per-TP-rank divisible by 4 and
    16 < s <= 4096 (Megatron-DeepSpeed fused_softmax.py:152-172); otherwise five eager fp32 ops run
    instead of one kernel. vTrain's 16-head models at tp 8 and micro-batch 1 (2 heads per rank) are
    such a case: they were predicted 34% too fast on average, against 15% for the same models at
    micro-batch 2 and more."""
    from costmodels.estimate import estimate
    from costmodels.memory import layer_activation_bytes, megatron_softmax_falls_back
    from costmodels.types import Layout, Precision

    m = replace(catalog.load_model("gpt-1.7b"), hidden=2048, ffn_hidden=8192, num_heads=16, num_kv_heads=16)
    fp16 = Precision.FP16.code
    assert megatron_softmax_falls_back(m, 1024, 1024, 8, False, fp16, 4096)           # 1 x 2 heads
    assert not megatron_softmax_falls_back(m, 2048, 1024, 8, False, fp16, 4096)       # 2 x 2
    assert megatron_softmax_falls_back(m, 8192, 8192, 1, False, fp16, 4096)           # s > 4096
    assert not megatron_softmax_falls_back(m, 1024, 1024, 8, True, fp16, 4096)        # flash: no softmax
    assert not megatron_softmax_falls_back(m, 1024, 1024, 8, False, fp16, 0)          # no such kernel
    # half a sequence per rank is context parallelism, flash-only in Megatron (hypothesis found
    # memory falling from micro-batch 1 to 2 at cp 2 when this counted as a fallback)
    assert not megatron_softmax_falls_back(m, 512, 1024, 8, False, fp16, 4096)
    # the fp32 softmax output is what softmax's backward keeps: 4 bytes a score, not 2
    _, fused = layer_activation_bytes(m, 2048, 1024, 8, False, False, fp16, 1.0, 4096)
    _, eager = layer_activation_bytes(m, 1024, 1024, 8, False, False, fp16, 1.0, 4096)
    assert eager / 1024 - fused / 2048 == pytest.approx(2.0 * 2 * 1024)               # 2 heads x s x 2 B
    cluster = catalog.load_cluster("A100-80GB", num_gpus=8)
    mds = catalog.load_framework("megatron-deepspeed")
    one, two = (Layout(tp=8, dp=1, mbs=b, gbs=16, seq_len=1024, zero=0, precision=Precision.FP16,
                       flash_attention=False) for b in (1, 2))
    no_kernel = replace(mds, fused_softmax_max_seq=0.0)
    # the fallback costs time at micro-batch 1 only
    assert estimate(m, cluster, mds, one).time.step > 1.02 * estimate(m, cluster, no_kernel, one).time.step
    assert estimate(m, cluster, mds, two).time.step == pytest.approx(estimate(m, cluster, no_kernel, two).time.step)


def test_megatron_bridge_recipes_keep_fp8_weights_and_fuse_the_loss():
    """Held-out: the Megatron-Bridge B200 405B FP8 run trained, and was predicted at 174 GiB of 168:
    its recipe keeps the weights in fp8 only (fp8_param_gather, mixed_precision.py:272-290 @ v0.2.0)
    and uses Transformer Engine's fused cross-entropy, which the megatron-bridge profile now says."""
    import sys
    from pathlib import Path

    from costmodels.estimate import estimate
    from costmodels.types import Layout, Precision
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from heldout import load_heldout
    from planner.validation import evaluate

    bridge, core = catalog.load_framework("megatron-bridge"), catalog.load_framework("megatron-core")
    assert bridge.state_bytes["fp8"][0] == 1 and core.state_bytes["fp8"][0] == 3      # weights, bytes per parameter
    model = catalog.load_model("llama3.1-70b")
    cluster = catalog.load_cluster("B200", num_gpus=64)
    layout = Layout(tp=4, pp=4, dp=4, mbs=1, gbs=64, seq_len=8192, zero=1, precision=Precision.FP8,
                    sequence_parallel=True)
    a, b = estimate(model, cluster, core, layout), estimate(model, cluster, bridge, layout)
    assert b.memory.logits == pytest.approx(a.memory.logits / 3) and b.memory.weights < a.memory.weights
    assert b.step_time_s == pytest.approx(a.step_time_s)           # the same kernels and overlap
    runs = [r for r in load_heldout() if r.id.startswith("mbridge-")]
    assert runs and all(r.case["framework"] == "megatron-bridge" for r in runs)
    b200 = next(x for x in evaluate(runs) if x.record.id == "mbridge-2511-b200-fp8cs-llama31-405b-128gpu")
    assert b200.fits and not b200.tight


def test_no_offload_wait_without_offload_and_selective_recompute_reruns_the_fallback():
    """Review: after the offload formula took windows, a stage of one layer with nothing offloaded
    waited -(L-2) f = +f per micro-batch (megatron-core at pp 32: 1.4 s of a 7 s step); and selective
    recompute reran Megatron's softmax without the eager fallback's cost."""
    from costmodels.estimate import estimate
    from costmodels.types import Layout, Precision, Recompute

    model = catalog.load_model("llama3.1-8b")
    cluster = catalog.load_cluster("H100-SXM", num_gpus=64)
    for fw in ("megatron-core", "megatron-deepspeed", "torchtitan"):
        layout = Layout(tp=1, pp=32, dp=2, mbs=1, gbs=256, seq_len=4096, zero=1, precision=Precision.BF16)
        assert estimate(model, cluster, catalog.load_framework(fw), layout).time.offload == 0.0, fw
    m = replace(catalog.load_model("gpt-1.7b"), hidden=2048, ffn_hidden=8192, num_heads=16, num_kv_heads=16)
    a100 = catalog.load_cluster("A100-80GB", num_gpus=8)
    mds = catalog.load_framework("megatron-deepspeed")
    sel = Layout(tp=8, dp=1, mbs=1, gbs=16, seq_len=1024, zero=0, precision=Precision.FP16,
                 flash_attention=False, recompute=Recompute.SELECTIVE)
    with_fallback = estimate(m, a100, mds, sel).time.recompute
    without = estimate(m, a100, replace(mds, fused_softmax_max_seq=0.0), sel).time.recompute
    assert with_fallback > 1.1 * without


def test_flash_attention_2_runs_on_blackwell_at_hoppers_rate():
    """FlashAttention-2 is built on Ampere's mma.sync instructions: on a B200 it measures what it reaches
    on an H100 (tritonbench PR #171, flash-attention #1589), yet it was costed at Blackwell's own peak,
    2.5x faster. cuDNN attention (Transformer Engine) is built for Blackwell and keeps its peak."""
    from costmodels.compute import layer_phases
    m = catalog.load_model("llama3.1-8b")

    def attention(gpu, framework):
        cluster = catalog.load_cluster(gpu, num_gpus=8)
        fwd, bwd, _ = layer_phases(m, cluster, catalog.load_framework(framework), tokens=8192, seq_len=8192,
                                   tp=1, sp=False, flash=True, precision=2, sparsity=0)
        return float(fwd.attention + bwd.attention)

    h100, gb200 = catalog.load_gpu("H100-SXM"), catalog.load_gpu("GB200")
    assert gb200.attention_efficiency == pytest.approx(h100.attention_efficiency)
    for fa2 in ("megatron-deepspeed", "torchtitan"):
        assert attention("GB200", fa2) == pytest.approx(attention("H100-SXM", fa2))
        assert attention("B200", fa2) == pytest.approx(attention("H100-SXM", fa2))
    native = attention("H100-SXM", "megatron-core") / attention("GB200", "megatron-core")
    assert native == pytest.approx(gb200.peak_flop_per_s["bf16"] / h100.peak_flop_per_s["bf16"])
    assert attention("B200", "megatron-core") < attention("GB200", "megatron-deepspeed") / 2


def test_deterministic_blackwell_tests_fall_back_to_flash_attention_2(validation_dir):
    """Megatron-Core's GB200 functional tests were predicted 42% and 48% too fast: with attention dropout
    0.1 in deterministic mode Transformer Engine refuses cuDNN attention on Blackwell and runs flash-attn
    2 (catalog megatron-core-deterministic.yaml, attention_kernel). Their H100 twins do not change."""
    from planner.validation import evaluate, load_records
    runs = [r for r in load_records(validation_dir) if r.id.startswith("mcore-ftest-")]
    errors = {res.record.id: res.step_error for res in evaluate(runs)}
    gb200 = [e for k, e in errors.items() if k.endswith("-gb200")]
    assert len(gb200) == 2 and all(-0.35 < e < 0 for e in gb200), errors
    assert all(abs(errors[k]) < 0.12 for k in errors if k.endswith("-h100")), errors


def test_deterministic_flash_backward_packs_fewer_waves():
    """FlashAttention-2's deterministic backward launches ceil(SMs / (batch x heads)) CTAs per head
    (flash_bwd_launch_template.h:78-81): with 32 heads of 8192 tokens on an A100's 108 SMs, 128 long CTAs
    run in two waves, the second 20/108 full, where the regular 2,048 short ones pack the SMs evenly."""
    from costmodels.attention_schedule import deterministic_backward_slowdown as slowdown
    assert 1.5 < slowdown(32, 8192, 108) < 1.75
    assert 1.5 < slowdown(32, 8192, 148) < 1.9
    assert 1.1 < slowdown(8, 8192, 108) < slowdown(32, 8192, 108)
    # as many (sequence, head) pairs as SMs: one CTA per head either way, whole waves both ways
    assert slowdown(108, 8192, 108) == pytest.approx(1.0, abs=0.02)
    assert slowdown(32, 128, 108) == pytest.approx(1.0)           # one key block: nothing to split
    arr = slowdown([32, 8], [8192, 8192], 108)
    assert arr[0] == pytest.approx(slowdown(32, 8192, 108)) and arr[1] == pytest.approx(slowdown(8, 8192, 108))


def test_deterministic_attention_backward_where_cudnn_is_refused(validation_dir):
    """Megatron-Core's deterministic functional tests ran 18-31% slower than predicted on A100 and GB200
    but 6-10% on H100: Transformer Engine refuses its deterministic cuDNN attention before Hopper and on
    Blackwell with dropout, so FlashAttention-2's deterministic backward runs there; on Hopper cuDNN runs
    (utils.py:1555-1566, 1647-1653). The same layer under megatron-core-deterministic and megatron-core
    differs by that backward only where flash-attn 2 runs."""
    from costmodels.compute import layer_phases
    from planner.validation import evaluate, load_records
    m = catalog.load_model("llama3.1-8b")

    det = catalog.load_framework("megatron-core-deterministic")
    plain = replace(det, deterministic_attention=False)

    def attention_bwd(gpu, framework, model=m):
        cluster = catalog.load_cluster(gpu, num_gpus=8)
        _, bwd, _ = layer_phases(model, cluster, framework, tokens=8192, seq_len=8192,
                                 tp=1, sp=False, flash=True, precision=2, sparsity=0)
        return float(bwd.attention)

    assert det.deterministic_attention and not catalog.load_framework("megatron-core").deterministic_attention
    assert attention_bwd("A100-80GB", det) > 1.4 * attention_bwd("A100-80GB", plain)
    assert attention_bwd("H100-SXM", det) == pytest.approx(attention_bwd("H100-SXM", plain))
    assert m.attention_dropout == 0          # Blackwell's deterministic cuDNN runs without dropout
    assert attention_bwd("GB200", det) == pytest.approx(attention_bwd("GB200", plain))
    dropout = replace(m, attention_dropout=0.1)          # Megatron's default, kept by the tests
    assert attention_bwd("GB200", det, dropout) > 1.4 * attention_bwd("GB200", plain, dropout)
    runs = [r for r in load_records(validation_dir) if r.id.startswith("mcore-ftest-")]
    errors = {res.record.id: res.step_error for res in evaluate(runs)}
    assert all(abs(e) < 0.18 for e in errors.values()), errors
    assert sum(abs(e) for e in errors.values()) / len(errors) < 0.12, errors


def test_deterministic_mode_fills_every_fresh_allocation(validation_dir):
    """Megatron's --deterministic-mode turns on torch.use_deterministic_algorithms (determinism.py:158)
    with fill_uninitialized_memory left on, so each CUDA at::empty is written with NaN first
    (TensorFactories.cu empty_cuda): one more HBM write of every output Transformer Engine and the
    attention kernel allocate, forward and backward, and of the per-micro-batch weight gradients.
    The functional tests ran 5-17% slower than predicted on every GPU before it was charged."""
    from costmodels.compute import (DETERMINISTIC_FILL_KERNELS, DETERMINISTIC_FILL_KERNELS_FLASH2,
                                    DETERMINISTIC_FILL_KERNELS_GQA, deterministic_fill_bytes, layer_phases)
    from costmodels.params import layer_params
    from planner.validation import evaluate, load_records
    det = catalog.load_framework("megatron-core-deterministic")
    assert det.fills_uninitialized_memory
    assert not catalog.load_framework("megatron-core").fills_uninitialized_memory
    assert not catalog.load_framework("megatron-deepspeed").fills_uninitialized_memory

    m = catalog.load_model("llama3.1-8b")          # h 4096, 8 KV heads (kv 1024), f 14336, gated
    h, kv, f, tokens, tp = 4096, 1024, 14336, 16384, 4
    fwd, bwd = deterministic_fill_bytes(m, tokens, tp, BF16)
    # forward: 2 norms + proj + fc2 (h each) + (QKV h + 2 kv, attention h, fc1 2f, GQA copies h + 2 kv) / tp
    assert fwd == pytest.approx(tokens * 2 * (4 * h + (2 * h + 2 * kv + 2 * f + h + 2 * kv) / tp))
    assert bwd == pytest.approx(tokens * 2 * (4 * h + (2 * h + 2 * kv + f) / tp) + layer_params(m) * 2 / tp)
    # flash-attn 2: q, k, v and output copies; dout, dK / dV over all heads, and 7 fp32 dQ copies
    fwd2, bwd2 = deterministic_fill_bytes(m, tokens, tp, BF16, True, 7)
    assert fwd2 - fwd == pytest.approx(tokens * 2 * (2 * h + 2 * kv) / tp)
    assert bwd2 - bwd == pytest.approx(tokens * 2 * 3 * h / tp + tokens * 7 * h / tp * 4)

    plain = replace(det, fills_uninitialized_memory=False)
    kw = dict(tokens=tokens, seq_len=8192, tp=tp, sp=False, flash=True, precision=BF16, sparsity=0)
    for gpu, flash2 in (("H100-SXM", False), ("A100-80GB", True)):   # cuDNN on Hopper, flash-attn 2 before
        cluster = catalog.load_cluster(gpu, num_gpus=8)
        f1, b1, _ = layer_phases(m, cluster, det, **kw)
        f0, b0, _ = layer_phases(m, cluster, plain, **kw)
        splits = -(-cluster.gpu.num_sms // (2 * 32 // tp))        # ceil(SMs / (sequences x heads / tp))
        want_f, want_b = deterministic_fill_bytes(m, tokens, tp, BF16, flash2, splits)
        bw = cluster.gpu.hbm_bytes_per_s * cluster.gpu.hbm_efficiency
        assert float(f1.elementwise - f0.elementwise) == pytest.approx(want_f / bw)
        assert float(b1.elementwise - b0.elementwise) == pytest.approx(want_b / bw)
        k_f = DETERMINISTIC_FILL_KERNELS[0] + DETERMINISTIC_FILL_KERNELS_GQA + flash2 * DETERMINISTIC_FILL_KERNELS_FLASH2[0]
        k_b = DETERMINISTIC_FILL_KERNELS[1] + flash2 * DETERMINISTIC_FILL_KERNELS_FLASH2[1]
        assert float(f1.kernels - f0.kernels) == pytest.approx(k_f * cluster.gpu.kernel_overhead_s)
        assert float(b1.kernels - b0.kernels) == pytest.approx(k_b * cluster.gpu.kernel_overhead_s)

    runs = [r for r in load_records(validation_dir) if r.id.startswith("mcore-ftest-")]
    errors = {res.record.id: res.step_error for res in evaluate(runs)}
    assert sum(abs(e) for e in errors.values()) / len(errors) < 0.085, errors


def test_gpu_file_compute_capability(tmp_path):
    """The compute capability is a data-sheet number a GPU file may state; it survives plan.json."""
    h100 = catalog.load_gpu("H100-SXM")
    assert h100.compute_capability == 9.0 and catalog.load_gpu("A100-80GB").compute_capability == 8.0
    again = catalog.gpu_from_dict(catalog.gpu_to_dict(h100))
    assert again.compute_capability == 9.0
    d = catalog.gpu_to_dict(h100)
    d["compute_capability"] = "nine"
    with pytest.raises(SpecError, match="compute_capability"):
        catalog.gpu_from_dict(d)


def test_deepspeed_pipeline_engine_waits_for_each_transfer_on_its_own():
    """Item 5: DeepSpeed's PipelineEngine runs SendGrad, RecvActivation, RecvGrad and SendActivation as
    separate commands (DeepSpeed v0.16.2 runtime/pipe/schedule.py:216-223), each its own NCCL send or
    recv (runtime/pipe/p2p.py:60, 81), so a middle stage waits for four transfers per micro-batch and
    the first and last for two; Megatron pairs each send with a receive in one batched call (two and
    one). The model charged both frameworks two on every stage."""
    from costmodels.comm import p2p_time
    from costmodels.layout_time import pipeline_send_times
    from costmodels.stages import read_knobs
    from costmodels.types import Layout

    model = catalog.load_model("llama2-7b")
    cluster = catalog.load_cluster("A100-80GB", num_gpus=32)
    ds, mlm = catalog.load_framework("megatron-deepspeed"), catalog.load_framework("megatron-lm")
    # tp 1 (nothing to gather): (first, middle, last) in transfer times, and the step's bottleneck
    # (the last stage, which also holds the output layer)
    k = read_knobs(Layout(tp=1, pp=4, dp=8, mbs=1, gbs=64))
    transfer = p2p_time(k.tokens * model.hidden * k.act_bytes, True, cluster)    # stages 8 GPUs apart
    assert [float(x) / transfer for x in pipeline_send_times(model, cluster, ds, k)] == pytest.approx([2, 4, 2])
    assert [float(x) / transfer for x in pipeline_send_times(model, cluster, mlm, k)] == pytest.approx([1, 2, 1])
    parallel = {"tp": 1, "pp": 4, "dp": 2, "micro_batch": 1, "global_batch": 64, "zero_stage": 1,
                "precision": "bf16", "recompute": "full"}
    run = dict(model="llama2-7b", cluster={"gpu": "A100-80GB", "num_gpus": 8}, parallel=parallel)
    est_ds = planner.estimate(**run, framework="megatron-deepspeed").estimate
    est_mlm = planner.estimate(**run, framework="megatron-lm").estimate
    assert est_mlm.time.pp_comm > 0.0
    assert est_ds.time.pp_comm == pytest.approx(2.0 * est_mlm.time.pp_comm, rel=1e-9)


def test_deepspeed_pipeline_engine_regathers_its_own_output_before_backward():
    """With tp > 1 the PipelineEngine keeps only its TP partition of each activation it sends and
    all-gathers it back before backward (DeepSpeed v0.16.2 runtime/pipe/engine.py:750-760, 830-833):
    three TP all-gathers per micro-batch on a middle stage (Megatron: two), two on the first (one),
    one on the last (one)."""
    from costmodels.layout_time import pipeline_regather_counts

    assert pipeline_regather_counts(catalog.load_framework("megatron-deepspeed")) == (2.0, 3.0, 1.0)
    assert pipeline_regather_counts(catalog.load_framework("megatron-lm")) == (1.0, 2.0, 1.0)


def test_eager_torchtitan_elementwise_traffic_is_the_counted_ratio():
    """torchtitan's eager elementwise bytes are counted, op by op, from its 2024-12 model code (9dec370:
    models/norms.py RMSNorm, models/llama/model.py), not a round 'about 2x': bytes per element of each
    op's reads + writes, per token of one layer's forward, over the reference count the cost model
    uses for fused kernels (compute.layer_elementwise_bytes). The catalog value is that ratio for
    Llama 3.1 8B; the first version said 2.0 and put the eager 8B rows 8-11% too fast."""
    from costmodels.compute import layer_elementwise_bytes
    from costmodels.types import BF16
    m = catalog.load_model("llama3.1-8b")
    h, f, kv = m.hidden, m.ffn_hidden, m.hidden * m.num_kv_heads // m.num_heads
    bf16, fp32 = 2, 4
    rmsnorm = ((bf16 + fp32)                 # x.float()
               + (fp32 + fp32)               # pow(2)
               + fp32                        # mean(-1): reads x^2, writes one number per token
               + (fp32 + fp32)               # x * rsqrt(...)
               + (fp32 + bf16)               # .type_as(x)
               + (bf16 + bf16)) * h          # * weight
    residual = 3 * bf16 * h                  # h = h + block(x): two reads, one write
    rope = ((bf16 + fp32) + (fp32 + fp32) + (fp32 + bf16)) * (h + kv)   # float, complex mul, type_as
    swiglu = (2 * bf16 + 3 * bf16) * f       # silu (read, write), then silu * w3 (2 reads, 1 write)
    copies = 2 * bf16 * (kv + h) + 2 * bf16 * h   # repeat_kv on K and V; output.transpose().contiguous()
    eager = 2 * rmsnorm + 2 * residual + rope + swiglu + copies
    reference = float(layer_elementwise_bytes(m, 1.0, 8192, 1, False, True, BF16))   # flash: no s x s term
    ratio = eager / reference
    assert ratio == pytest.approx(2.94, abs=0.01)
    assert catalog.load_framework("torchtitan").elementwise_traffic == pytest.approx(ratio, rel=0.01)


def _tinyllama_one_h100(zero):
    from pathlib import Path
    model = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu" / "tinyllama-1.1b.yaml"
    parallel = {"tp": 1, "pp": 1, "dp": 1, "micro_batch": 2, "global_batch": 16, "zero_stage": zero,
                "precision": "bf16", "recompute": "none", "flash_attention": True}
    return planner.estimate(model=str(model), cluster={"gpu": "H100-SXM", "num_gpus": 1},
                            parallel=parallel).estimate


def test_zero3_hooks_cost_the_host_per_module():
    """Item 5: DeepSpeed ZeRO-3 hooks every submodule before and after it runs, forward and backward
    (parameter_offload.py _register_hooks_recursively); measured on the CPU that is about 3.9 and 4.8
    counted kernels of host time per module and pass (benchmarks/data/zero3_hooks.yaml). The model charged
    none: TinyLlama on one H100 (the planner's own GPU runs) was predicted faster at ZeRO-3 than at ZeRO-1
    (0.585 against 0.604 s), where it measured 2.133 against 1.063 s."""
    z1, z3 = _tinyllama_one_h100(1), _tinyllama_one_h100(3)
    fw = catalog.load_framework("megatron-deepspeed")
    host = fw.host_overhead_s * (fw.zero3_module_hooks_forward + fw.zero3_module_hooks_backward)
    # 22 layers of 10 modules (FlashAttention) and 9 modules outside them, 8 micro-batches; most of it shows,
    # where the host is the slower side of a layer
    assert z3.step_time_s - z1.step_time_s >= 0.6 * 8 * (22 * 10 + 9) * host
    assert z3.step_time_s > 1.5 * z1.step_time_s


@pytest.mark.parametrize("hooks, message", [({"forward": -1}, "zero3_module_hooks.forward must be a number"),
                                            ({"forward": True}, "zero3_module_hooks.forward must be a number"),
                                            ({"sideways": 1}, "must map forward and backward"),
                                            ([1, 2], "must map forward and backward")])
def test_zero3_module_hooks_are_checked(hooks, message):
    """A framework file's zero3_module_hooks is refused with one line unless it maps forward / backward
    to numbers in [0, 100]."""
    d = catalog.framework_dict("megatron-deepspeed")
    d["zero3_module_hooks"] = hooks
    with pytest.raises(SpecError, match=message):
        catalog.framework_from_dict(d)


def test_zero2_and_zero3_gradient_paths_move_bytes_every_micro_batch():
    """Item 5: DeepSpeed's ZeRO-2 / ZeRO-3 copy each gradient into the reduce bucket, scale it, cast it to
    the communication dtype and back and add the rank's share into the partition every micro-batch
    (stage_1_and_2.py reduce_ipg_grads, average_tensor, copy_grads_in_partition); counted on the CPU at
    dp 1 and 2 (benchmarks/gpu/host_time, HOST_SYNC_BYTES): beyond ZeRO-1's 6 bytes per parameter, ZeRO-2
    moves 36 (fp32 reduction) / 22 (bf16) at dp 1 and 31 / 17 at dp 2. The model charged ZeRO-2 as ZeRO-1:
    the planner's own H100 runs at ZeRO-2 were predicted as fast as ZeRO-1 where they took 11.5 ms more
    per micro-batch."""
    from costmodels.layout_time import grad_accumulation_bytes_per_param
    from costmodels.types import GC_16BIT, GC_FP32
    fw = catalog.load_framework("megatron-deepspeed")
    knobs = lambda zero, comm, dp: type("K", (), {"zero": zero, "grad_comm": comm, "shard": float(dp),  # noqa: E731
                                                  "precision": BF16})()
    measured = {(2, GC_FP32, 1): 36, (2, GC_FP32, 2): 31, (2, GC_16BIT, 1): 22, (2, GC_16BIT, 2): 17,
                (3, GC_FP32, 1): 46, (3, GC_FP32, 2): 34, (3, GC_16BIT, 1): 20, (3, GC_16BIT, 2): 14}
    for (zero, comm, dp), extra in measured.items():
        assert float(grad_accumulation_bytes_per_param(fw, knobs(zero, comm, dp))) == pytest.approx(6 + extra)
    z1, z2 = _tinyllama_one_h100(1), _tinyllama_one_h100(2)
    assert z2.step_time_s > z1.step_time_s * 1.1


@pytest.mark.parametrize("table, message", [({"zero1": {}}, "zero_gradient_bytes must be"),
                                            ({"zero2": {"fp32": {"each": 1, "partition": 1}}}, "must map fp32 and 16bit"),
                                            ({"zero2": {"fp32": {"each": 1}, "16bit": {"each": 1, "partition": 1}}},
                                             "must map each and partition"),
                                            ({"zero2": {"fp32": {"each": -1, "partition": 1},
                                                        "16bit": {"each": 1, "partition": 1}}}, "expected a number")])
def test_zero_gradient_bytes_are_checked(table, message):
    """A framework file's zero_gradient_bytes is refused with one line unless it has the documented shape."""
    d = catalog.framework_dict("megatron-deepspeed")
    d["zero_gradient_bytes"] = table
    with pytest.raises(SpecError, match=message):
        catalog.framework_from_dict(d)
