"""SI units: the one place where quantities change unit.

Everything inside the code is bytes, seconds, FLOP, FLOP/s and bytes/s. Data files and users
write "80 GiB", "3.35 TB/s", "989 TFLOP/s", "400 Gb/s", "5 us"; `parse_quantity` turns those
into SI numbers once, at load time, and `fmt_*` turn SI numbers back into text for people.
"""
from __future__ import annotations

import re

from .errors import SpecError

KiB, MiB, GiB, TiB = 2**10, 2**20, 2**30, 2**40
KB, MB, GB, TB = 1e3, 1e6, 1e9, 1e12
TFLOP, PFLOP = 1e12, 1e15
HOUR = 3600.0
DAY = 86400.0

_PREFIX = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
_BIN_PREFIX = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50}
_TIME = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9, "min": 60.0, "h": HOUR}

_QUANTITY = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-zµ/$]*)\s*$")


def _unit_factor(unit: str) -> float:
    """Factor that converts one `unit` into its SI base (bytes, bytes/s, FLOP, FLOP/s, s)."""
    if unit in ("", "B", "byte", "bytes", "FLOP", "FLOPS", "FLOP/s", "B/s"):
        return 1.0
    if unit in _TIME:
        return _TIME[unit]
    for suffix, per_bit in (("b/s", 1 / 8), ("bps", 1 / 8), ("B/s", 1.0), ("B", 1.0),
                            ("FLOP/s", 1.0), ("FLOPS", 1.0), ("FLOP", 1.0)):
        if unit.endswith(suffix):
            prefix = unit[: -len(suffix)]
            if prefix in _BIN_PREFIX and suffix.startswith("B"):
                return _BIN_PREFIX[prefix] * per_bit
            if prefix in _PREFIX:
                return _PREFIX[prefix] * per_bit
    raise SpecError(f"unknown unit '{unit}': use B, KiB/MiB/GiB, KB/MB/GB/TB, GB/s, Gb/s, "
                    "TFLOP/s, s/ms/us")


def parse_quantity(value, *, what: str = "value") -> float:
    """Parse "80 GiB" / "3.35 TB/s" / "989 TFLOP/s" / "400 Gb/s" / "5 us" / 12 into an SI float."""
    if isinstance(value, bool):
        raise SpecError(f"{what}: expected a number with a unit, got {value!r}")
    if isinstance(value, (int, float)):
        return float(value)
    if not isinstance(value, str):
        raise SpecError(f"{what}: expected a number with a unit, got {value!r}")
    match = _QUANTITY.match(value)
    if not match:
        raise SpecError(f"{what}: cannot read {value!r} as a quantity (e.g. '80 GiB', '900 GB/s')")
    number, unit = match.groups()
    return float(number) * _unit_factor(unit)


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
