"""The planner: specs, search, emitters, report, CLI and Python API."""
from .api import EstimateResult, estimate, plan

__all__ = ["estimate", "plan", "EstimateResult"]
