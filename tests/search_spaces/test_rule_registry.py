"""One place to check and describe rules (issue 12, One house): each Rule checks itself (holds / encode)
and fills in its own message (Rule.describe); frameworks.RULES holds every rule once, by name."""
from dataclasses import replace

import pytest

import planner
from costmodels import catalog
from costmodels.errors import InfeasibleError, SpecError
from search_spaces.constraints import STRUCTURAL, Ctx, Rule
from search_spaces.frameworks import PROFILES, RULES, check_layout, framework_violations

CTX = Ctx(catalog.load_model("gpt-1.7b"), catalog.load_cluster("H100-SXM", num_gpus=16), 16)


def _rule(message):
    return Rule("probe-rule", message, ("tp",), lambda ctx, c: c["tp"] > 0, lambda ctx, v, e: None)


def test_every_rule_is_registered_once_by_name():
    every = list(STRUCTURAL) + [r for p in PROFILES.values() for r in p.rules]
    assert set(RULES) == {r.name for r in every}
    assert all(RULES[r.name] is r for r in every)


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_every_rule_describes_itself_for_every_profile(profile):
    """Rule.describe fills every field a message may name, {name} included (it used to raise KeyError)."""
    for rule in PROFILES[profile].all_rules:
        text = rule.describe(CTX, profile)
        assert "{" not in text and "}" not in text, (rule.name, text)
    assert RULES["dense-weights"].describe(CTX, profile).startswith(f"{profile} has no 2:4 sparse")
    assert RULES["dense-weights"].describe(CTX).startswith("any framework has no 2:4 sparse")


def test_a_name_template_is_filled_not_a_key_error():
    assert _rule("{name} needs tp on {n} GPUs of {gpu.name}").describe(CTX, "x") == "x needs tp on 16 GPUs of " \
        + CTX.cluster.gpu.name


@pytest.mark.parametrize("message", ["{model.num_heads} heads", "{framework} says no", "{} positional",
                                     "{cluster.nvlink_domain}"])
def test_a_message_naming_an_unknown_field_is_refused_when_the_rule_is_made(message):
    with pytest.raises(ValueError, match="a message may name only c, gpu, m, n, name"):
        _rule(message)


@pytest.fixture
def marked(monkeypatch):
    """Rule.describe returns a marker, so each place that shows a broken rule must be seen to use it."""
    monkeypatch.setattr(Rule, "describe", lambda self, ctx, framework="any framework": f"<{self.name}@{framework}>")


def test_check_layout_describes_through_the_rule(marked):
    case_layout = replace(_a_layout(), vpp=2)
    with pytest.raises(SpecError, match="layout breaks a rule: <mds-no-interleaving@megatron-deepspeed>"):
        check_layout(CTX.model, CTX.cluster, case_layout, PROFILES["megatron-deepspeed"])
    broken = framework_violations(CTX.model, CTX.cluster, case_layout, PROFILES["megatron-deepspeed"])
    assert [msg for _, msg, _ in broken] == ["<mds-no-interleaving@megatron-deepspeed>"]


def test_a_rules_conflict_describes_through_the_rule(marked):
    with pytest.raises(InfeasibleError, match="<mds-no-interleaving@megatron-deepspeed>"):
        planner.plan("gpt-1.7b", "H100-SXM", gpus=16, global_batch=64, choices={"vpp": [2]})


def test_explain_describes_through_the_rule(marked):
    result = planner.plan("gpt-1.7b", "H100-SXM", gpus=16, global_batch=64, top_k=1)
    refused = [line for line in result.why if "not allowed" in line]
    assert refused and all(line.endswith("@megatron-deepspeed>)") for line in refused), refused


def _a_layout():
    result = planner.plan("gpt-1.7b", "H100-SXM", gpus=16, global_batch=64, top_k=1,
                          choices={"pp": [4], "zero": [1]})
    return result.best.layout
