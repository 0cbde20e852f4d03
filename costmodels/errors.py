"""One error root for everything the user can get wrong.

The CLI maps `PlannerError` to a one-line message and exit code 2; anything else is a bug.
"""
from __future__ import annotations


class PlannerError(Exception):
    """Root of every error caused by the user's input (never by a bug)."""


class SpecError(PlannerError):
    """A model, cluster, layout or case description is malformed or impossible."""


class UnknownPresetError(SpecError):
    """A preset name (GPU, model, framework) that the catalog does not have."""

    def __init__(self, kind: str, name: str, known: list[str]):
        import difflib

        close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
        if not close:
            lowered = {k.lower(): k for k in known}
            close = [lowered[k] for k in difflib.get_close_matches(name.lower(), list(lowered),
                                                                     n=3, cutoff=0.5)]
        hint = f"did you mean {', '.join(close)}?" if close else f"known: {', '.join(sorted(known))}"
        super().__init__(f"unknown {kind} '{name}': {hint} (or pass a YAML file path)")
        self.kind, self.name, self.suggestions = kind, name, close


class InfeasibleError(PlannerError):
    """No layout satisfies the rules and fits in memory; `advice` says what would."""

    def __init__(self, message: str, reasons: tuple[str, ...] = (), min_gpus: int | None = None):
        super().__init__(message)
        self.reasons = tuple(reasons)
        self.min_gpus = min_gpus


def leading_zero_hint(value) -> str:
    """What to do about an integer typed with a leading zero ('010'), which the YAML reader keeps as
    text (YAML 1.1 would read it as the octal 8): '' for anything else."""
    import re

    text = value.strip() if isinstance(value, str) else ""
    if re.fullmatch(r"[-+]?0[0-9_]+", text):
        sign = "-" if text.startswith("-") else ""
        return f"; write {sign}{text.lstrip('+-0').replace('_', '') or '0'} without the leading zero " \
               "(YAML 1.1 reads a leading zero as octal)"
    return ""
