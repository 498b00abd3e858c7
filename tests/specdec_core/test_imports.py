"""Imports run one way: geometry and costs at the bottom, then the cache, the drafters, the factory; the engine
knows nothing of Gradio, training or the bench. Read from the source (every import, function-local ones too)."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "specdec_core"
BOTTOM = {"specdec_core.tree": {"specdec_core.costs"}, "specdec_core.costs": {"specdec_core.limits"}}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path) -> set[str]:
    """Every module a file imports (absolute names; `from . import x` counts as the module x)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names}
    return found


def graph() -> dict[str, set[str]]:
    modules = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    return {name: {m for m in imported(path) if m in modules and m != name} for name, path in modules.items()}


def cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (a list of modules ending where it starts), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(edges):
        if start not in state and (found := visit(start)):
            return found
    return None


def without_packages(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    """The graph among modules: a package's __init__ only re-exports, and importing a submodule runs it first."""
    packages = {"specdec_core", "specdec_core.drafters"}
    return {name: targets - packages for name, targets in edges.items() if name not in packages}


def test_the_cycle_finder_finds_a_cycle():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_circle_among_the_engines_modules():
    assert cycle(without_packages(graph())) is None


def test_geometry_and_costs_sit_at_the_bottom():
    edges = graph()
    for module, allowed in BOTTOM.items():
        assert edges[module] <= allowed, module


def test_the_engine_imports_nothing_of_the_app_training_or_the_bench():
    outside = ("gradio", "app", "training", "bench")
    for path in PACKAGE.rglob("*.py"):
        assert not [m for m in imported(path) if m.split(".")[0] in outside], path


def test_the_drafters_package_only_re_exports():
    tree = ast.parse((PACKAGE / "drafters" / "__init__.py").read_text())
    assert all(isinstance(node, (ast.ImportFrom, ast.Assign, ast.Expr)) for node in tree.body)


@pytest.mark.parametrize("order", ["sorted", "reversed"])
def test_modules_import_in_any_order(order):
    """Each module imported first, in either order, with the package's __init__ kept from running: no module
    depends on another having been imported before it."""
    names = sorted(m for m in graph() if m not in ("specdec_core", "specdec_core.drafters"))
    names = names if order == "sorted" else names[::-1]
    script = f"""
import importlib, sys, types
for package, folder in (("specdec_core", {str(PACKAGE)!r}), ("specdec_core.drafters", {str(PACKAGE / "drafters")!r})):
    module = types.ModuleType(package)
    module.__path__ = [folder]
    sys.modules[package] = module
for name in {names!r}:
    importlib.import_module(name)
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


def test_no_engine_file_holds_more_than_one_concepts_worth():
    """350 lines at most: past that a file mixes concerns (split by concept, as costs/tree/tuning/measurements)."""
    long = {str(p.relative_to(ROOT)): n for p in PACKAGE.rglob("*.py") if (n := len(p.read_text().splitlines())) > 350}
    assert long == {}
