"""Dependencies point one way: planner -> search_spaces -> costmodels; nothing imports upward."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ORDER = {"costmodels": 0, "search_spaces": 1, "planner": 2}


def imported_packages(path: Path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module.split(".")[0]


def test_no_upward_imports():
    bad = []
    for package, level in ORDER.items():
        for path in (ROOT / package).rglob("*.py"):
            for name in imported_packages(path):
                if name in ORDER and ORDER[name] > level:
                    bad.append(f"{path.relative_to(ROOT)} imports {name}")
    assert bad == []


def test_heavy_dependencies_stay_at_the_edges():
    for path in (ROOT / "costmodels").rglob("*.py"):
        names = set(imported_packages(path))
        assert not names & {"ortools", "optuna", "click", "deepspeed", "matplotlib"}, path
