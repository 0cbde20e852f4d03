"""SI units: the one place where quantities change unit.

Everything inside the code is bytes, seconds, FLOP, FLOP/s and bytes/s. Data files and users
write "80 GiB", "3.35 TB/s", "989 TFLOP/s", "400 Gb/s", "5 us"; `parse_quantity` turns those
into SI numbers once, at load time, and `fmt_*` turn SI numbers back into text for people.
"""
from __future__ import annotations

import math
import numbers
import re

from .errors import SpecError, leading_zero_hint

KiB, MiB, GiB, TiB = 2**10, 2**20, 2**30, 2**40
KB, MB, GB, TB = 1e3, 1e6, 1e9, 1e12
TFLOP, PFLOP = 1e12, 1e15
HOUR = 3600.0
DAY = 86400.0

_PREFIX = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
_BIN_PREFIX = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50}
_TIME = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9, "min": 60.0, "h": HOUR}

# ASCII digits only: Python's \d and float() also take other scripts' digits ("１ TFLOP/s" read as 1)
# (no two digit runs side by side: "[0-9]+\.?[0-9]*" backtracks quadratically on a long run of digits)
_QUANTITY = re.compile(r"^\s*([-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?)\s*([A-Za-zµ/$]*)\s*$")


# What each dimension is called in messages, with an example of how to write it.
DIMENSIONS = {
    "bytes": "a size with a unit, e.g. '80 GiB'",
    "bytes/s": "a bandwidth with a unit, e.g. '400 Gb/s' or '450 GB/s'",
    "FLOP/s": "a compute rate with a unit, e.g. '989 TFLOP/s'",
    "FLOP": "an amount of work with a unit, e.g. '3 PFLOP'",
    "s": "a time with a unit, e.g. '5 us'",
}


def _unit(unit: str) -> tuple[float, str | None]:
    """(factor into the SI base, dimension) of `unit`; dimension None for a bare number."""
    if unit == "":
        return 1.0, None
    if unit in _TIME:
        return _TIME[unit], "s"
    for suffix, per_bit, dim in (("b/s", 1 / 8, "bytes/s"), ("bps", 1 / 8, "bytes/s"), ("B/s", 1.0, "bytes/s"),
                                 ("FLOP/s", 1.0, "FLOP/s"), ("FLOPS", 1.0, "FLOP/s"), ("FLOP", 1.0, "FLOP"),
                                 ("bytes", 1.0, "bytes"), ("byte", 1.0, "bytes"), ("B", 1.0, "bytes")):
        if unit.endswith(suffix):
            prefix = unit[: -len(suffix)]
            if prefix in _BIN_PREFIX and suffix[0] in "Bb" and suffix != "bps":
                return _BIN_PREFIX[prefix] * per_bit, dim
            if prefix in _PREFIX:
                return _PREFIX[prefix] * per_bit, dim
    raise SpecError(f"unknown unit '{unit}': use B, KiB/MiB/GiB, KB/MB/GB/TB, GB/s, Gb/s, "
                    "TFLOP/s, s/ms/us")


def _unit_factor(unit: str) -> float:
    """Factor that converts one `unit` into its SI base (bytes, bytes/s, FLOP, FLOP/s, s)."""
    return _unit(unit)[0]


