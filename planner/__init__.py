"""The planner: specs, search, emitters, report, CLI and Python API.

    import planner
    result = planner.plan("llama2-7b", "H100-SXM", gpus=8)      # PlanResult
    result.best, result.warnings, result.to_dict()
    planner.write_job(result, "job-dir")                          # or result.write("job-dir")
    planner.estimate("examples/llama2-7b-h100.yaml").to_dict()
"""
from .advice import PlanWarning
from .api import EstimateResult, estimate, plan
from .calibrate import calibrate
from .version import __version__


def write_job(result, out, force: bool = False, launcher: str = "deepspeed"):
    """Write the Megatron-DeepSpeed job of a PlanResult to the directory `out` (see PlanResult.write)."""
    from costmodels.errors import SpecError

    from .result import PlanResult

    if not isinstance(result, PlanResult):
        raise SpecError(f"write_job takes the PlanResult that planner.plan(...) returns, got "
                        f"{repr(result)[:60]} ({type(result).__name__})")
    return result.write(out, force=force, launcher=launcher)


__all__ = ["estimate", "plan", "calibrate", "write_job", "EstimateResult", "PlanWarning", "__version__"]
