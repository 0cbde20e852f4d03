"""Fuzzing round 13 (2026-11-24): `rope_theta: 5e5` and `hidden_dropout: 1e-1` in a model YAML were
refused as text (PyYAML reads them so) where every quantity and framework number takes that text; a
model with a 512-wide head was planned and estimated with FlashAttention, which refuses head dims above
256; fp8 was planned for widths Transformer Engine's fp8 GEMMs refuse (not divisible by 16); and a log
of newlines only made `planner calibrate` build a list of every line (1 GB for 100 MiB). Each test
failed before."""
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import yaml

from costmodels import catalog
from costmodels.errors import SpecError
from search_spaces import cpsat
from search_spaces.constraints import STRUCTURAL, Ctx
from search_spaces.frameworks import check_columns
from search_spaces.space import KNOBS, SearchRequest, build_space

sys.path.insert(0, str(Path(__file__).parent))
from test_fuzz_round11 import one_error, run  # noqa: E402

MODEL = {"name": "wide-head", "num_layers": 4, "hidden_size": 8192, "ffn_hidden_size": 32768,
         "num_attention_heads": 16, "num_kv_heads": 16, "vocab_size": 32000, "seq_length": 2048}


def _case(tmp_path, model, **parallel):
    p = {"tp": 1, "pp": 1, "dp": 8, "micro_batch": 1, "global_batch": 64, **parallel}
    path = tmp_path / "case.yaml"
    path.write_text(yaml.safe_dump({"model": model, "cluster": {"gpu": "H100-SXM", "num_gpus": 8,
                                                                 "gpus_per_node": 8}, "parallel": p}))
    return path


def test_a_number_yaml_reads_as_text_is_read_as_that_number(tmp_path):
    text = ("name: m\nnum_layers: 4\nhidden_size: 1024\nnum_attention_heads: 16\nvocab_size: 32000\n"
            "seq_length: 2048\nrope_theta: 5e5\nhidden_dropout: 1e-1\nposition: rope\n")
    assert yaml.safe_load(text)["rope_theta"] == "5e5"        # what PyYAML hands over
    (tmp_path / "m.yaml").write_text(text)
    m = catalog.load_model(str(tmp_path / "m.yaml"))
    assert m.rope_theta == 5e5 and m.hidden_dropout == pytest.approx(0.1)
    # text that is no number is still refused, in one line
    (tmp_path / "m.yaml").write_text(text.replace("5e5", "5e5x"))
    with pytest.raises(SpecError, match="rope_theta must be a finite number"):
        catalog.load_model(str(tmp_path / "m.yaml"))


def test_flash_attention_is_not_planned_or_estimated_past_head_dim_256(tmp_path):
    # head dim 8192 / 16 = 512: FlashAttention-2 refuses it (flash_api.cpp: at most 256)
    r = run("estimate", _case(tmp_path, MODEL, flash_attention=True))
    line = one_error(r, "head dim of at most 256 (this model's: 512)")
    assert "flash_attention could be false" in line
    # left out, flash attention is off for this model, not on
    r = run("estimate", "--json", _case(tmp_path, MODEL))
    assert r.exit_code == 0, r.output
    assert '"parallel.flash_attention = false"' in r.output
    model = catalog.model_from_dict(MODEL)
    space = build_space(model, catalog.load_cluster("H100-SXM", num_gpus=8),
                        SearchRequest(num_gpus=8, global_batch=64))
    assert tuple(space.domain("flash_attention")) == (0,)
    # head dim 256 still runs it
    ok = dict(MODEL, num_attention_heads=32, num_kv_heads=32)
    assert build_space(catalog.model_from_dict(ok), catalog.load_cluster("H100-SXM", num_gpus=8),
                       SearchRequest(num_gpus=8, global_batch=64)).domain("flash_attention") == (1,)


FP8_MODEL = catalog.model_from_dict({"name": "odd", "num_layers": 4, "hidden_size": 2080, "ffn_hidden_size": 8320,
                                     "num_attention_heads": 16, "vocab_size": 32000, "seq_length": 2048})


