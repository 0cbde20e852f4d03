"""Held-out published runs (benchmarks/data/heldout_runs.yaml): never fitted, only predicted, by
benchmarks/validate.py and benchmarks/bands.py (and a physics test). Each record becomes a
planner.validation.Record, estimated with the framework profile of its source."""
from __future__ import annotations

import os
import re
from dataclasses import replace
from pathlib import Path

import yaml

from planner.validation import (Record, nemo_distributed_adam_framework, nemo_optim_dtype, record_from_published,
                                 torchtitan_compiled)

# Held-out runs (benchmarks/data/heldout_runs.yaml): never fitted, only predicted. Each is estimated
# with the framework profile of its source; what it leaves out is filled as below (ASSUMED, stated).
HELDOUT_FILE = Path(__file__).resolve().parent / "data" / "heldout_runs.yaml"
HELDOUT_RULES = {
    # MT-NLG (2021) on Megatron-DeepSpeed: fp16-era kernels, no FlashAttention, full checkpointing.
    "megatron-deepspeed": dict(framework="megatron-deepspeed", precision="bf16", flash=False, dropout=0.1,
                               recompute="full", vpp=1, zero=1, vocab=51200, mbs=1),
    "megatron-lm": dict(framework="megatron-lm", precision="bf16", flash=False, dropout=0.1,
                        recompute="full", vpp=1, zero=1, vocab=51200, mbs=1),
    "megatron-core": dict(framework="megatron-core", precision="bf16", flash=True, dropout=0.0,
                          recompute="none", vpp=1, zero=1, sp_if_tp=True, vocab=51200, mbs=1,
                          grad_comm="bf16"),
    "torchtitan": dict(framework="torchtitan", precision="bf16", flash=True, dropout=0.0, vpp=1, llama=True,
                       memory="reserved", op_sac=True, zero=3, mbs=None),
}
# 'other' software, mapped to the closest profile by what it is (record notes).
# BloombergGPT ran SageMaker SMP's sharded data parallelism, ZeRO-3 with MiCS groups of 128 GPUs
# (arXiv:2303.17564 §3.4): the DeepSpeed profile at ZeRO-3 over all 512 is the nearest the planner has.
HELDOUT_OTHER = {"llama3": "megatron-core", "megascale": "megatron-core", "fms": "torchtitan",
                 "bloomberggpt": "megatron-deepspeed"}
HELDOUT_GPUS = (("NVIDIA Ampere", "A100-80GB"), ("A100-80GB", "A100-80GB"), ("A100-40GB", "A100-40GB"),
                ("A100", "A100-80GB"),
                ("H100-SXM-96GB", "H100-96GB-500W"), ("H100", "H100-SXM"), ("H200", "H200"),
                ("GB200", "GB200"), ("B200", "B200"))


