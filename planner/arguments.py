"""Checks of Python API arguments shared by planner/api.py and planner/result.py (no other imports, so
that neither depends on the other for them)."""
from __future__ import annotations

import os
import re

from costmodels.errors import SpecError


def shown(value) -> str:
    """A bad argument as a message shows it: its repr (cut to 60 characters) and its type."""
    text = repr(value)
    return f"{text[:57] + '...' if len(text) > 60 else text} ({type(value).__name__})"


def _bytes_hint(value) -> str:
    return "; decode a bytes path first (os.fsdecode)" if isinstance(value, bytes) else ""


def path_text(value, what: str, takes: str) -> str:
    """A path given as str or os.PathLike -> its text; anything else (bytes, a number) is refused."""
    if isinstance(value, (str, os.PathLike)):
        text = os.fspath(value)
        if isinstance(text, str):
            return text
    raise SpecError(f"{what}: expected {takes}, got {shown(value)}{_bytes_hint(value)}")


# Token counts for --global-batch-tokens: K / M / G are binary (2^10, 2^20, 2^30), as in the
# default range 1M-4M = 2^20-2^22 tokens; Ki / Mi / Gi mean the same; a plain number (4194304, 4e6)
# is taken as written.
TOKEN_SUFFIXES = {"": 1, "K": 2**10, "KI": 2**10, "M": 2**20, "MI": 2**20, "G": 2**30, "GI": 2**30}
_TOKEN_RE = re.compile(r"^\s*((?:[0-9]+(?:\.[0-9]+)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")


def parse_tokens(text: str, option: str = "--global-batch-tokens") -> float:
    """'4M' -> 4 * 2^20, '512Ki' -> 512 * 2^10, '4e6' -> 4,000,000 (see TOKEN_SUFFIXES)."""
    m = _TOKEN_RE.match(str(text))
    suffix = m.group(2).upper() if m else None
    if not m or suffix not in TOKEN_SUFFIXES:
        raise SpecError(f"{option} takes token counts such as 4M (= 4 x 2^20), 512K or 4194304, got {text!r}")
    value = float(m.group(1)) * TOKEN_SUFFIXES[suffix]
    if not value > 0 or value == float("inf"):
        raise SpecError(f"{option} takes positive token counts, got {text!r}")
    return value


def batch_token_range(text):
    """LOW-HIGH, or one value (a target: LOW = HIGH), in tokens per step."""
    parts = str(text).replace("..", "-").split("-")
    if len(parts) == 1:
        parts = parts * 2
    if len(parts) != 2:
        raise SpecError(f"--global-batch-tokens takes LOW-HIGH or one target (e.g. 1M-4M or 16M tokens), "
                        f"got {text!r}")
    try:
        return parse_tokens(parts[0]), parse_tokens(parts[1])
    except SpecError:       # name what was given, not the piece the range split it into
        raise SpecError(f"--global-batch-tokens takes LOW-HIGH or one positive target (e.g. 1M-4M or 16M "
                        f"tokens), got {text!r}") from None


def cli_token_budget(value):
    """`--tokens`: left out (None) means no budget; given, it must be a positive count (an explicit
    `--tokens 0` is a mistake to report, not 'no budget')."""
    if value is not None and value == 0:
        raise SpecError("--tokens must be a positive number of training tokens (e.g. 300e9), got 0; leave it "
                        "out for no budget")
    return value            # other values are checked as total_tokens (planner/api.py token_budget)

