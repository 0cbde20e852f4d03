import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VALIDATION = Path(os.environ.get("PLANNER_VALIDATION_DIR", ROOT.parent / "shared" / "validation"))


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", help="rewrite tests/golden files")


@pytest.fixture
def update_golden(request):
    return request.config.getoption("--update-golden")


@pytest.fixture(scope="session")
def validation_dir():
    if not (VALIDATION / "published_dev.yaml").exists():
        pytest.skip(f"validation data not found at {VALIDATION}")
    return VALIDATION
