"""The layering the README promises, read from the source with ``ast`` (nothing is imported).

- ``engine`` is headless: it never imports ``app``, PySide6 or any other Qt module.
- ``app`` uses the engine's API, never its command line (``engine.cli`` and its modules).
- ``engine.cli.main`` is the command line's entry point: it imports the subcommand modules and
  nothing imports it back.
- No import cycle among ``engine.*`` and ``app.*`` modules at module level.

Every ``import`` counts, at module level or inside a function (a lazy import is still a
dependency), except for the cycle check, see ``_cycles``.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("engine", "app")
QT_MODULES = ("PySide6", "PySide2", "PyQt5", "PyQt6", "shiboken6", "shiboken2", "qtpy", "pyqtgraph",
              "pytestqt")


@dataclass(frozen=True)
class Import:
    importer: str  # dotted module name
    target: str  # dotted name of what is imported: a module (ours or not) or a package
    line: int
    lazy: bool  # inside a function: runs when it is called, not when the module loads
    type_only: bool  # under ``if TYPE_CHECKING:``: never runs


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _sources() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _resolve(importer: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module named by ``from <module> import ...`` (relative ones resolved)."""
    if not node.level:
        return node.module or ""
    base = importer.split(".") if is_package else importer.split(".")[:-1]
    if node.level > 1:
        base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(name: str, path: Path, known: set[str]) -> list[Import]:
    """Every import statement in one file, with where it runs."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    found: list[Import] = []

    def visit(node: ast.AST, lazy: bool, type_only: bool) -> None:
        if isinstance(node, ast.Import):
            found.extend(Import(name, alias.name, node.lineno, lazy, type_only) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = _resolve(name, is_package, node)
            found.append(Import(name, module, node.lineno, lazy, type_only))
            for alias in node.names:  # ``from engine import mlx_lock`` imports the module too
                if f"{module}.{alias.name}" in known:
                    found.append(Import(name, f"{module}.{alias.name}", node.lineno, lazy, type_only))
        inner_lazy = lazy or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                visit(child, inner_lazy, True)
            for child in node.orelse:
                visit(child, inner_lazy, type_only)
            return
        for child in ast.iter_child_nodes(node):
            visit(child, inner_lazy, type_only)

    visit(tree, False, False)
    return found


@pytest.fixture(scope="module")
def all_imports() -> list[Import]:
    sources = _sources()
    known = set(sources)
    return [imp for name, path in sources.items() for imp in imports_of(name, path, known)]


def _top(dotted: str) -> str:
    return dotted.split(".")[0]


def _is_cli(dotted: str) -> bool:
    return dotted == "engine.cli" or dotted.startswith("engine.cli.")


def _where(imp: Import) -> str:
    return f"{imp.importer} (line {imp.line}{', lazy' if imp.lazy else ''}) imports {imp.target}"


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """One cycle path (first node repeated at the end) per strongly connected component
    with a cycle, found by depth-first search in a stable order."""
    cycles: list[list[str]] = []
    done: set[str] = set()
    stack: list[str] = []
    on_stack: dict[str, int] = {}  # node -> its index in stack

    def dfs(node: str) -> None:
        on_stack[node] = len(stack)
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt in on_stack:
                cycle = [*stack[on_stack[nxt]:], nxt]
                if not any(set(cycle) == set(c) for c in cycles):
                    cycles.append(cycle)
            elif nxt not in done:
                dfs(nxt)
        stack.pop()
        del on_stack[node]
        done.add(node)

    for start in sorted(edges):
        if start not in done:
            dfs(start)
    return cycles


def module_level_graph(imports: list[Import], known: set[str]) -> dict[str, set[str]]:
    """Edges between our modules that run while the importer itself is being imported.

    Lazy (function-level) imports are left out on purpose: they run when the function is
    called, after both modules have finished loading, so they cannot meet a half-made
    module the way a module-level cycle does (``ImportError: cannot import name ...``
    depending on which module happens to be imported first). The project uses them
    deliberately to keep optional, heavy packages (torch, mlx, Qt) off the import path
    and to dispatch to a subcommand. Their direction is still checked by the layering
    tests above, which count every import. ``TYPE_CHECKING`` imports never run.
    """
    edges: dict[str, set[str]] = {name: set() for name in known}
    for imp in imports:
        if not imp.lazy and not imp.type_only and imp.target in known and imp.target != imp.importer:
            edges[imp.importer].add(imp.target)
    return edges


def test_the_parser_sees_imports_at_every_level(all_imports):
    # Known facts of this tree: if the parser lost a kind of import, these would go.
    edges = {(i.importer, i.target, i.lazy) for i in all_imports}
    assert ("engine.cli.converse", "engine.recording", False) in edges
    assert ("app.selftest", "engine.recording", True) in edges  # inside _run()
    assert ("engine.cli.main", "engine.cli.converse", True) in edges  # dispatch in main()
    assert any(i.importer.startswith("app.") and _top(i.target) == "PySide6" for i in all_imports)


def test_relative_imports_are_resolved():
    pkg = ROOT / "engine" / "stages"
    node = ast.parse("from ..audio import base\nfrom . import llm_stage\nfrom .x import y\n").body
    assert _resolve("engine.stages.tts_stage", False, node[0]) == "engine.audio"
    assert _resolve("engine.stages", True, node[1]) == "engine.stages"
    assert _resolve("engine.stages.tts_stage", False, node[2]) == "engine.stages.x"
    assert module_name(pkg / "__init__.py") == "engine.stages"
    assert module_name(pkg / "tts_stage.py") == "engine.stages.tts_stage"


def test_cycle_finder_reports_the_path():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert _cycles({"a": {"a"}}) == [["a", "a"]]


def test_engine_never_imports_the_app_or_qt(all_imports):
    bad = [_where(i) for i in all_imports
           if _top(i.importer) == "engine" and (_top(i.target) == "app" or _top(i.target) in QT_MODULES)]
    assert bad == [], "engine must stay headless:\n" + "\n".join(bad)


def test_app_never_imports_the_command_line(all_imports):
    bad = [_where(i) for i in all_imports if _top(i.importer) == "app" and _is_cli(i.target)]
    assert bad == [], "app must use the engine's API, not its CLI:\n" + "\n".join(bad)


def test_only_the_command_line_imports_it_and_nothing_imports_its_entry_point(all_imports):
    outside = [_where(i) for i in all_imports if _is_cli(i.target) and not _is_cli(i.importer)]
    assert outside == [], "only engine.cli* may import engine.cli*:\n" + "\n".join(outside)
    back = [_where(i) for i in all_imports
            if i.target == "engine.cli.main" and i.importer not in ("engine.cli.main", "engine.cli.__main__")]
    assert back == [], ("engine.cli.main imports its subcommands, never the other way round:\n"
                        + "\n".join(back))


def test_no_module_level_import_cycles(all_imports):
    known = set(_sources())
    cycles = _cycles(module_level_graph(all_imports, known))
    assert cycles == [], "module-level import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


@pytest.mark.parametrize("module", ["engine/recording.py", "engine/runtime/stats.py"])
def test_shared_routines_never_print(module):
    # The CLI and the self-test share engine.recording; each decides what to show, and where.
    tree = ast.parse((ROOT / module).read_text(encoding="utf-8"))
    prints = [n.lineno for n in ast.walk(tree)
              if (isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "print")
              or (isinstance(n, ast.Attribute) and n.attr in ("stdout", "stderr"))]
    assert prints == [], f"{module} writes to the terminal at lines {prints}"
