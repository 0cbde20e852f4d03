"""The cost model against the measured runs of ../shared/validation (in-sample: the catalog's
constants were fitted on these runs). The out-of-sample figures (leave-one-source-out, held-out
runs) are benchmark targets printed by benchmarks/validate.py, not tests."""
import pytest

from planner.validation import evaluate, load_records, summarize


@pytest.fixture(scope="module")
def results(validation_dir):
    return evaluate(load_records(validation_dir))


@pytest.fixture(scope="module")
def summary(results):
    return summarize(results)


def test_step_time_in_sample(summary):
    assert summary["mape_mean_of_sources"] <= 0.12
    for source, mape in summary["mape_by_source"].items():
        assert mape <= 0.30, source


def test_few_runs_are_off_by_more_than_30_percent(summary):
    published = [r for r in summary["over_30pct"] if not r.startswith("vtrain")]
    assert len(published) <= 6
    assert len(summary["over_30pct"]) <= 0.35 * summary["count_by_source"]["vtrain"]


# Memory misses over 10%, stated in README (issue 8 target: every measured run within 10%; not met).
# One BLOOM reading says 65 GB at micro-batch 2 where the same table has 56 GB at micro-batch 4; one
# fp16 ZeRO-1 run is at 10.4% (BLOOM's fp16 ZeRO-1 runs read a median 6.7% above the model).
CONTRADICTORY_READING = "bloomchron-0221-h13824-l84-dp8-tp8-pp6-mbs2-gbs2048"
KNOWN_MEMORY_MISSES = {CONTRADICTORY_READING, "bloomchron-0225-h14336-l72-dp12-tp8-pp4-mbs2-gbs2016"}
# BLOOM's runs with DeepSpeed's ZeRO-0 optimizers (BF16_Optimizer from 02-28 on, one FP16_Optimizer
# run): nvidia-smi reads 9-15% above the state and activations until the optimizer step's gradient
# copies are counted (costmodels/memory.py zero0_step_copy_bytes).
ZERO0_BLOOM = {"bloom176b-prequel-0228-dp4-tp8-pp12-mbs2-h64", "bloom176b-prequel-0228-dp8-tp4-pp12-mbs2-h64",
               "bloom176b-prequel-0228-dp8-tp4-pp12-mbs2-h112", "bloom176b-prequel-0228-dp8-tp4-pp12-mbs2-h128",
               "bloom176b-prequel-0228-dp8-tp4-pp12-mbs4-h64", "bloomchron-0228-h12288-l106-dp8-tp4-pp12-mbs2-gbs2048",
               "bloomchron-0228-h12288-l100-dp8-tp8-pp6-mbs2-gbs2048", "bloomchron-0228-h12288-l100-dp8-tp8-pp6-mbs4-gbs2048",
               "bloomchron-0228-h13312-l82-dp4-tp8-pp12-mbs4-gbs2048", "bloomchron-0228-h13312-l82-dp8-tp4-pp12-mbs2-gbs2048",
               "bloomchron-0228-h13312-l82-dp8-tp4-pp12-mbs4-gbs2048", "bloom-prequel-0221-181b-zero0"}


def test_memory_within_10_percent_where_measured(summary):
    assert summary["memory_mape"] <= 0.05
    assert set(summary["memory_over_10pct"]) <= KNOWN_MEMORY_MISSES


def test_zero0_optimizer_runs_count_the_step_copies(results):
    """BLOOM's BF16_Optimizer runs and its one FP16_Optimizer run were under-predicted by 9-15%
    (nvidia-smi on the embedding stage's node); with the optimizer step's gradient copies counted
    every one is within 6% (within 5% until the allocator overhead fitted without the hand-set 0.5 GiB
    staging, 0.145, put the worst at +5.5%: now over, where it was 9-15% under)."""
    zero0 = [r for r in results if r.record.id in ZERO0_BLOOM]
    assert len(zero0) == len(ZERO0_BLOOM)
    worst = max(zero0, key=lambda r: abs(r.memory_error))
    assert abs(worst.memory_error) <= 0.06, (worst.record.id, worst.memory_error)


def test_memory_misses_stay_within_16_percent(results):
    measured = [r for r in results if r.memory_error is not None and r.record.id != CONTRADICTORY_READING]
    assert measured and max(abs(r.memory_error) for r in measured) <= 0.11


def test_published_runs_are_predicted_to_fit(summary):
    """Every published layout trained, so none may be predicted not to fit. The Azure ZeRO-3 runs
    (175B-2T) kept their activation checkpoints in host memory (DeepSpeed's --checkpoint-in-cpu)."""
    assert summary["not_fitting"] == []


def test_pair_order(summary):
    assert summary["pair_order_right"] >= 0.85


