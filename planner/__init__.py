"""The planner: specs, search, emitters, report, CLI and Python API."""
