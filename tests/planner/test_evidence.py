"""report.md says where the evidence behind a plan is thin, from the catalog's own provenance."""
import re
from pathlib import Path

from planner.evidence import TARGET_FRAMEWORK_LOSO, evidence_lines

README = Path(__file__).resolve().parents[2] / "README.md"


def _data(**layout):
    base = {"tp": 1, "pp": 1, "dp": 8, "cp": 1, "micro_batch": 1, "seq_len": 4096, "zero_stage": 1,
            "grad_comm": "fp32", "offload_optimizer": "none", "offload_params": "none", "precision": "bf16"}
    base.update(layout)
    return {"layout": base, "inputs": {"framework": "megatron-deepspeed", "cluster": {"gpu": "H100-SXM"}},
            "estimate": {"step_time_s": 10.0, "time_breakdown_s": {"overhead": 0.1}}}


def test_zero3_plan_names_its_weakest_constant_with_its_runs():
    text = " ".join(evidence_lines(_data(zero_stage=3)))
    assert re.search(r"ZeRO-3: its gathers run at a fitted [0-9.]+ of the link bandwidth, from \d+ runs from \d+ sources", text)
    assert "ZeRO-3" not in " ".join(evidence_lines(_data(zero_stage=1)))


def test_out_of_sample_error_matches_the_readme():
    readme = README.read_text()
    text = " ".join(evidence_lines(_data()))
    row_of = {"vTrain's 1,440 single-node runs": "vtrain (single node)", "vTrain's 109 multi-node runs": "vtrain-multi",
              "the 10 DeepSpeed / Azure / Megatron-DeepSpeed example runs": "deepspeed",
              "BLOOM's 62 runs on Jean Zay": "bloom"}
    table = {cells[0]: cells for cells in ([c.strip() for c in line.strip("|").split("|")]
                                           for line in readme.splitlines() if line.startswith("| "))}
    assert [name for name, _ in TARGET_FRAMEWORK_LOSO] == list(row_of)
    for name, err in TARGET_FRAMEWORK_LOSO:
        assert f"{err * 100:.0f}% on {name}" in text
        # the LOSO column of that source's row in README's accuracy table (source | runs | LOSO | in-sample)
        assert table[row_of[name]][2] == f"{err * 100:.1f}%", "README's LOSO table and planner/evidence.py disagree"


def test_host_bound_plans_say_so():
    data = _data()
    assert not any("Host-bound" in t for t in evidence_lines(data))
    data["estimate"]["time_breakdown_s"]["overhead"] = 2.0
    assert any("Host-bound: 20%" in t for t in evidence_lines(data))