def _run_key(record):
    p = record.case["parallel"]
    return (record.model_key, p["tp"], p["pp"], p["dp"], p["micro_batch"], p["global_batch"],
            round(record.measured_step_s, 1))


def test_every_measured_run_is_counted_once(validation_dir):
    """deepspeed_runs.yaml repeated BLOOM's production log line (iteration 85376, 104.7 s) that
    published_dev.yaml holds as bloom176b-production, and modelled it on a DGX A100 network: the fit
    weighed one run twice, and leaving 'bloom' out still fitted on it under 'deepspeed'."""
    seen = {}
    for r in load_records(validation_dir, include_vtrain=False):
        key = _run_key(r)
        assert key not in seen, f"{r.id} repeats {seen[key]}"
        seen[key] = r.id


def test_bloom_bf16_runs_use_the_embedding_aware_pipeline_partition(validation_dir):
    """BLOOM's --pp-partition-method 'type:transformer|embedding' (bigscience tr11-176B-ml README.md:
    134-146): pp rank 0 holds [embed | 5 blocks], ranks 1-10 six blocks, rank 11 [5 blocks | embed]."""
    records = {r.id: r for r in load_records(validation_dir, include_vtrain=False)}
    p = records["bloom176b-production"].case["parallel"]
    assert (p["first_stage_layers"], p["last_stage_layers"]) == (5, 5)
    # The fp16 runs before 02-28 kept the default 'type:transformer' partition: even stages.
    assert "first_stage_layers" not in records["bloom-prequel-0221-181b-zero1"].case["parallel"]


def test_torchtitan_rows_take_the_compile_profile_their_table_states(validation_dir):
    """torchtitan's 2024-12 Table 2 is "FSDP + CP + torch.compile + Float8" (benchmarks/
    llama3_h100_202412_torchtitan.md); its row ids carry no "compile", and the id alone put all four
    on the eager profile (2x the eager elementwise bytes, eager kernel launches). The notes say
    "torch.compile on" / "off" for every torchtitan row."""
    frameworks = {r.id: r.case["framework"] for r in load_records(validation_dir, include_vtrain=False)
                  if r.source == "torchtitan"}
    table2 = [k for k in frameworks if k.startswith("torchtitan-t2-")]
    assert len(table2) == 4
    assert {frameworks[k] for k in table2} == {"torchtitan-compile"}
    assert frameworks["torchtitan-t1-8b-fsdp"] == frameworks["torchtitan-t3-8b-128gpu-fsdp"] == "torchtitan"
    assert frameworks["torchtitan-t1-8b-fsdp-compile"] == "torchtitan-compile"


def test_nemo_gpt3_175b_512gpu_row_pipelines_its_tp_communication_as_mlperf_did(validation_dir):
    """NeMo 24.07's 512-GPU GPT-3 175B row links its TFLOP/s to the MLPerf Training result; NVIDIA's
    MLPerf Training v4.0 config for that layout (64 DGX H100, TP 4, PP 8, micro-batch 2, GBS 2048;
    config_DGXH100_64x8x128x4x8_mbs2.sh) sets TP_COMM_OVERLAP=True. The 128-GPU row keeps the NeMo
    launcher's ub_tp_comm_overlap: False (gpt3/175b.yaml:149)."""
    parallel = {r.id: r.case["parallel"] for r in load_records(validation_dir, include_vtrain=False)
                if r.source == "nemo2407"}
    assert parallel["nemo2407-h100-fp8-gpt3-175b-512gpu"]["tp_comm_overlap"] is True
    assert parallel["nemo2407-h100-fp8-gpt3-175b-128gpu"]["tp_comm_overlap"] is False


