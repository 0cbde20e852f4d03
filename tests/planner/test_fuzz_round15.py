"""Fuzzing round 15 (2026-11-25): a price's currency could be an invisible letter (a Hangul filler is a
letter, category Lo, that draws nothing: the cost line ended in blank space, and the error quoted it as
'ㅤ'), and the common 'US$' / 'HK$' were refused. Each test failed before."""
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_fuzz_round11 import one_error, run  # noqa: E402
from test_fuzz_round14 import _case  # noqa: E402

from costmodels.units import currency_problem, parse_price


@pytest.mark.parametrize("price, amount, currency", [("US$2.5", 2.5, "US$"), ("2.5 HK$", 2.5, "HK$"),
                                                     ("R$ 12", 12.0, "R$")])
def test_a_country_prefixed_sign_is_a_currency(tmp_path, price, amount, currency):
    assert parse_price(price, "x") == (amount, currency)
    r = run("estimate", _case(tmp_path, price), "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["training"]["currency"] == currency


@pytest.mark.parametrize("currency", ["\u3164", "\u115f", "\u1160", "\uffa0", "\u3164\u3164", "X\u3164"])
def test_an_invisible_currency_is_refused_and_named_in_escapes(tmp_path, currency):
    assert currency_problem(currency)
    line = one_error(run("estimate", _case(tmp_path, f"2.5 {currency}")), "the currency must be")
    assert "\\u" in line                           # shown as an escape, not as blank space


@pytest.mark.parametrize("currency", ["a$", "usd$", "US$$", "USDX$"])
def test_a_prefix_that_is_not_a_country_code_is_refused(currency):
    assert currency_problem(currency)