def parse_quantity(value, *, what: str = "value", dim: str | None = None, positive: bool = False,
                   minimum: float | None = None, maximum: float | None = None) -> float:
    """Parse "80 GiB" / "3.35 TB/s" / "989 TFLOP/s" / "400 Gb/s" / "5 us" / 12 into an SI float.

    With `dim` ("bytes", "bytes/s", "FLOP/s", "FLOP", "s") the value must carry a unit of that
    dimension (a bare 0 is accepted: zero has no unit) and be >= 0 (> 0 with `positive`). Without
    `dim` the value is a plain count (tokens, ...) and must be >= `minimum` when given. NaN and
    infinity are refused everywhere. Messages name the key, the value and what is expected.
    """
    expected = DIMENSIONS.get(dim, "a number")
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise SpecError(f"{what}: expected {expected}, got {value!r}")
    if isinstance(value, (int, float)):
        if isinstance(value, int) and abs(value) >= 10**18:
            raise SpecError(f"{what}: an integer of {value.bit_length()} bits is beyond any real quantity "
                            "(at most 10^18)")
        number, unit_dim = float(value), None
        factor = 1.0
    else:
        match = _QUANTITY.match(value)
        if not match:
            raise SpecError(f"{what}: cannot read {value!r} as a quantity; expected {expected}")
        text, unit = match.groups()
        number = float(text)
        try:
            factor, unit_dim = _unit(unit)
        except SpecError as exc:
            raise SpecError(f"{what}: {value!r}: {exc}") from None
    if not math.isfinite(number) or not math.isfinite(number * factor):
        raise SpecError(f"{what}: expected a finite number, got {value!r}")
    if dim is not None:
        if unit_dim is None and number != 0:
            raise SpecError(f"{what}: {value!r} has no unit; expected {expected}")
        if unit_dim is not None and unit_dim != dim:
            raise SpecError(f"{what}: {value!r} is not {expected.split(' with')[0]}; expected {expected}")
        if number < 0 or (positive and number == 0):
            bound = "greater than zero" if positive else "zero or more"
            raise SpecError(f"{what}: {value!r} is out of range; expected {expected}, {bound}")
    elif unit_dim is not None and minimum is not None:
        raise SpecError(f"{what}: expected a plain number, got {value!r}")
    if minimum is not None and number * factor < minimum:
        raise SpecError(f"{what}: {value!r} is out of range; expected a number of at least {minimum:g}")
    if maximum is not None and number * factor > maximum:
        unit = {"s": " s", "bytes": " B", "bytes/s": " B/s", "FLOP/s": " FLOP/s", "FLOP": " FLOP"}.get(dim, "")
        raise SpecError(f"{what}: {value!r} is out of range; expected at most {maximum:g}{unit}")
    return number * factor


_PLAIN_NUMBER = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)[eE][+-]?[0-9]+")     # ASCII digits only


def yaml_exponent_text(value):
    """A number in exponent form that PyYAML (YAML 1.1) left as text ('1e6', '5e5': no '.' or no
    exponent sign) as the float it spells; any other value unchanged."""
    if isinstance(value, str) and _PLAIN_NUMBER.fullmatch(value.strip()):
        return float(value)
    return value