def test_records_take_what_their_own_launch_configs_state(validation_dir):
    """Settings a record's own sources state, where the per-source defaults said otherwise (an audit of
    every non-vTrain record against its notes and cited configs):
    - narayanan21 Table 1, 1.7B-18.4B: --DDP-impl torch (run_table_1.sh DDP=torch; notes), so PyTorch
      DDP all-reduces buckets during backward; the larger rows keep --DDP-impl local (after backward);
    - NeMo GPT-3 5B / 175B (128 GPUs): the launcher's GPT-3 configs (gpt3/5b.yaml, 175b.yaml @ 07a8f783)
      set dropout 0.1 and GPT2BPETokenizer, 50,257 tokens padded to 128 x tp;
    - llm-foundry's A100 'bf16 | PURE' rows reduce gradients in bf16 (Composer's PURE mixed precision);
    - Megatron-DeepSpeed's long-sequence rows: the folder's 30B script sets global_batch_size=2 with
      batch_size=1 (pretrain_gpt_30B_seq_parallel.sh:96,172), two micro-batches per step."""
    records = {r.id: r.case for r in load_records(validation_dir, include_vtrain=False)}

    def overlap(rid):
        fw = records[rid]["framework"]
        return fw["dp_overlap_zero0"] if isinstance(fw, dict) else None

    for rid in ("narayanan21-t1-gpt1.7b", "narayanan21-t1-gpt3.6b", "narayanan21-t1-gpt7.5b",
                "narayanan21-t1-gpt18.4b"):
        assert overlap(rid) == 1.0, rid
    assert overlap("narayanan21-t1-gpt39.1b") is None          # local DDP: the profile's 0.0
    for rid, vocab in (("nemo2407-h100-fp8-gpt3-5b", 50304), ("nemo2407-h100-fp8-gpt3-175b-128gpu", 50688)):
        model = records[rid]["model"]
        assert model["hidden_dropout"] == model["attention_dropout"] == 0.1
        assert model["vocab_size"] == vocab                     # 50,257 padded to 128 x tp (tp 1, tp 4)
    assert records["nemo2407-h100-fp8-gpt3-175b-512gpu"]["model"]["hidden_dropout"] == 0.0   # MLPerf's
    assert records["mosaic-a100-40gb-bf16-mpt70b-s2048-128gpu"]["parallel"]["grad_comm"] == "bf16"
    assert records["mosaic-a100-bf16-mpt70b-s2048-64gpu"]["parallel"]["grad_comm"] == "bf16"
    assert "grad_comm" not in records["mosaic-a100-bf16-mpt7b-s2048-8gpu"]["parallel"]   # amp_bf16 DEFAULT
    for rid in ("mds-longseq-tp32-seq2k-a100", "mds-longseq-tp32-seq128k-a100"):
        p = records[rid]["parallel"]
        assert (p["micro_batch"], p["dp"], p["global_batch"]) == (1, 1, 2)


def test_heldout_records_take_what_their_own_sources_state():
    """The same audit on the held-out runs (benchmarks/heldout.py), each from the record's own source:
    - Megatron-Core r0.8.0's README runs reduce gradients in fp32 (bf16 forces
      accumulate_allreduce_grads_in_fp32, arguments.py:299-308 @ f2e5db402c), not bf16;
    - fms-fsdp reduces in bf16 (its bfSixteen policy) over the table header's network per node, 400 Gb/s
      (A100) and 800 Gb/s (H100) for 8 GPUs, not the catalog's per-GPU NICs;
    - torchtitan's 1F1B 405B runs split 126 layers as generate_split_points does for one stage per
      rank (9dec370 pipelining_utils.py:18-50): 15 / 16 x 6 / 15;
    - Megatron-Bridge 25.11's 405B recipe accounts for the embedding and the loss in the pipeline
      split (llama3.py:413-414): the first and the last stage hold 15 layers at pp 8, vpp 8."""
    from benchmarks.heldout import load_heldout
    runs = {r.id: r.case for r in load_heldout()}
    assert {runs[k]["parallel"]["grad_comm"] for k in runs if k.startswith("mcore080")} == {"fp32"}
    a100, h100 = runs["fms-fsdp-a100-llama2-7b-hsdp-128gpu"], runs["fms-fsdp-h100-llama2-70b-fsdp-96gpu"]
    assert a100["parallel"]["grad_comm"] == h100["parallel"]["grad_comm"] == "bf16"
    assert (a100["cluster"]["network_bandwidth"], h100["cluster"]["network_bandwidth"]) == ("50 Gb/s", "100 Gb/s")
    for rid in ("torchtitan-202412-t5-405b-3d-1f1b-512gpu", "torchtitan-202412-t6-405b-4d-cp1-32k-512gpu"):
        p = runs[rid]["parallel"]
        assert (p["vpp"], p["first_stage_layers"], p["last_stage_layers"]) == (1, 15, 15), rid
    p = runs["mbridge-2511-h100-fp8cs-llama31-405b-1024gpu"]["parallel"]
    assert (p["pp"], p["vpp"], p["first_stage_layers"], p["last_stage_layers"]) == (8, 8, 15, 15)
    # torchtitan's async TP is not Megatron's userbuffers pipelining (the table's 2D + AsyncTP row is
    # 5% faster, where pipelining the collectives as Megatron does would make it 22% faster): not modelled
    assert runs["torchtitan-202412-t4-70b-2d-asynctp-256gpu"]["parallel"]["tp_comm_overlap"] is False


