"""Issue 9: an 80% error band on every estimate, ties within model error, OOM risk."""
import json
import math
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

import planner
from costmodels import bands as B
from costmodels.errors import SpecError
from planner.cli import main
from planner.report import render_report
from planner.ties import TIE_LABEL, annotate, report_lines, summary_lines

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "llama2-7b-h100.yaml"
BAND_FILE = ROOT / "costmodels" / "catalog" / "error_bands.yaml"


def _estimate(**parallel):
    base = dict(tp=1, pp=1, dp=16, micro_batch=1, global_batch=256, zero_stage=1, recompute="full")
    base.update(parallel)
    return planner.estimate(model="llama2-13b", cluster={"gpu": "A100-80GB", "num_gpus": 16, "gpus_per_node": 8},
                            parallel=base)


def test_estimate_json_carries_both_bands_around_the_estimate():
    r = CliRunner().invoke(main, ["estimate", str(EXAMPLE), "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    lo, hi = d["step_time_band_s"]
    assert lo < d["step_time_s"] < hi
    mlo, mhi = d["peak_memory_band_bytes"]
    assert mlo < d["peak_memory_bytes"] < mhi
    # memory: few measured runs, so at least 10% either side
    assert mlo <= 0.9 * d["peak_memory_bytes"] + 1 and mhi >= 1.1 * d["peak_memory_bytes"] - 1
    assert d["oom_risk"] is False
    assert d["error_band"]["level"] == 0.8 and "all" in d["error_band"]["components"]


def test_estimate_text_shows_the_band_on_the_step_time_line():
    r = CliRunner().invoke(main, ["estimate", str(EXAMPLE)])
    assert r.exit_code == 0, r.output
    line = next(x for x in r.stdout.splitlines() if x.strip().startswith("step time"))
    assert "(80% band " in line
    assert "80% band" in next(x for x in r.stdout.splitlines() if "memory per GPU" in x and "of" in x)


def test_python_api_exposes_the_bands():
    res = planner.estimate(EXAMPLE)
    lo, hi = res.step_time_band_s
    assert lo < res.estimate.step_time_s < hi
    mlo, mhi = res.peak_memory_band_bytes
    assert mlo < res.estimate.peak_memory_bytes < mhi
    assert res.to_dict()["step_time_band_s"] == [lo, hi]


def _rel_width(res):
    lo, hi = res.step_time_band_s
    return math.log(hi / lo)


def test_zero3_under_megatron_deepspeed_has_a_wider_band_than_zero1():
    z1, z3 = _estimate(zero_stage=1), _estimate(zero_stage=3)
    assert _rel_width(z3) > _rel_width(z1)
    # the gather efficiency rests on 12 runs from 2 sources: the band says so
    assert any("zero3_gather_efficiency" in t for t in z3.bands["error_band"]["thin_constants"])
    assert not any("zero3" in t for t in z1.bands["error_band"]["thin_constants"])
    assert "zero3:megatron-deepspeed" in z3.bands["error_band"]["components"]


def test_band_file_has_a_provenance_header():
    text = BAND_FILE.read_text()
    head = [line for line in text.splitlines() if line.startswith("#")]
    assert any("WRITTEN BY: python benchmarks/bands.py" in line for line in head)
    assert any(line.startswith("# commit:") and "date:" in line for line in head)
    assert any("runs from" in line and "sources" in line for line in head)
    data = yaml.safe_load(text)
    prov = data["provenance"]
    assert prov["step_time_runs"] > 1000 and len(prov["step_time_sources"]) >= 10 and prov["memory_runs"] > 10
    comps = data["step_time"]["components"]
    assert comps["all"]["q10"] < 0 < comps["all"]["q90"]
    z3 = next(p for p in data["step_time"]["thin_constants"] if p["field"] == "zero3_gather_efficiency")
    assert z3["low"] < z3["catalog"] <= z3["high"] and z3["sources"] == 2


def _entry(rank, step, lo, hi, mem=50e9, hbm=80e9, zero=1, pp=1, thin=()):
    est = {"step_time_s": step, "step_time_band_s": [lo, hi], "tokens_per_step": 1e6,
           "peak_memory_bytes": mem, "peak_memory_band_bytes": [0.9 * mem, 1.1 * mem], "hbm_bytes": hbm,
           "oom_risk": 1.1 * mem > hbm, "time_breakdown_s": {"compute": step * 0.8, "pp_comm": step * 0.2 * (pp > 1),
                                                               "overhead": step * 0.2 * (pp == 1)},
           "error_band": {"thin_constants": list(thin)}}
    layout = {"tp": 1, "pp": pp, "dp": 8, "cp": 1, "zero_stage": zero, "offload_optimizer": "none",
              "offload_params": "none"}
    return {"rank": rank, "layout": layout, "estimate": est}


def test_ties_are_labelled_on_a_crafted_plan():
    best = _entry(1, 10.0, 9.0, 11.0, zero=3, thin=("zero3_gather_efficiency (12 runs, 2 sources)",))
    data = {"layout": best["layout"], "estimate": best["estimate"],
            "runner_ups": [_entry(2, 10.5, 9.5, 12.0, zero=1),           # overlaps: a tie
                           _entry(3, 14.0, 12.0, 16.0, pp=2)]}            # clear of the best's band
    ties = annotate(data)
    assert [r["tie"] for r in data["runner_ups"]] == [True, False]
    assert ties["tied_with_best"] == [2]
    # the rule prefers the tie that rests on no thin constant and a lower ZeRO stage; rank 1 stays the pick
    assert ties["preferred_rank"] == 2
    assert ties["best_rests_on_thin_constants"]
    assert "2" in ties["separate_by"] and "3" not in ties["separate_by"]
    text = "\n".join(summary_lines(data, ties))
    assert f"#2: {TIE_LABEL}" in text and "#3" not in text.split("prefers")[0]
    data["ties"] = ties
    md = "\n".join(report_lines(data))
    assert "## Model error" in md and TIE_LABEL in md and "| 3 |" in md


def test_the_tie_break_puts_memory_safety_first():
    """Among ties the first rule is no OOM risk: a tied layout whose upper memory band fits is preferred
    over one that rests on fewer thin constants, a narrower band and a lower ZeRO stage but whose upper
    band overflows (a review of 2026-12-07 dropped the OOM term and no test failed)."""
    best = _entry(1, 10.0, 9.0, 11.0, mem=76e9, zero=1)                           # 76 GB + 10% > 80 GB
    data = {"layout": best["layout"], "estimate": best["estimate"],
            "runner_ups": [_entry(2, 10.2, 9.0, 11.8, mem=60e9, zero=3,
                                  thin=("zero3_gather_efficiency (12 runs, 2 sources)",))]}
    ties = annotate(data)
    assert ties["tied_with_best"] == [2] and ties["oom_risk_ranks"] == [1]
    assert ties["preferred_rank"] == 2


def test_oom_risk_is_flagged():
    best = _entry(1, 10.0, 9.0, 11.0, mem=76e9, hbm=80e9)      # fits, but 76 GB + 10% > 80 GB
    data = {"layout": best["layout"], "estimate": best["estimate"], "runner_ups": []}
    ties = annotate(data)
    assert ties["oom_risk_ranks"] == [1]
    assert any("OOM RISK" in line for line in summary_lines(data, ties))
    # a real layout that fits by the point estimate but not by its upper memory band
    res = planner.estimate(model="llama2-7b", cluster={"gpu": "H100-SXM", "num_gpus": 16, "gpus_per_node": 8},
                           parallel=dict(tp=1, pp=1, dp=16, micro_batch=2, global_batch=512, zero_stage=1))
    assert res.estimate.fits and res.oom_risk
    assert res.peak_memory_band_bytes[1] > res.estimate.hbm_bytes
    r = CliRunner().invoke(main, ["estimate", str(EXAMPLE)])
    assert "OOM RISK" not in r.stdout


def overlapping_runner_ups(best_estimate: dict, runner_ups: list) -> list:
    """Ranks whose step-time band per token overlaps the best's, computed here from the bands alone
    (not by planner/ties.py, whose own lists the plan carries)."""
    def per_token(e):
        return e["step_time_band_s"][0] / e["tokens_per_step"], e["step_time_band_s"][1] / e["tokens_per_step"]
    lo, hi = per_token(best_estimate)
    return [r["rank"] for r in runner_ups if per_token(r["estimate"])[0] <= hi and lo <= per_token(r["estimate"])[1]]


def test_plan_outputs_carry_bands_ties_and_oom_risk(tmp_path):
    out = tmp_path / "job"
    r = CliRunner().invoke(main, ["plan", "--model", "llama2-7b", "--cluster", "H100-SXM", "--gpus", "16",
                                  "--global-batch", "512", "--quiet", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "model error (80% bands" in r.stdout and TIE_LABEL in r.stdout
    plan = json.loads((out / "plan.json").read_text())
    # The text flags an OOM risk exactly when plan.json has one (test_oom_risk_is_flagged forces one).
    at_risk = plan["estimate"]["oom_risk"] or bool(plan["ties"]["oom_risk_ranks"])
    assert ("OOM RISK" in r.stdout) == at_risk
    lo, hi = plan["estimate"]["step_time_band_s"]
    assert lo < plan["estimate"]["step_time_s"] < hi
    assert all(isinstance(x["tie"], bool) and "oom_risk" in x["estimate"] for x in plan["runner_ups"])
    tied = overlapping_runner_ups(plan["estimate"], plan["runner_ups"])
    assert plan["ties"]["tied_with_best"] == tied == [x["rank"] for x in plan["runner_ups"] if x["tie"]]
    assert tied                     # the case has ties to show
    assert plan["ties"]["oom_risk_ranks"] == [x["rank"] for x in plan["runner_ups"] if x["estimate"]["oom_risk"]]
    report = (out / "report.md").read_text()
    assert "## Model error" in report and "80% band" in report
    # `planner explain` re-renders the same section from plan.json alone
    assert "## Model error" in render_report(plan, figures={})


def test_band_floor_and_overlap():
    b = B.Band(10.0, 9.0, 11.0)
    assert b.overlaps(B.Band(12.0, 10.5, 13.0)) and not b.overlaps(B.Band(14.0, 12.0, 16.0))
    res = _estimate()
    lo, hi = res.step_time_band_s
    assert lo <= 0.95 * res.estimate.step_time_s and hi >= 1.05 * res.estimate.step_time_s


def test_component_quantiles_weight_each_source_equally():
    import sys
    sys.path.insert(0, str(ROOT / "benchmarks"))
    pytest.importorskip("scipy")
    import bands as bench
    # 100 runs of source a at +0.5, 1 run of b at -0.5: weighted by source, b sets the 10th percentile
    rows = [{"source": "a", "r": 0.5, "components": ["all"]}] * 100 + [{"source": "b", "r": -0.5, "components": ["all"]}]
    t = bench.component_table(rows)["all"]
    assert t["runs"] == 101 and t["sources"] == 2
    assert t["q10"] == pytest.approx(-0.5) and t["q90"] == pytest.approx(0.5)
    assert bench.weighted_quantile([0.5] * 100 + [-0.5], [1.0] * 101, 0.1) == pytest.approx(0.5)   # unweighted


def test_python_api_plan_exposes_bands_and_ties():
    res = planner.plan("llama2-7b", "H100-SXM", gpus=8, global_batch=256, top_k=3)
    eb = res.error_bands
    lo, hi = eb["estimate"]["step_time_band_s"]
    assert lo < res.best.estimate.step_time_s < hi
    assert [r["rank"] for r in eb["runner_ups"]] == [p.rank for p in res.runner_ups]
    tied = overlapping_runner_ups(eb["estimate"], eb["runner_ups"])
    assert eb["ties"]["tied_with_best"] == tied == [r["rank"] for r in eb["runner_ups"] if r["tie"]]


def test_an_advantage_resting_on_a_thin_constant_says_so(monkeypatch):
    """Llama-3.1-70B on 128 H100, activations kept on the GPU: the best is ZeRO-3 and its lead over #2
    (tp 2 / pp 4, ZeRO-1, about 1.2%) rests on the ZeRO-3 gather efficiency. (Free to offload the
    checkpoints, the best is ZeRO-3 at micro batch 4 with one gather per step, whose lead survives the
    loose range below: since the allocator's overhead was fitted, 0.10 -> 0.134.) Over the range its LOSO
    refits took, 0.482-0.516 since DeepSpeed's ZeRO-3 gradient path is charged (2026-12-06; 0.46-0.48
    before, when the order held and the plan said nothing), #2 wins at the bottom and the plan says so;
    were the constant as loose as a band file giving 0.25-0.95, likewise. The best's own band names the
    constant either way. (On 64 GPUs the ZeRO-3 best is an OOM risk and the plan puts a safe layout
    first: test_an_oom_risk_is_not_ranked_first_...)"""
    import copy

    def planned():
        res = planner.plan("llama3.1-70b", "H100-SXM", gpus=128, global_batch=512, seq_lens=[8192], top_k=5,
                           advice=False, choices={"offload_activations": ["none"]})
        assert res.best.layout.zero == 3
        return res, res.error_bands["ties"]

    res, ties = planned()
    low = next(p["low"] for p in B.load_bands()["step_time"]["thin_constants"]
               if p["field"] == "zero3_gather_efficiency")
    note = ties["advantage_from_thin_constants"][str(res.runner_ups[0].rank)]
    assert f"zero3_gather_efficiency at {low:.3g}" in note and "(12 runs, 2 sources)" in note
    assert any("zero3_gather_efficiency" in t for t in ties["best_rests_on_thin_constants"])

    loose = copy.deepcopy(B.load_bands())
    for p in loose["step_time"]["thin_constants"]:
        if p["field"] == "zero3_gather_efficiency":
            p["low"], p["high"] = 0.25, 0.95
    monkeypatch.setattr(B, "load_bands", lambda: loose)
    res, ties = planned()
    assert res.runner_ups[0].layout.zero < 3
    note = ties["advantage_from_thin_constants"][str(res.runner_ups[0].rank)]
    assert "zero3_gather_efficiency at 0.25" in note and "(12 runs, 2 sources)" in note


def test_width_scale_narrows_the_residual_part_of_the_band():
    """The widest-of rule over-covers (89% of the nested LOSO runs for an 80% band), so the file's
    width_scale, fitted by benchmarks/bands.py, multiplies the residual offsets; floors still apply."""
    data = B.load_bands()
    comps = ["all", "framework:megatron-deepspeed", "gpu:A100"]
    lo1, hi1, _, _ = B.residual_offsets(comps, {**data, "step_time": {**data["step_time"], "width_scale": 1.0}})
    lo5, hi5, _, _ = B.residual_offsets(comps, {**data, "step_time": {**data["step_time"], "width_scale": 0.5}})
    assert (lo5, hi5) == pytest.approx((0.5 * lo1, 0.5 * hi1))
    assert 0.3 < float(data["step_time"]["width_scale"]) < 1.5


def test_width_scale_widens_to_the_level_but_never_narrows_below_the_widest_of_rule():
    """benchmarks/bands.py fits width_scale on the nested LOSO coverage but floors it at 1: the LOSO runs
    understate a new layout's error (fitted alone it was 0.656 on 2026-12-06, on residuals narrowed by
    the measured host time, and the held-out runs were then inside for 34 of 50, the test below's
    threshold failing)."""
    import sys
    sys.path.insert(0, str(ROOT / "benchmarks"))
    pytest.importorskip("scipy")
    import bands as bench
    assert bench.WIDTH_SCALE_FLOOR == 1.0
    assert float(B.load_bands()["step_time"]["width_scale"]) >= bench.WIDTH_SCALE_FLOOR
    # one source, residual offsets +-0.2, runs 10% off: the raw band over-covers, so the floor holds
    wide = [("a", 1.0, 1.0 / 1.1, -0.2, 0.2, 0.0, 0.0)] * 5
    assert bench.fit_width_scale(wide) == 1.0
    assert bench.fit_width_scale(wide, floor=0.05) < 0.6
    # runs 30% off: it widens past 1 until 80% are inside
    narrow = [("a", 1.0, 1.0 / 1.3, -0.2, 0.2, 0.0, 0.0)] * 5
    assert 1.2 < bench.fit_width_scale(narrow) < 1.4


def test_the_host_time_per_kernel_varies_over_the_machines_spread_in_the_band():
    """The host time per kernel is the host CPU's: the band varies it over its measured prior x e^(+-sigma)
    (benchmarks/fit.py varies_by_machine), not only over the LOSO refits' 35.9-38.4 us."""
    import sys
    sys.path.insert(0, str(ROOT / "benchmarks"))
    pytest.importorskip("scipy")
    import fit as fitmod
    (p,) = [p for p in fitmod.PARAMETERS if p.field == "host_overhead_s"]
    assert p.varies_by_machine and not any(q.varies_by_machine for q in fitmod.PARAMETERS if q is not p)
    (thin,) = [t for t in B.load_bands()["step_time"]["thin_constants"] if t["field"] == "host_overhead_s"]
    assert thin["low"] == pytest.approx(p.prior * math.exp(-p.sigma), rel=1e-3)
    assert thin["high"] == pytest.approx(p.prior * math.exp(p.sigma), rel=1e-3)


def test_band_coverage_on_the_held_out_runs_is_the_stated_rate():
    """The 52 published runs no fit sees (benchmarks/data/heldout_runs.yaml), estimated with the
    catalog: the 80% band holds for 80% of them within two standard errors of a 52-run share
    (sqrt(0.8 x 0.2 / 52) = 5.5 points), on either side: a band that holds for all of them says more
    than it knows. Measured: 39 of 52 (README, "Error bands")."""
    import sys
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from heldout import load_heldout
    from costmodels.estimate import estimate
    from planner.validation import cases
    records = load_heldout()
    held = 0
    for rec, case in zip(records, cases(records)):
        est = estimate(case.model, case.cluster, case.framework, case.layout)
        band = B.step_time_band(case.model, case.cluster, case.framework, case.layout, est)
        held += band.low <= rec.measured_step_s <= band.high
    assert len(records) >= 50
    assert abs(held / len(records) - B.LEVEL) <= 2 * math.sqrt(B.LEVEL * (1 - B.LEVEL) / len(records))


def test_an_oom_risk_is_not_ranked_first_when_a_safe_layout_ties_with_it():
    # Issue 9: "a layout whose upper memory band exceeds the GPU is flagged as an OOM risk, not ranked
    # as safe". Llama 3.1 70B on 64 H100 at 8K tokens: the fastest point estimate (ZeRO-3, micro-batch 4,
    # checkpoints offloaded, 75 GiB) fits only by its point estimate; a layout without OOM risk ties
    # with it within model error, so that one is the plan and the fast one is shown second.
    res = planner.plan("llama3.1-70b", "H100-SXM", gpus=64, global_batch=512, seq_lens=[8192], top_k=3)
    data = res.error_bands
    assert data["estimate"]["oom_risk"] is False
    second = data["runner_ups"][0]
    assert second["estimate"]["oom_risk"] is True and second["tie"] is True
    fast = res.runner_ups[0].estimate
    assert fast.step_time_s / fast.tokens_per_step < res.best.estimate.step_time_s / res.best.estimate.tokens_per_step
    assert res.why[0].startswith("picked for memory safety: the runner-up #2 takes")
    # with --top 1 there is no #2: the text names the layout it passed over
    one = planner.plan("llama3.1-70b", "H100-SXM", gpus=64, global_batch=512, seq_lens=[8192], top_k=1)
    assert one.why[0].startswith("picked for memory safety: the layout tp 1  pp 1  dp 64") and "#2" not in one.why[0]
    # the memory objective ranks by headroom already: no reordering there
    mem = planner.plan("llama3.1-70b", "H100-SXM", gpus=64, global_batch=512, seq_lens=[8192], top_k=2,
                       objective="memory")
    assert not any(w.startswith("picked for memory safety") for w in mem.why)


def test_without_a_safe_tie_the_fastest_stays_first(monkeypatch):
    from types import SimpleNamespace

    import numpy as np

    from costmodels.units import fmt_bytes
    from planner.ties import safe_first

    def plan(step):            # what safe_first reads of a Plan
        return SimpleNamespace(layout=None, estimate=SimpleNamespace(step_time_s=step, tokens_per_step=1.0))

    monkeypatch.setattr(B, "step_time_band", lambda model, cluster, fw, layout, e:
                        B.Band(e.step_time_s, 0.95 * e.step_time_s, 1.05 * e.step_time_s))
    idx, risky = np.array([0, 1]), {"peak_memory_bytes": np.array([79e9, 50e9])}
    plans = {0: plan(1.0), 1: plan(2.0)}                 # bands 0.95-1.05 and 1.9-2.1: no tie
    out, displaced, why = safe_first(idx, risky, 80e9, plans.__getitem__, None, None, None)
    assert list(out) == [0, 1] and displaced is None and why == ""
    plans = {0: plan(1.0), 1: plan(1.05)}                # overlapping bands: the safe one goes first
    out, displaced, why = safe_first(idx, risky, 80e9, plans.__getitem__, None, None, None)
    assert list(out) == [1, 0] and displaced == 0 and "OOM risk" in why
    assert fmt_bytes(79e9 * B.memory_high_factor()) in why and "4.8% less time per token" in why   # 1 - 1/1.05
    safe = {"peak_memory_bytes": np.array([60e9, 50e9])}  # the first has no OOM risk: nothing to do
    out, displaced, _ = safe_first(idx, safe, 80e9, plans.__getitem__, None, None, None)
    assert list(out) == [0, 1] and displaced is None


def test_pareto_entries_carry_the_oom_flag():
    """Fuzzing review: a Pareto front listed layouts whose upper memory band exceeds the GPU with no
    flag, in JSON and in the text."""
    res = planner.plan("llama3.1-70b", "H100-SXM", gpus=64, global_batch=512, seq_lens=[8192], top_k=2,
                       objective="time,memory")
    from planner.serialise import plan_to_dict
    data = plan_to_dict(res)
    risky = [p for p in data["pareto"] if p["estimate"]["oom_risk"]]
    assert risky and all(p["estimate"]["peak_memory_band_bytes"][1] > p["estimate"]["hbm_bytes"] for p in risky)
    from planner.output import plan_text
    assert "OOM risk" in plan_text(res).split("Pareto front")[1]


def test_a_slower_safe_layout_with_a_wider_band_can_be_the_tie(monkeypatch):
    """Review: only the fastest layout without OOM risk was tried; bands differ in width, so a slower
    one may tie where it does not."""
    from types import SimpleNamespace

    import numpy as np

    from planner.ties import safe_first

    def plan(step, width):
        return SimpleNamespace(layout=None, estimate=SimpleNamespace(step_time_s=step, tokens_per_step=1.0,
                                                                      width=width))

    monkeypatch.setattr(B, "step_time_band", lambda model, cluster, fw, layout, e:
                        B.Band(e.step_time_s, e.step_time_s * (1 - e.width), e.step_time_s * (1 + e.width)))
    plans = {0: plan(1.0, 0.05), 1: plan(1.2, 0.05), 2: plan(1.3, 0.3)}   # #1 safe, no tie; #2 safe, ties
    est = {"peak_memory_bytes": np.array([79e9, 50e9, 50e9])}
    out, displaced, _ = safe_first(np.array([0, 1, 2]), est, 80e9, plans.__getitem__, None, None, None)
    assert list(out) == [2, 0, 1] and displaced == 0


def test_choices_for_a_knob_the_search_does_not_vary_are_refused():
    """Review: plan(choices={"cpu_offload_layers": [10]}) was accepted and ignored."""
    with pytest.raises(SpecError, match="knob 'cpu_offload_layers' is not searched"):
        planner.plan("gpt-1.7b", "H100-SXM", gpus=8, global_batch=32, choices={"cpu_offload_layers": [10]})
    with pytest.raises(SpecError, match="unknown knob 'nonsense'"):
        planner.plan("gpt-1.7b", "H100-SXM", gpus=8, global_batch=32, choices={"nonsense": [1]})


# A small model at micro batch 1 on 8 A100: its step is mostly the host issuing kernels.
HOST_BOUND = {"model": {"name": "tiny", "num_layers": 12, "hidden_size": 512, "num_attention_heads": 8,
                        "vocab_size": 32000, "seq_length": 512},
              "cluster": {"gpu": "A100-80GB", "num_gpus": 8},
              "parallel": {"tp": 1, "pp": 1, "dp": 8, "micro_batch": 1, "global_batch": 64}}


def test_host_bound_constants_are_thin_and_widen_a_small_models_band():
    """Since fit.provenance counts the runs a constant moves, the host time per kernel (set by vTrain
    alone, with six ZeRO-3 runs) is a thin constant: a host-bound layout's band opens towards the
    faster hosts the leave-one-source-out refits found; a GPU-bound layout's does not move."""
    from costmodels import bands as B
    from planner.api import estimate

    thin = {p["field"] for p in B.load_bands()["step_time"]["thin_constants"]}
    assert {"host_overhead_s", "microbatch_overhead_s"} <= thin
    small = estimate(HOST_BOUND)
    names = small.bands["error_band"]["thin_constants"]
    assert any(n.startswith("host_overhead_s") for n in names), names
    big = estimate({"model": "llama3.1-70b", "cluster": {"gpu": "H100-SXM", "num_gpus": 64},
                    "parallel": {"tp": 8, "pp": 4, "dp": 2, "micro_batch": 1, "global_batch": 512}})
    assert not any(n.startswith("host_overhead_s") for n in big.bands["error_band"]["thin_constants"])


def test_a_calibrated_constant_is_not_varied_back_to_the_catalogs_range():
    """A host time per kernel measured on the user's cluster (planner calibrate) is that cluster's;
    varying it over the catalog's LOSO range would undo the calibration in the band."""
    from dataclasses import replace

    from costmodels import bands as B
    from costmodels.estimate import estimate as raw_estimate
    from planner.api import estimate

    case = estimate(HOST_BOUND).case
    fw = replace(case.framework, host_overhead_s=80e-6)
    varied = {p["field"] for p, _, _ in B.vary_thin_constants(case.model, case.cluster, fw, case.layout)}
    assert "host_overhead_s" not in varied
    catalog = {p["field"] for p, _, _ in B.vary_thin_constants(case.model, case.cluster, case.framework, case.layout)}
    assert "host_overhead_s" in catalog
    est = raw_estimate(case.model, case.cluster, fw, case.layout)
    assert not any(n.startswith("host_overhead_s") for n in B.step_time_band(case.model, case.cluster, fw,
                                                                            case.layout, est).thin)


def test_every_plot_with_an_estimate_shows_its_80_percent_band(monkeypatch):
    """Issue 9: 'as error bars in the plots'. A review of 2026-12-07 found them on layouts.png only; the
    memory bar and the chosen point of the trade-off plot now carry them too."""
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib.axes import Axes

    from planner.report import render_figures
    from planner.serialise import plan_to_dict

    calls = []
    real = Axes.errorbar

    def spy(self, *a, **k):
        calls.append(k)
        return real(self, *a, **k)

    monkeypatch.setattr(Axes, "errorbar", spy)
    res = planner.plan("gpt-1.7b", "H100-SXM", gpus=8, global_batch=64, top_k=3)
    figs = render_figures(plan_to_dict(res))
    assert {"memory.png", "layouts.png", "tradeoff.png"} <= set(figs)
    kinds = sorted((("xerr" in k) + 2 * ("yerr" in k)) for k in calls)
    assert kinds == [1, 2, 3]     # memory (GiB, x), layouts (tokens/s, y), trade-off (both), in any order
