"""The emitter registry: which module writes the job files of a framework profile's target.

A framework profile (search_spaces/frameworks.py) names its target in `emitter`; a second target is one
emitter module plus one line here and one profile line there. A profile with no target ("") gets only
the target-neutral files (plan.json, report.md, figures).
"""
from __future__ import annotations

from costmodels.errors import SpecError

from . import megatron_ds_job
from .emitter import Emitter

EMITTERS: dict[str, Emitter] = {
    "megatron-deepspeed": megatron_ds_job.EMITTER,
}


def emitter_for(profile) -> Emitter | None:
    """The emitter of the profile's target; None when the profile has none; SpecError when it names a
    target no emitter is registered for."""
    name = getattr(profile, "emitter", "")
    if not name:
        return None
    if name not in EMITTERS:
        raise SpecError(f"framework {profile.name} names the target '{name}', which no emitter writes "
                        f"(known targets: {', '.join(sorted(EMITTERS))})")
    return EMITTERS[name]


def probe_unsupported(profiles) -> str:
    """Why --probe cannot be used with a profile: which --framework values can probe instead."""
    probing = [(p.name, EMITTERS[p.emitter]) for p in profiles
               if p.emitter in EMITTERS and EMITTERS[p.emitter].render_probe is not None]
    if len(probing) == 1:
        name, emitter = probing[0]
        return f"--probe writes a {emitter.title} job: it needs --framework {name}"
    return f"--probe needs a framework whose target writes a probe: --framework {' or '.join(n for n, _ in probing)}"