def _is_real(value) -> bool:
    """A real number of any kind (int, float, numpy scalar, Fraction), never a bool (Python's or numpy's)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and type(value).__name__ != "bool_"


def parse_number(value, *, what: str, low: float | None = None, high: float | None = None,
                 low_open: bool = False, integer: bool = False) -> float:
    """A plain number (no unit) in [low, high] ((low, high] with `low_open`); finite; never a bool."""
    value = yaml_exponent_text(value)
    if _is_real(value) and not isinstance(value, (int, float)):
        value = int(value) if isinstance(value, numbers.Integral) else float(value)     # numpy scalars
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not float(value).is_integer()):
        kind = "a whole number" if integer else "a number"
        raise SpecError(f"{what}: expected {kind}{_range_text(low, high, low_open)}, got {value!r}"
                        f"{leading_zero_hint(value)}")
    x = float(value)
    if not math.isfinite(x) or (low is not None and (x < low or (low_open and x == low))) \
            or (high is not None and x > high):
        raise SpecError(f"{what}: {value!r} is out of range; expected a number{_range_text(low, high, low_open)}")
    return int(x) if integer else x


def currency_problem(currency) -> str | None:
    """Why `currency` is not a currency the planner writes beside a price, or None. A name of letters
    (USD, EUR, yen), one non-Latin letter (円, 元: a single ASCII letter such as the 'e' of '2.5e' is a
    typo), one currency sign ($, €, ¥) or a country's capitals and a sign (US$, HK$), at most 12
    characters, none of them an invisible Hangul filler. The same rule for a cluster file's
    price, --price-per-gpu-hour and a plan.json read back (an edited 'USD/h <b>' was rendered into
    report.md)."""
    import unicodedata

    if not isinstance(currency, str):
        return f"the currency must be text, got {type(currency).__name__}"
    if not currency:
        return None
    # Hangul fillers are letters (category Lo) that draw nothing: a currency nobody could read
    visible = all("FILLER" not in unicodedata.name(ch, "FILLER") for ch in currency)
    word = len(currency) >= 2 and all(ch.isalpha() for ch in currency)
    letter = len(currency) == 1 and currency.isalpha() and not currency.isascii()
    symbol = len(currency) == 1 and unicodedata.category(currency) == "Sc"
    # a country prefix and a sign: US$, HK$, NZ$, R$
    prefixed = (2 <= len(currency) <= 4 and unicodedata.category(currency[-1]) == "Sc"
                and currency[:-1].isascii() and currency[:-1].isalpha() and currency[:-1].isupper())
    if (word or letter or symbol or prefixed) and visible and len(currency) <= 12:
        return None
    return ("the currency must be a name of letters such as USD or EUR, or a currency sign such as $ or US$ "
            f"(at most 12 characters), got {ascii(currency[:20])}")


# one way to split any text (no nested repetition: linear in the text, which is at most MAX_PRICE_TEXT)
_PRICE = re.compile(r"\s*([^\d\s.+-]*)\s*((?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)\s*([^\d\s]*)\s*")
MAX_PRICE_TEXT = 64
_CURRENCY_SIGNS = {"$": "USD", "€": "EUR", "£": "GBP"}
MAX_PRICE_PER_GPU_HOUR = 1e6


def parse_price(value, what: str) -> tuple[float, str]:
    """A price per GPU-hour with an optional currency: 2.5, '2.5', '2.5 USD', 'EUR 2.1', '$2.5' ->
    (2.5, 'USD'); ($, €, £ are named; another currency is kept as written; none: ''). `what` names
    the setting in the error ('--price-per-gpu-hour', 'cluster price_per_gpu_hour')."""
    if _is_real(value):
        amount, currency = float(value), ""          # int, float, numpy scalars, Fraction
    else:
        m = _PRICE.fullmatch(value) if isinstance(value, str) and len(value) <= MAX_PRICE_TEXT else None
        if m and m.group(2).endswith("."):
            # '5.' may be a cut '5.5': not taken, and not called a currency '.' as it was
            raise SpecError(f"{what}: the amount {m.group(2)!r} ends in a '.' with no digits after "
                            f"it; write {m.group(2)[:-1]} or the amount in full (5.5)")
        if not m or (m.group(1) and m.group(3)):
            raise SpecError(f"{what} takes an amount with an optional currency (2.5, '2.5 USD'), "
                            f"got {_cut(value)}")
        amount, currency = float(m.group(2)), (m.group(1) or m.group(3))
        problem = currency_problem(currency)      # '2.5e' is no currency 'e', '2.5 USD/h' none 'USD/h'
        if problem:
            raise SpecError(f"{what}: {problem}")
    if not 0 <= amount <= MAX_PRICE_PER_GPU_HOUR:
        raise SpecError(f"{what} must be an amount from 0 to 1e6 per GPU-hour, got {_cut(value)}")
    return amount, _CURRENCY_SIGNS.get(currency, currency)


def _cut(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:40]}... ({len(str(value))} characters)"


def _range_text(low, high, low_open) -> str:
    if low is not None and high is not None:
        return f" in {'(' if low_open else '['}{low:g}, {high:g}]"
    if low is not None:
        return f" {'greater than' if low_open else 'of at least'} {low:g}"
    if high is not None:
        return f" of at most {high:g}"
    return ""


def fmt_bytes(n: float) -> str:
    """Binary units for memory, as nvidia-smi and PyTorch report it."""
    n = float(n)
    for unit, size in (("TiB", TiB), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f} B"


def fmt_seconds(t: float) -> str:
    t = float(t)
    if t >= DAY:
        return f"{t / DAY:.1f} days"
    if t >= HOUR:
        return f"{t / HOUR:.1f} h"
    if t >= 60:
        return f"{t / 60:.1f} min"
    if t >= 1:
        return f"{t:.2f} s"
    if t >= 1e-3:
        return f"{t * 1e3:.1f} ms"
    return f"{t * 1e6:.1f} us"


def fmt_rate(flop_per_s: float) -> str:
    return f"{flop_per_s / TFLOP:.1f} TFLOP/s"
