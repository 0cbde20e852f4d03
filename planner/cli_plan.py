"""`planner plan` and `planner explain` (search, emit, report)."""
from __future__ import annotations

import click


@click.command()
def plan():
    """Search the layouts (not yet implemented)."""


@click.command()
def explain():
    """Re-render a plan's report (not yet implemented)."""
