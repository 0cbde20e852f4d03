import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def fit():
    """benchmarks/fit.py as a module (needs scipy, the '[fit]' extra)."""
    pytest.importorskip("scipy")
    spec = importlib.util.spec_from_file_location("fit", ROOT / "benchmarks" / "fit.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["fit"] = module          # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module
