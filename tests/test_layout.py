"""The package layout: every module imports, the import graph of kgtuner's modules has no cycle, tests use
only public names of the package, the coordinator (with its fault and resume paths) holds no strategy-specific
branch, and every strategy of the registry has its config file."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest

import kgtuner
from kgtuner.paths import CONF_DIR

PACKAGE = Path(kgtuner.__file__).resolve().parent
TESTS = Path(__file__).resolve().parent


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(path: Path, name: str, known: set[str]) -> set[str]:
    """kgtuner modules ``path`` imports, anywhere in the file (function-level imports included)."""
    tree = ast.parse(path.read_text())
    is_package = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = name.split(".") if is_package else name.split(".")[:-1]
                parent = parent[:len(parent) - (node.level - 1)]
                base = ".".join(parent + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:  # `import kgtuner.x.y` of a name inside a module
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _imports(path, name, known) for name, path in modules.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (a list of modules, first == last), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_every_module_imports():
    for info in pkgutil.walk_packages(kgtuner.__path__, prefix="kgtuner."):
        if info.name.rsplit(".", 1)[-1] == "__main__":
            continue
        try:
            importlib.import_module(info.name)
        except ImportError as exc:  # an optional dependency (e.g. optuna for TPE) is missing
            if not getattr(exc, "name", None) or str(exc.name).startswith("kgtuner"):
                raise


def test_the_import_graph_has_no_cycle():
    graph = _graph()
    assert "kgtuner.tune.strategies.base" in graph["kgtuner.tune.strategies.kgtuner"]  # the graph sees imports
    cycle = _cycle(graph)
    assert cycle is None, " -> ".join(cycle)


def test_the_cycle_finder_finds_one():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_cluster_and_strategies_do_not_reach_back():
    """kgtuner.cluster knows no search; strategies never import the settings or the coordinator."""
    graph = _graph()
    for name, deps in graph.items():
        if name.startswith("kgtuner.cluster"):
            assert not {d for d in deps if d.startswith("kgtuner.tune")}, (name, deps)
        if name.startswith("kgtuner.tune.strategies"):
            assert not deps & {"kgtuner.tune.settings", "kgtuner.tune.coordinator"}, (name, deps)


def test_tests_import_no_private_name_of_the_package():
    bad = []
    for path in sorted(TESTS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("kgtuner"):
                bad += [f"{path.name}: from {node.module} import {a.name}" for a in node.names
                        if a.name.startswith("_")]
                if any(part.startswith("_") and part != "__main__" for part in node.module.split(".")):
                    bad.append(f"{path.name}: from {node.module}")
            elif isinstance(node, ast.Import):
                bad += [f"{path.name}: import {a.name}" for a in node.names
                        if a.name.startswith("kgtuner") and any(p.startswith("_") for p in a.name.split("."))]
    assert not bad, bad


#: The driver: the coordinator and its fault and resume paths (its mixins).
DRIVER = ("coordinator.py", "faults.py", "resume.py")


@pytest.mark.parametrize("module", DRIVER)
def test_the_coordinator_has_no_strategy_branch(module):
    """No condition in the driver names a strategy (or asks whether a search has two stages)."""
    from kgtuner.tune.strategies import registry

    names = set(registry())
    tree = ast.parse((PACKAGE / "tune" / module).read_text())
    found = []
    for node in ast.walk(tree):
        tests = []
        if isinstance(node, (ast.If, ast.IfExp, ast.While)):
            tests.append(node.test)
        elif isinstance(node, ast.comprehension):
            tests += node.ifs
        for test in tests:
            for sub in ast.walk(test):
                if isinstance(sub, ast.Constant) and sub.value in names:
                    found.append(sub.value)
                if isinstance(sub, ast.Attribute) and sub.attr in ("two_stage", "search_name", "grash"):
                    found.append(sub.attr)
    assert not found, found
    text = (PACKAGE / "tune" / module).read_text()
    assert "grash" not in text.lower() and "strategies." not in text


@pytest.mark.parametrize("name", ["kgtuner", "kgtuner_asha", "random", "tpe", "rf_bore", "grash"])
def test_every_search_config_has_its_strategy_and_back(name):
    from kgtuner.tune.strategies import registry

    assert set(registry()) == {p.stem for p in (CONF_DIR / "search").glob("*.yaml")}
    assert name in registry()


def test_the_drivers_answer_model_code_does_not_import_torch():
    """A launch refused for its settings or run directory ends before any training: the modules it imports on
    the way (the answer-model export, the model file names) do not import torch (kgtuner.kge's names load on
    first use); the engine's names still import it."""
    import subprocess
    import sys

    code = ("import sys, kgtuner.kge.model_files, kgtuner.tune.answer_model, kgtuner.tune.coordinator; "
            "print('torch' in sys.modules); from kgtuner.kge import Trainer, MODELS; "
            "print('torch' in sys.modules, Trainer.__name__, sorted(MODELS) == sorted(set(MODELS)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["False", "True", "Trainer", "True"], out.stdout + out.stderr
    with pytest.raises(AttributeError, match="no_such_name"):
        importlib.import_module("kgtuner.kge").no_such_name


def test_naming_a_replayed_algorithm_imports_no_searcher():
    """`kgtuner bench --help` and the replay grids' names (``kgtuner.bench.benchmark``, its STUDIES checked at
    import) load neither scikit-learn nor Ray: they answer at once; the replay itself loads them."""
    import subprocess
    import sys

    code = ("import sys, kgtuner.bench.benchmark as b; heavy = ('sklearn', 'ray', 'torch'); "
            "print(b.algorithm_label('kgtuner[on_miss=lose, top_k=5]'), [m for m in heavy if m in sys.modules]); "
            "import kgtuner.bench.replay; print('sklearn' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split("\n")[:2] == ["kgtuner[on_miss=lose,top_k=5] []", "True"], out.stdout + out.stderr


def test_no_module_outgrows_what_a_newcomer_reads():
    """Issue 40's sizes: no module of kgtuner/ over 600 lines, the coordinator at most 450 (its run() reads as the
    steps of a run), the README at most 200 (it starts small; the rest is in docs/)."""
    root = Path(kgtuner.__file__).parent
    sizes = {str(p.relative_to(root)): len(p.read_text().splitlines()) for p in root.rglob("*.py")}
    assert {name: n for name, n in sizes.items() if n > 600} == {}
    assert sizes["tune/coordinator.py"] <= 450
    readme = root.parent / "README.md"
    if readme.is_file():  # a checkout (an installed wheel has no README beside the package)
        assert len(readme.read_text().splitlines()) <= 200
