"""Enum codes are fixed values, not declaration indexes, and the cost model compares codes only by
name (issue 12, 'One house': reordering an enum must not silently change an estimate)."""
import re
from pathlib import Path

from costmodels import types

COSTMODELS = Path(types.__file__).resolve().parent


def test_codes_are_fixed():
    assert types.Precision._CODES == {"fp32": 0, "fp16": 1, "bf16": 2, "fp8": 3}
    assert types.Recompute._CODES == {"none": 0, "selective": 1, "full": 2}
    assert types.Offload._CODES == {"none": 0, "cpu": 1, "nvme": 2}
    assert types.GradComm._CODES == {"fp32": 0, "bf16": 1, "zeropp": 2, "1bit": 3}
    for enum in (types.Precision, types.Recompute, types.Offload, types.Sparsity, types.GradComm):
        for member in enum:
            assert enum.from_code(member.code) is member


def test_a_reordered_enum_keeps_its_codes():
    Reordered = types._Coded("Reordered", [("FP8", "fp8"), ("BF16", "bf16"), ("FP16", "fp16"), ("FP32", "fp32")])
    Reordered._CODES = types.Precision._CODES
    assert [Reordered(v).code for v in ("fp32", "fp16", "bf16", "fp8")] == [0, 1, 2, 3]


def test_cost_model_compares_codes_by_name():
    bare = re.compile(r"\b(precision|prec|recompute|rc|offload\w*|opt_off|grad_comm)\)?\s*(==|!=|>=|<=|>|<)\s*\d")
    literal_index = re.compile(r"\b(minimum|maximum)\((precision|prec), *\d")
    hits = [f"{p.name}:{n}" for p in sorted(COSTMODELS.glob("*.py"))
            for n, line in enumerate(p.read_text().splitlines(), 1)
            if bare.search(line) or literal_index.search(line)]
    assert hits == []


def test_zero_stage_codes_are_the_stage_numbers():
    assert types.ZeroStage._CODES == {"0": 0, "1": 1, "2": 2, "3": 3}
    assert (types.ZERO0, types.ZERO1, types.ZERO2, types.ZERO3) == (0, 1, 2, 3)
    for stage in types.ZeroStage:
        assert types.ZeroStage.parse(stage.code) is stage          # an int in case files, CLI, plan.json


def test_cost_model_compares_zero_stages_by_name():
    bare = re.compile(r"\bzero\)?\s*(==|!=|>=|<=|>|<)\s*\d")
    hits = [f"{p.name}:{n}" for p in sorted(COSTMODELS.glob("*.py"))
            for n, line in enumerate(p.read_text().splitlines(), 1) if bare.search(line)]
    assert hits == []


def test_each_zero_stage_shards_its_own_states():
    """Stage 1 shards the optimizer state, 2 the gradients too, 3 the weights too (Rajbhandari et al.
    2020, Fig. 1): fails if a comparison in the cost model used another stage's code."""
    from costmodels import catalog, memory

    fw = catalog.load_framework("megatron-deepspeed")
    fp16 = types.Precision.FP16.code
    assert "fp16" not in fw.zero0_shards_optimizer
    expected = {types.ZeroStage.NONE: (False, False, False), types.ZeroStage.OPTIMIZER: (False, False, True),
                types.ZeroStage.GRADIENTS: (False, True, True), types.ZeroStage.WEIGHTS: (True, True, True)}
    for stage, sharded in expected.items():
        whole = memory.model_state_bytes(1e9, fp16, stage.code, 1, 0, 0, fw)
        split = memory.model_state_bytes(1e9, fp16, stage.code, 8, 0, 0, fw)
        assert tuple(bool(s < w) for s, w in zip(split, whole)) == sharded, stage
