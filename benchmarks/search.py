"""Planner benchmark: speed, exactness against the exhaustive reference, and sanity against practice.

Usage: python benchmarks/search.py [--data DIR] [--skip-published]
Prints: time to plan Llama-3.1-405B on 16,384 H100 and a 7B model on 8 GPUs with every knob free
(layouts considered and scored per second); the planner's best vs the exhaustive reference and
Optuna on small cases; for every published run of ../shared/validation the planner's choice next
to the published layout (whose feasibility under the matching framework's rules is checked).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

import planner  # noqa: E402
from costmodels.errors import PlannerError  # noqa: E402
from costmodels.estimate import estimate  # noqa: E402
from benchmarks.exhaustive import exhaustive_reference  # noqa: E402
from planner.specs import case_from_dict  # noqa: E402
from planner.text import layout_line  # noqa: E402
from planner.validation import load_records  # noqa: E402
from search_spaces.constraints import Ctx  # noqa: E402
from search_spaces.frameworks import check_columns, layout_columns, load_profile  # noqa: E402
from search_spaces.space import build_space  # noqa: E402


def per_token(p):
    return p.estimate.step_time_s / p.estimate.tokens_per_step


def speed():
    print("== speed (every knob free) ==")
    for model, gpu, n, gbs in (("llama3.1-405b", "H100-SXM", 16384, 2048), ("llama2-7b", "H100-SXM", 8, 512)):
        t = time.perf_counter()
        r = planner.plan(model, gpu, gpus=n, global_batch=gbs)
        dt = time.perf_counter() - t
        print(f"{model} on {n} x {gpu}: {dt:.2f} s; {r.considered:,} layouts in the space "
              f"({r.considered / dt:,.0f}/s considered), {r.checked:,} combined from CP-SAT's sub-lattices and "
              f"checked ({r.checked / dt:,.0f}/s), {r.lattice:,} satisfy every rule and were scored, {r.fitting:,} fit")
        print(f"   best: {layout_line(r.best.layout)}  {r.best.estimate.step_time_s:.3f} s/step, "
              f"MFU {r.best.estimate.mfu * 100:.1f}%")


SMALL = {"precision": ["bf16"], "grad_comm": ["fp32"], "offload_optimizer": ["none"], "offload_params": ["none"],
         "cp": [1], "recompute_layers": [0], "vpp": [1]}


def exactness():
    print("\n== exactness: planner vs exhaustive reference vs Optuna ==")
    for model, gpu, n, gbs in (("llama2-7b", "A100-80GB", 8, 256), ("gpt-3.6b", "H100-SXM", 16, 512)):
        r = planner.plan(model, gpu, gpus=n, global_batch=gbs, choices=SMALL)
        space = build_space(r.model, r.cluster, r.request)
        t = time.perf_counter()
        _, ref = exhaustive_reference(space, load_profile("megatron-deepspeed"))
        dt = time.perf_counter() - t
        opt = planner.plan(model, gpu, gpus=n, global_batch=gbs, choices=SMALL, method="optuna", trials=500, seed=1)
        print(f"{model} on {n} x {gpu}: planner {per_token(r.best) * 1e6:.5f} us/token, exhaustive "
              f"{ref * 1e6:.5f} (equal: {np.isclose(ref, per_token(r.best), rtol=1e-9)}, {dt:.1f} s), Optuna "
              f"{per_token(opt.best) * 1e6:.5f} ({(per_token(opt.best) / ref - 1) * 100:+.2f}%)")


FRAMEWORK_OF = {"narayanan21": "megatron-lm", "korthikanti22": "megatron-lm", "megatron2021": "megatron-lm",
                "mcore": "megatron-lm", "nemo2407": "megatron-lm", "bloom": "megatron-deepspeed",
                "mosaic": "megatron-deepspeed", "torchtitan": "megatron-lm", "deepspeed": "megatron-deepspeed"}


def published(data_dir):
    print("\n== published runs: planner's choice vs the published layout ==")
    seen = set()
    feasible = 0
    total = 0
    for rec in load_records(data_dir, include_vtrain=False):
        case = case_from_dict(rec.case)
        key = (repr(case.model), case.cluster.gpu.name, case.cluster.num_gpus, case.layout.gbs, case.layout.seq_len)
        profile = load_profile(FRAMEWORK_OF[rec.source])
        ctx = Ctx(case.model, case.cluster, case.layout.world)
        ok = bool(check_columns(profile.all_rules, ctx, layout_columns(case.layout))[0])
        bad = [r.name for r in profile.all_rules
               if not bool(np.asarray(r.holds(ctx, layout_columns(case.layout))).reshape(-1)[0])]
        total += 1
        feasible += ok
        pub = estimate(case.model, case.cluster, profile.load_cost_profile(), case.layout)
        if key in seen:
            continue
        seen.add(key)
        try:
            r = planner.plan(case.model, case.cluster, gpus=case.layout.world, global_batch=case.layout.gbs,
                             seq_lens=[case.layout.seq_len], framework=profile.name,
                             choices={"precision": [case.layout.precision.value]})
            mine = f"{layout_line(r.best.layout)}  {r.best.estimate.step_time_s:.3g} s"
        except PlannerError as exc:
            mine = f"no plan: {exc}"
        print(f"{rec.id} ({profile.name}; published layout {'feasible' if ok else 'BREAKS ' + ','.join(bad)}, "
              f"predicted {pub.step_time_s:.3g} s, measured {rec.measured_step_s:.3g} s)")
        print(f"   published: {layout_line(case.layout)}")
        print(f"   planner:   {mine}")
    print(f"published layouts inside the feasible set: {feasible}/{total}")


def geniac():
    print("\n== 12.3B GQA model (background.md) on 48 H100 ==")
    r = planner.plan("geniac-12.3b", "H100-SXM", gpus=48, global_batch=1536)
    print(f"planner: {layout_line(r.best.layout)}  {r.best.estimate.step_time_s:.2f} s, MFU {r.best.estimate.mfu * 100:.1f}%")
    hand = planner.plan("geniac-12.3b", "H100-SXM", gpus=48, global_batch=1536,
                        choices={"tp": [1], "pp": [6], "recompute": ["none"]})
    print(f"hand-tuned tp 1 / pp 6: {layout_line(hand.best.layout)}  {hand.best.estimate.step_time_s:.2f} s, "
          f"MFU {hand.best.estimate.mfu * 100:.1f}% ({(per_token(hand.best) / per_token(r.best) - 1) * 100:+.1f}% "
          "time per token vs the planner's choice)")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=None)
    ap.add_argument("--skip-published", action="store_true")
    args = ap.parse_args(argv)
    speed()
    exactness()
    geniac()
    if not args.skip_published:
        published(args.data)


if __name__ == "__main__":
    main()