def test_fp8_needs_widths_transformer_engine_takes(tmp_path):
    # hidden 1000: 1000 % 16 = 8, so TE's assert_dim_for_fp8_exec refuses every GEMM
    odd = dict(MODEL, hidden_size=1000, ffn_hidden_size=4000, num_attention_heads=8, num_kv_heads=8)
    r = run("estimate", _case(tmp_path, odd, precision="fp8", flash_attention=False))
    line = one_error(r, "fp8 GEMMs (Transformer Engine) need the hidden size 1000")
    assert "precision could be bf16" in line
    # 2080 = 16 x 130: tp 1 and 2 are fine (2080 / 2 = 1040 = 16 x 65), tp 4 is not (520 = 16 x 32.5)
    ctx = Ctx(FP8_MODEL, catalog.load_cluster("H100-SXM", num_gpus=8), 8)
    rule = next(r for r in STRUCTURAL if r.name == "fp8-shapes")
    cols = {"precision": np.array([3, 3, 3, 2]), "tp": np.array([1, 2, 4, 4]), "mbs": np.ones(4, int),
            "seq_len": np.full(4, 2048), "cp": np.ones(4, int)}
    assert list(rule.holds(ctx, cols)) == [True, True, False, True]
    # micro batch x sequence / cp must be a multiple of 8 tokens
    cols = {"precision": np.array([3, 3]), "tp": np.array([1, 1]), "mbs": np.array([1, 2]),
            "seq_len": np.array([2052, 2052]), "cp": np.array([1, 1])}
    assert list(rule.holds(ctx, cols)) == [False, True]


def test_the_fp8_rule_agrees_between_numpy_and_cpsat():
    cluster = catalog.load_cluster("H100-SXM", num_gpus=8)
    space = build_space(FP8_MODEL, cluster, SearchRequest(num_gpus=8, global_batch=64, seq_lens=(2048, 2052)))
    lattice = cpsat.enumerate_lattice(space, STRUCTURAL)
    ctx = Ctx(FP8_MODEL, cluster, 8)
    assert check_columns(STRUCTURAL, ctx, lattice.columns).all()
    fp8 = lattice.columns["precision"] == 3
    assert fp8.any() and not (fp8 & (lattice.columns["tp"] == 4)).any()
    assert not (fp8 & (lattice.columns["seq_len"] == 2052) & (lattice.columns["mbs"] == 1)).any()
    row = {k: int(lattice.columns[k][np.flatnonzero(fp8)[0]]) for k in KNOBS}
    for tp, dp in ((2, 4), (4, 2)):
        values = dict(row, tp=tp, dp=dp, pp=1, cp=1)
        numpy_ok = bool(check_columns(STRUCTURAL, ctx, {k: np.array([v]) for k, v in values.items()})[0])
        assert numpy_ok == (cpsat.check(space, STRUCTURAL, values) == [])


def test_a_log_of_newlines_is_not_split_into_a_list(tmp_path):
    from planner.calibrate import parse_log
    log = tmp_path / "empty.log"
    size = 16 << 20
    log.write_bytes(b"\n" * size)
    tracemalloc.start()
    try:
        with pytest.raises(SpecError, match="has no iteration lines"):
            parse_log(log)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # the text itself (16 MiB) and little more; splitting it made a list of 16 M lines (128 MiB)
    assert peak < 3 * size, peak


def test_lines_end_at_carriage_returns_too(tmp_path):
    """A progress bar rewriting its line with '\\r' (more than 64K characters before the next '\\n')
    does not hide the iteration lines that follow it, and CRLF or CR-only logs read as LF ones."""
    from mds_log import mds_log
    from planner.calibrate import parse_log
    text = mds_log(1234.5, args={"num_layers": 4, "hidden_size": 1024})
    bar = "".join(f"loading {i}%\r" for i in range(20000))
    for name, body in (("lf", text), ("crlf", text.replace("\n", "\r\n")), ("cr", text.replace("\n", "\r")),
                       ("bar", bar + text)):
        path = tmp_path / f"{name}.log"
        path.write_bytes(body.encode())
        run_ = parse_log(path)
        assert (run_.step_s, len(run_.iterations), run_.args["num_layers"]) == (1.2345, 20, "4"), name
        assert run_.memory_mb["max_reserved"] == 3000.0


def test_an_empty_rope_theta_is_refused_not_defaulted(tmp_path):
    """`rope_theta:` with no value is refused as before c51c78b, which let it fall to the default."""
    (tmp_path / "m.yaml").write_text("name: m\nnum_layers: 4\nhidden_size: 1024\nnum_attention_heads: 16\n"
                                     "vocab_size: 32000\nseq_length: 2048\nrope_theta:\n")
    with pytest.raises(SpecError, match="rope_theta must be a finite number, got None"):
        catalog.load_model(str(tmp_path / "m.yaml"))