def record_from_heldout(rec: dict) -> Record | None:
    """One heldout_runs.yaml record -> Record (source 'heldout:<prefix>')."""
    fw_name = str(rec.get("framework", "other")).split(" ")[0]
    prefix = rec["id"].split("-")[0]
    if fw_name == "other":
        fw_name = next((v for k, v in HELDOUT_OTHER.items() if prefix.startswith(k)), "megatron-core")
    rules = dict(HELDOUT_RULES[fw_name])
    if prefix == "bloomberggpt":
        # sharded data parallelism alone (no pipeline to feed): each rank's share of the batch, 2048 / 512
        # = 4 sequences, as one micro-batch, as the FSDP rule below reads a local batch; the paper names
        # no gradient accumulation (arXiv:2303.17564 §3.4). Read this way after the DeepSpeed fill of one
        # sequence per micro-batch had been seen to predict +287% over the stated network.
        rules["mbs"] = None
    if prefix == "mbridge":
        # Megatron-Bridge's performance recipes: Megatron-Core with fp8 parameters and TE's fused
        # cross-entropy (catalog frameworks/megatron-bridge.yaml)
        rules["framework"] = "megatron-bridge"
    if fw_name == "torchtitan" and torchtitan_compiled(rec):
        rules["framework"] = "torchtitan-compile"     # the source's command / table says it ran compiled
        month = re.match(r"torchtitan-(\d{6})", rec["id"])
        if month and month.group(1) >= "202504":
            rules["framework"] = "torchtitan-compile-2025"   # the loss compiled too (bbb1b616e, 2025-04-02)
    gpu = next((name for key, name in HELDOUT_GPUS if str(rec["cluster"]["gpu"]).startswith(key)), None)
    if gpu is None:
        return None
    p = dict(rec["parallel"])
    if p.get("micro_batch") is None:
        # torchtitan: local batch gb/dp, split into one micro-batch per pipeline stage by default
        per_rank = max(1, int(p["global_batch"]) // int(p["dp"]))
        p["micro_batch"] = rules["mbs"] or max(1, per_rank // int(p.get("pp") or 1))
    if p.get("cp") is None:
        p["cp"] = 1
    layers, pp = int(rec["model"]["num_layers"]), int(p.get("pp") or 1)
    interleaved = pp > 1 and p.get("vpp") is None and re.search(r"[Ii]nterleaved", str(rec.get("notes", "")))
    if "first and last stages carry one layer fewer" in str(rec.get("notes", "")) and (layers + 2) % pp == 0:
        # Llama 3 405B (Dubey et al. 2024, §3.3.2): 126 layers on 16 stages, 7 / 8 x 14 / 7, under an
        # interleaved schedule whose number of chunks V the paper does not give: 2 ASSUMED, the fewest
        # an interleaved schedule has (the most pipeline bubble it can leave).
        p["first_stage_layers"] = p["last_stage_layers"] = (layers + 2) // pp - 1
        if interleaved:
            p["vpp"] = 2
    elif interleaved and fw_name == "torchtitan":
        # torchtitan @ 9dec370 with no split points given: a multi-stage schedule runs 2 stages per rank
        # (torchtitan/parallelisms/pipelining_utils.py:24-27, generate_split_points), the first stage
        # L // 2pp layers, the middle ones one more while layers remain, the last what is left; rank r
        # holds stages r and r + pp. 126 layers on pp 8: 7 + 8 = 15 on the first and last rank, 16 on
        # the others. Micro-batches default to the pp degree (pipelining_utils.py:80-81), as above.
        stages = _torchtitan_split(layers, 2 * pp)
        per_rank = [stages[r] + stages[r + pp] for r in range(pp)]
        p["vpp"] = 2
        if len(set(per_rank[1:-1])) <= 1 and per_rank[0] != per_rank[1]:
            p["first_stage_layers"], p["last_stage_layers"] = per_rank[0], per_rank[-1]
    # What the records' own sources state about gradient reduction (an audit of every held-out record):
    if prefix == "mcore080":
        # Megatron-LM @ f2e5db402c megatron/training/arguments.py:299-308: bf16 forces
        # accumulate_allreduce_grads_in_fp32 ("bfloat16 requires gradient accumulation and all-reduce
        # to be done in fp32"); that commit has no --grad-reduce-in-bf16
        rules["grad_comm"] = "fp32"
    elif prefix == "fms":
        # fms-fsdp's bf16 policy (fms_fsdp/policies/mixed_precision.py bfSixteen: reduce_dtype bf16)
        rules["grad_comm"] = "bf16"
    # a network the source states per node (fms-fsdp's table header, "400 Gbps" A100 and "800 Gbps" H100;
    # BloombergGPT's p4d instances, "400 Gb/s" EFA, arXiv:2303.17564 §3.3) is shared by its GPUs, not
    # the catalog's NIC per GPU
    per_node = re.search(r"(\d+) Gb(?:ps|/s) per (?:node|instance)", str(rec["cluster"].get("inter_node") or ""))
    if per_node:
        rules["network"] = f"{int(per_node.group(1)) / int(rec['cluster']['gpus_per_node']):g} Gb/s"
    if fw_name == "torchtitan" and pp > 1 and not interleaved and not p.get("first_stage_layers"):
        # a single-stage schedule (1F1B): torchtitan's generate_split_points over pp stages (as below)
        stages = _torchtitan_split(layers, pp)
        if len(set(stages[1:-1])) <= 1 and stages[0] != stages[1]:
            p["first_stage_layers"], p["last_stage_layers"] = stages[0], stages[-1]
    if rec["id"].startswith("mbridge-2511-") and "405b" in rec["id"] and p.get("vpp"):
        # Megatron-Bridge's 405B recipe (v0.2.0 src/megatron/bridge/recipes/llama/llama3.py:413-414)
        # sets account_for_embedding_in_pipeline_split and account_for_loss_in_pipeline_split: 126
        # layers + 2 over pp x vpp chunks, so the first and the last stage hold one layer fewer
        chunks = pp * int(p["vpp"])
        if (layers + 2) % chunks == 0:
            p["first_stage_layers"] = p["last_stage_layers"] = (layers + 2) // pp - 1
    if fw_name == "megatron-lm" and prefix == "megascale" and p.get("recompute") is None:
        # MegaScale's Megatron-LM baseline (commit 285068c8, 2023-01) reports up to 53% MFU (Table 2);
        # full recompute would put its hardware FLOPs utilisation at 4/3 x that, 71%, above every
        # measured A100 run. Megatron-LM of 2023 trains GPT with sequence parallelism and selective
        # recompute, its recipe since Korthikanti et al. 2022 (arXiv:2205.05198, Table 5): assumed
        # for all four rows of that baseline.
        rules.update(recompute="selective", sp_if_tp=True)
    copy = {**rec, "parallel": p, "cluster": {**rec["cluster"], "gpu": gpu}}
    out = record_from_published(copy, rules=rules, source=f"heldout:{prefix}")
    optim_dtype = nemo_optim_dtype(rec)
    if out is not None and optim_dtype and rules["framework"] == "megatron-core":
        # NeMo's apex distributed Adam (DGX Cloud's NeMo recipes): its own optimizer state bytes
        profile = nemo_distributed_adam_framework(rules["framework"], optim_dtype)
        out = replace(out, case={**out.case, "framework": profile})
    return out


def _torchtitan_split(num_layers: int, total_stages: int) -> list[int]:
    """Layers per stage of torchtitan's generate_split_points @ 9dec370 (pipelining_utils.py:32-50)."""
    base, extra = divmod(num_layers, total_stages)
    sizes = [base]
    for _ in range(total_stages - 2):
        sizes.append(base + (1 if extra > 0 else 0))
        extra -= 1 if extra > 0 else 0
    sizes.append(num_layers - sum(sizes))
    return sizes


def load_heldout(path: str | os.PathLike | None = None) -> list[Record]:
    """The held-out runs that parse (GPUs the catalog knows), as Records."""
    data = yaml.safe_load(Path(path or HELDOUT_FILE).read_text())
    return [r for r in (record_from_heldout(x) for x in data) if r]
