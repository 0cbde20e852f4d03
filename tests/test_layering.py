"""Dependencies point one way: planner -> search_spaces -> costmodels; nothing imports upward, and no
package has an import circle inside it."""
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


# ---- no import circles inside a package --------------------------------------------------------
#
# The graph counts every import a module makes of a module of its own package: at module level and
# inside functions alike (a function-level import only delays a circle, it does not remove it), absolute
# (`from planner.x import y`) and relative (`from .x import y`, `from . import x`). Imports under
# `if TYPE_CHECKING:` are left out: they never run. Importing `pkg.a.b` names module `pkg.a.b`, not
# the parent packages Python initialises on the way (those never import back into a half-built child).


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_nodes(tree) -> set[int]:
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip |= {id(n) for body in node.body for n in ast.walk(body)}
    return skip


def imported_modules(path: Path, modules: set[str], root: Path = ROOT) -> set[str]:
    """Modules of `modules` that the file at `path` imports (see the note above)."""
    tree = ast.parse(path.read_text())
    skip = _type_checking_nodes(tree)
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                base = ".".join(base + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in modules:          # `import pkg.a.b.attr` -> the module pkg.a.b
                t = t.rpartition(".")[0]
            if t and t != name:
                out.add(t)
    return out


def import_graph(package: str, root: Path = ROOT) -> dict[str, set[str]]:
    """{module: the modules of the same package it imports}."""
    files = {module_name(p, root): p for p in (root / package).rglob("*.py")}
    return {name: imported_modules(path, set(files), root) for name, path in files.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of `graph` as [a, b, ..., a], or None."""
    state: dict[str, int] = {}          # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node):
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        state[node] = 2
        path.pop()
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_graph_sees_relative_function_level_and_absolute_imports(tmp_path):
    pkg = tmp_path / "p"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .b import x\n")
    (pkg / "b.py").write_text("def f():\n    from .sub import c\n")
    (pkg / "sub" / "c.py").write_text("import p.a\nfrom typing import TYPE_CHECKING\n"
                                      "if TYPE_CHECKING:\n    from ..b import f\n")
    (pkg / "d.py").write_text("from . import a\nfrom p.sub.c import thing\n")
    graph = import_graph("p", tmp_path)
    assert graph == {"p": set(), "p.sub": set(), "p.a": {"p.b"}, "p.b": {"p.sub.c"}, "p.sub.c": {"p.a"},
                     "p.d": {"p.a", "p.sub.c"}}
    assert find_cycle(graph) == ["p.a", "p.b", "p.sub.c", "p.a"]
    assert find_cycle({"p.a": {"p.b"}, "p.b": set()}) is None


def test_no_import_circles_inside_a_package():
    circles = {}
    for package in ORDER:
        cycle = find_cycle(import_graph(package))
        if cycle:
            circles[package] = " -> ".join(cycle)
    assert circles == {}
