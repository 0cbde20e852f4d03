"""GPU.supports_flash is the one answer to 'can this GPU run FlashAttention': the search space, the
structural rule and the spec defaults all ask it (issue 12, One house)."""
import numpy as np
import pytest

from costmodels import catalog
from costmodels.types import GPU, Precision
from planner.specs import layout_from_dict
from search_spaces.constraints import STRUCTURAL, Ctx
from search_spaces.space import SearchRequest, build_space


def test_ampere_and_newer_support_flash_volta_does_not():
    assert catalog.load_cluster("H100-SXM").gpu.supports_flash
    assert catalog.load_cluster("A100-80GB").gpu.supports_flash
    assert not catalog.load_cluster("V100-32GB").gpu.supports_flash


@pytest.fixture
def no_flash_h100(monkeypatch):
    """An H100 whose GPU says it cannot run FlashAttention: every caller must follow it."""
    monkeypatch.setattr(GPU, "supports_flash", property(lambda self: False))
    return catalog.load_cluster("H100-SXM")


def test_the_search_space_asks_supports_flash(no_flash_h100):
    space = build_space(catalog.load_model("gpt-1.7b"), no_flash_h100, SearchRequest(num_gpus=8, global_batch=64))
    assert list(space.domain("flash_attention")) == [0]


def test_the_flash_rule_asks_supports_flash(no_flash_h100):
    rule = next(r for r in STRUCTURAL if r.name == "flash-supported")
    ctx = Ctx(catalog.load_model("gpt-1.7b"), no_flash_h100, 8)
    cols = {"flash_attention": np.array([1]), "precision": np.array([Precision.BF16.code])}
    assert not bool(np.asarray(rule.holds(ctx, cols)).reshape(-1)[0])


def test_the_spec_default_asks_supports_flash(no_flash_h100):
    used: list = []
    layout = layout_from_dict({"tp": 1, "pp": 1}, catalog.load_model("gpt-1.7b"), no_flash_h100, used)
    assert layout.flash_attention is False
    assert layout.precision is Precision.BF16          # bf16 is still supported: only flash is off