def test_heldout_nemo_runs_keep_apex_distributed_adam_state():
    """DGX Cloud's NeMo recipes train with apex's DistributedFusedAdam, not Megatron-Core's distributed
    optimizer. Nemotron-4 340B sets optim.dtype bf16 (dgxc-benchmarking 35a9aec
    nemotron/nemotron4-340b-synth.yaml:186): no fp32 master copy and bf16 moments, 4 bytes per parameter
    over dp, not 12; the 15B recipe sets none (fp32), so NeMo keeps int16 remainders of the master
    weights beside the bf16 ones (NeMo v2.0.0 megatron_base_model.py:803-812): 10. With 12 the 340B
    run on 128 GPUs, which trained, was predicted not to fit (81 GiB before the allocator's cache)."""
    from benchmarks.heldout import load_heldout
    records = [r for r in load_heldout() if r.id.startswith("dgxc2411")]
    optimizer = {r.id: r.case["framework"]["state_bytes"]["bf16"]["optimizer"] for r in records}
    assert optimizer == {"dgxc2411-nemotron4-340b-bf16-128gpu": 4, "dgxc2411-nemotron4-340b-bf16-2048gpu": 4,
                         "dgxc2411-nemotron4-15b-bf16-16gpu": 10, "dgxc2411-nemotron4-15b-bf16-2048gpu": 10}
    fits = {r.record.id: r.fits for r in evaluate(records)}
    assert fits["dgxc2411-nemotron4-340b-bf16-128gpu"]


def test_heldout_a100_40gb_runs_are_estimated_on_the_40gb_part():
    """The loader read every 'A100*' GPU as the 80 GB part: GLM-130B (96 DGX-A100 8x40G, arXiv:2210.02414
    §2.3) and BloombergGPT (p4d, 40 GB A100, arXiv:2303.17564 §3.3) would have had 40 GiB more memory.
    BloombergGPT's SageMaker sharded data parallelism is ZeRO-3 (§3.4): the DeepSpeed profile at ZeRO-3,
    over the network the paper states per instance (the catalog's per-GPU NICs are 4x that)."""
    from benchmarks.heldout import load_heldout
    runs = {r.id: r.case for r in load_heldout()}
    forty = [k for k in runs if k.startswith(("glm130b", "bloomberggpt"))]
    assert len(forty) == 3 and {runs[k]["cluster"]["gpu"] for k in forty} == {"A100-40GB"}
    bb = runs["bloomberggpt-50b-512gpu-zero3"]
    assert (bb["framework"], bb["parallel"]["zero_stage"]) == ("megatron-deepspeed", 3)
    # the network its source states per p4d instance (400 Gb/s EFA, §3.3) over 8 GPUs, and its rank's
    # batch (2048 / 512) as one micro-batch: no accumulation is named
    assert (bb["cluster"]["network_bandwidth"], bb["parallel"]["micro_batch"]) == ("50 Gb/s", 4)
    assert {runs[k]["cluster"]["gpu"] for k in runs if k.startswith("mtnlg530b")} == {"A100-80GB"}


def test_vtrain_single_node_times_are_assembled_with_a_small_per_step_constant(validation_dir):
    """vTrain's single-node 'measured' times are exactly linear in layers and micro-batches within each
    (hidden, tp, micro-batch, pp, dp) group, and the per-step constant they carry is a few ms: far below
    the framework's per-step overhead, which is why those rows are read without it."""
    import sys
    from pathlib import Path

    import numpy as np
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from vtrain_structure import group_fits

    fits = group_fits(validation_dir / "vtrain" / "ground_truth_single.csv")
    assert len(fits) == 108
    assert np.median([f["max_residual_s"] for f in fits]) < 1e-5          # 10 us on 0.1-1 s steps
    assert max(f["max_residual_s"] for f in fits) < 2e-3
    assert max(f["c0_s"] for f in fits) < 0.015
    assert np.median([f["c0_s"] for f in fits]) < 0.005


def test_vtrain_single_node_rows_are_compared_without_the_per_step_overhead(validation_dir):
    from dataclasses import replace

    from costmodels.estimate import estimate_batch
    from costmodels.types import LayoutBatch
    from planner.validation import cases, comparable_step_s

    records = load_records(validation_dir)
    single = [r for r in records if r.source == "vtrain"][:3]
    multi = [r for r in records if r.source == "vtrain-multi"][:3]
    assert all(r.step_excludes == ("iteration_overhead",) for r in single)
    assert all(r.step_excludes == () for r in multi)
    for rec, case, res in zip(single + multi, cases(single + multi), evaluate(single + multi)):
        raw = float(estimate_batch(case.model, case.cluster, case.framework,
                                   LayoutBatch.from_layouts([case.layout])).step_time_s[0])
        expected = raw - (case.framework.iteration_overhead_s if rec in single else 0.0)
        assert res.predicted_step_s == pytest.approx(expected, rel=1e-12)
        # exact: the overhead enters the step once, so a framework without it gives the same number
        if rec in single:
            bare = replace(case.framework, iteration_overhead_s=0.0)
            raw0 = float(estimate_batch(case.model, case.cluster, bare,
                                        LayoutBatch.from_layouts([case.layout])).step_time_s[0])
            assert comparable_step_s(rec, case, raw) == pytest.approx(raw0, rel=1e-9)
