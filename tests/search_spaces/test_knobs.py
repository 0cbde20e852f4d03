"""The knob table is the only source (issue 12, 'One house'): the search's knobs, the `planner plan`
options, the case-file keys and defaults, plan.json's layout keys and the "why" rows all come from
search_spaces/knobs.py, and one converter pair goes between a Layout and knob values."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from costmodels import catalog, types
from costmodels.types import Layout, Offload, Precision, Recompute, Sparsity
from search_spaces import knobs, space
from search_spaces.knobs import BOOL, ENUM, FLOAT, INT, TABLE
from search_spaces.layouts import columns_to_batch, data_parallel, layout_values, values_to_layout

ROOT = Path(__file__).resolve().parents[2]


def test_one_row_per_layout_field_in_field_order():
    assert tuple(k.name for k in TABLE) == types.LAYOUT_FIELDS


def test_kinds_agree_with_the_cost_model():
    for k in TABLE:
        if k.kind == ENUM:
            assert types._ENUM_FIELDS[k.name] is k.enum, k.name
        else:
            assert k.name not in types._ENUM_FIELDS and k.enum is None, k.name
        assert (k.kind == BOOL) == (k.name in types._BOOL_FIELDS), k.name
        assert (k.kind == FLOAT) == (k.name in types._FLOAT_FIELDS), k.name
        assert k.kind in (INT, BOOL, ENUM, FLOAT)


def test_case_defaults_parse_to_layout_defaults():
    """A case's default is the Layout default wherever neither depends on the GPUs or the model."""
    plain = Layout()
    for k in TABLE:
        if k.default is None:
            continue
        value = k.enum.parse(k.default) if k.kind == ENUM else k.default
        assert getattr(plain, k.name) == value, k.name


def test_cli_flags_are_the_dashed_names():
    for k in TABLE:
        assert k.cli_flag in (None, f"--{k.name.replace('_', '-')}")
        assert knobs.flag(k.name) == f"--{k.name.replace('_', '-')}"
        assert not k.cli_flag or k.searched


def test_the_search_uses_the_table():
    assert space.KNOBS == tuple(k.name for k in TABLE if k.searched)
    assert space.CORE_KNOBS + space.CATEGORICAL_KNOBS == space.KNOBS
    assert set(space.ENUMS) == {k.name for k in TABLE if k.searched and k.kind == ENUM}
    sp = space.build_space(catalog.load_model("llama2-7b"), catalog.load_cluster("H100", num_gpus=16),
                           space.SearchRequest(num_gpus=16, global_batch=64))
    assert tuple(sp.knobs) == space.KNOBS
    assert [sp.knobs[k.name].doc for k in knobs.SEARCHED] == [k.doc for k in knobs.SEARCHED]
    assert sp.domain("zero") == tuple(z.code for z in types.ZeroStage)


def test_cli_options_come_from_the_table():
    from planner.cli_plan import plan

    pins = [p for p in plan.params if (p.help or "").startswith("Pin or restrict")]
    assert [p.opts[0] for p in pins] == [k.cli_flag for k in knobs.CLI_KNOBS]
    assert [p.help for p in pins] == [f"Pin or restrict: {k.help}." for k in knobs.CLI_KNOBS]


def test_case_keys_and_output_keys_come_from_the_table():
    from planner import specs
    from planner.serialise import layout_dict

    assert specs.PARALLEL_KEYS == knobs.CASE_KEYS == {key for k in TABLE for key in k.case_keys}
    assert list(layout_dict(Layout())) == [k.case_key for k in TABLE]
    model = catalog.load_model("llama2-7b")
    for k in TABLE:       # every key a case may use for a field reaches that field
        if k.kind == INT and k.name != "dp":
            for key in k.case_keys:
                value = 2 if k.name in ("zero", "mbs", "gbs", "seq_len", "recompute_layers") else 1
                assert getattr(specs.layout_from_dict({key: value, "dp": 1}, model, None), k.name) == value


def test_explain_rows_come_from_the_table():
    from planner import explain

    assert [k.name for k in explain.EXPLAINED] == ["tp", "pp", "cp", "vpp", "mbs", "zero", "recompute",
                                                   "sequence_parallel", "precision", "grad_comm",
                                                   "offload_optimizer", "flash_attention", "tp_comm_overlap",
                                                   "offload_activations"]
    assert explain.EXPLAINED is knobs.EXPLAINED


NEW_KNOB = """
import json, sys, types, importlib.util
spec = importlib.util.find_spec("search_spaces.knobs")
src = open(spec.origin).read().replace("\\nBY_NAME = ", "\\nTABLE = TABLE + (Knob('new_knob', INT, '--new-knob', "
      "'new_key', ('nk',), default=2, help='a new knob', explain=99),)\\nBY_NAME = ", 1)
mod = types.ModuleType("search_spaces.knobs")
mod.__file__ = spec.origin
sys.modules["search_spaces.knobs"] = mod
exec(compile(src, spec.origin, "exec"), mod.__dict__)
from planner import cli_plan, explain, serialise, specs
from search_spaces import space
print(json.dumps({"flags": [p.opts[0] for p in cli_plan.plan.params], "case": sorted(specs.PARALLEL_KEYS),
                  "defaults": specs.CASE_DEFAULTS, "output": serialise.OUTPUT_KEYS,
                  "explain": [k.name for k in explain.EXPLAINED], "knobs": list(space.KNOBS)}))
"""


def test_a_new_knob_in_the_table_appears_everywhere():
    """Add one row to the table (in a fresh interpreter): it is an option of `planner plan`, a case-file
    key with its alias and default, an output key, a row of the explanation and a search knob."""
    out = subprocess.run([sys.executable, "-c", NEW_KNOB], capture_output=True, text=True, cwd=ROOT,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, check=True)
    seen = json.loads(out.stdout)
    assert "--new-knob" in seen["flags"]
    assert {"new_key", "nk"} <= set(seen["case"])
    assert seen["defaults"]["new_key"] == 2
    assert seen["output"]["new_knob"] == "new_key"
    assert seen["explain"][-1] == "new_knob"
    assert "new_knob" in seen["knobs"]


# ---- the converters ----------------------------------------------------------------------------

LAYOUTS = [
    Layout(),
    Layout(tp=4, pp=2, dp=2, cp=2, vpp=3, mbs=2, gbs=64, seq_len=4096, zero=3, offload_optimizer=Offload.CPU,
           offload_params=Offload.NVME, recompute=Recompute.FULL, recompute_layers=2, sequence_parallel=True,
           flash_attention=False, precision=Precision.FP8, sparsity=Sparsity.TWO_FOUR, density=0.5),
]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_values_round_trip(layout):
    values = layout_values(layout)
    assert list(values) == list(space.KNOBS) and all(type(v) is int for v in values.values())
    assert values_to_layout(values) == layout
    cols = {k: np.array([v, v]) for k, v in values.items()}
    assert columns_to_batch(cols).layout(1) == layout


def test_data_parallel():
    assert data_parallel(64, 2, 4, 2) == 4
    assert data_parallel(64, 3, 1, 1) == 0       # not whole
    assert data_parallel(8, 8, 1, 1) == 1
