"""What a target's emitter is: the job files of one training framework, rendered from a plan.

A target module (megatron_ds_job.py) defines one `Emitter`; targets.py registers it under the name a
framework profile gives in its `emitter` field. The writer asks only this interface.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

# (result, launcher) -> (files name -> bytes, fields added to plan.json)
Render = Callable[[object, str], "tuple[dict[str, bytes], dict]"]
# (result, k, launcher) -> (files name -> bytes, plan.json's "probe" record)
RenderProbe = Callable[[object, int, str], "tuple[dict[str, bytes], dict]"]


@dataclass(frozen=True)
class Emitter:
    """One target: its name (as profiles name it), its title for messages and its render functions."""

    name: str
    title: str
    render: Render
    render_probe: Optional[RenderProbe] = None     # None: the target has no probe script
