"""The planner's version: the installed distribution's, or 0+unknown in a source tree never installed."""
from importlib.metadata import PackageNotFoundError, version as _version

try:
    __version__ = _version("llm-train-planner")
except PackageNotFoundError:      # running from a source tree that was never installed
    __version__ = "0+unknown"
