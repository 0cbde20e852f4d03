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
