"""The layering the README promises, read from the source with ``ast`` (nothing is imported).

- ``engine`` is headless: it never imports ``app``, PySide6 or any other Qt module.
- ``app`` uses the engine's API, never its command line (``engine.cli`` and its modules).
- ``engine.cli.main`` is the command line's entry point: it imports the subcommand modules and
  nothing imports it back.
- No import cycle among ``engine.*`` and ``app.*`` modules at module level.
- ``engine/`` keeps only its front-end API at its top (at most 12 modules, named in
  ``ENGINE_TOP_LEVEL``); every other engine module sits in a folder that names its layer
  (``ENGINE_LAYERS``, each one described in ``docs/ARCHITECTURE.md``).
- ``engine``'s layers form a staircase (``ENGINE_STAIRCASE``, bottom to top): every import
  from a module of one step points to its own step or one below it, never up (no
  exceptions).
- The streaming core (``engine.pipeline``, ``engine.stages``) imports nothing from the tools
  and services built on it (``engine.bench``, ``engine.cli``, ``engine.doctor``, ``engine.server``,
  ``engine.history``, ``engine.tools``).
- ``app``'s feature packages (``APP_FEATURES``: every package under ``app/`` but ``core`` and
  ``window``) import ``app.core`` and their own modules,
  never each other or ``app.window`` (the composition root, which may import them all);
  ``app.core`` imports no feature. ``app/`` has at most 10 files at its top level.

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


ENGINE_TOP_LEVEL = {"__init__", "engine", "config", "config_diff", "config_mcp", "errors", "measures",
                    "recording", "report"}
ENGINE_TOP_LEVEL_MAX = 12  # counting __init__.py
ENGINE_LAYERS = {"pipeline", "stages", "runtime", "audio", "backends", "models", "units", "history", "server",
                 "bench", "cli", "doctor", "tools", "mcp_server"}
STREAMING_CORE = ("engine.pipeline", "engine.stages")
BUILT_ON_THE_CORE = ("engine.bench", "engine.cli", "engine.doctor", "engine.server", "engine.history",
                     "engine.tools", "engine.mcp_server")


def _within(dotted: str, packages: tuple[str, ...]) -> bool:
    return any(dotted == p or dotted.startswith(p + ".") for p in packages)


def _folders(root: Path) -> list[Path]:
    """Every folder below ``root`` that holds Python files (caches left out)."""
    return sorted({p.parent for p in root.rglob("*.py") if "__pycache__" not in p.parts} - {root})


def test_the_engine_top_level_is_its_front_end_api():
    modules = sorted(p.stem for p in (ROOT / "engine").glob("*.py"))
    assert len(modules) <= ENGINE_TOP_LEVEL_MAX, f"engine/ has {len(modules)} top-level modules: {modules}"
    stray = sorted(set(modules) - ENGINE_TOP_LEVEL)
    assert stray == [], (f"engine/{stray[0] if stray else ''}.py is not front-end API: move it into "
                         f"the folder of its layer ({', '.join(sorted(ENGINE_LAYERS))})")


def test_every_engine_module_sits_in_a_folder_that_names_its_layer():
    engine = ROOT / "engine"
    layers = {f.relative_to(engine).parts[0] for f in _folders(engine)}
    assert layers == ENGINE_LAYERS, (f"engine/'s layer folders changed: new {sorted(layers - ENGINE_LAYERS)},"
                                     f" gone {sorted(ENGINE_LAYERS - layers)}; update ENGINE_LAYERS and "
                                     "docs/ARCHITECTURE.md")
    not_packages = [str(f.relative_to(ROOT)) for f in _folders(engine) if not (f / "__init__.py").is_file()]
    assert not_packages == [], f"folders without __init__.py: {not_packages}"


def test_the_streaming_core_imports_nothing_built_on_it(all_imports):
    bad = [_where(i) for i in all_imports
           if _within(i.importer, STREAMING_CORE) and _within(i.target, BUILT_ON_THE_CORE)]
    assert bad == [], ("the pipeline and the stages must not depend on the tools and services "
                       "built on them:\n" + "\n".join(bad))


def test_the_folder_rules_see_this_tree(all_imports):
    # If the rules above looked at the wrong files they would pass on nothing; they must not.
    assert {"engine.units.unit", "engine.stages.vad_stage"} <= {i.importer for i in all_imports}
    assert _within("engine.history.store", BUILT_ON_THE_CORE)
    assert not _within("engine.historyx", BUILT_ON_THE_CORE)
    assert {f.name for f in _folders(ROOT / "engine")} >= ENGINE_LAYERS


#: engine's layers, bottom to top: a module imports its own step or those below it. A step
#: is a layer folder (``engine.audio`` stands for everything in ``engine/audio/``) or
#: top-level modules (``engine`` itself is the package's ``__init__``).
#:
#: - The foundation: errors, settings, and the marks and figures a turn is measured by.
#: - ``audio`` (the sound primitives) and ``runtime`` (devices, memory, paths, the hub, the MLX
#:   lock, the CPU's compute gate, stats) import only the foundation, not each other.
#: - ``backends`` run on ``runtime``, with the model ladder (each rung's builds name a
#:   backend; an LLM's family and size are looked up in it); ``models`` (catalog, registry,
#:   cache, placement, calibration and its kernels, the stack ``auto`` picks) chooses and
#:   loads the backends.
#: - ``pipeline`` is the stage base and what flows between stages (it holds the loaded
#:   backends' contracts, not the registry, and asks the end-of-turn policy through a
#:   Protocol that the policy in ``stages`` implements); ``stages`` are the five stages;
#:   ``units`` composes them into one pipeline unit.
#: - Then what is built on a unit: the report of a turn (``engine.report``, which names
#:   the placement), the stored history (which stores reports), the tools (history search;
#:   they run on a unit), the front end (``Engine``, which holds the tools), the recording
#:   runner on an ``Engine``, and the services: doctor, the MCP server, the realtime server
#:   (which serves MCP), the benchmarks (which start servers), and the command line.
ENGINE_STAIRCASE: tuple[tuple[str, ...], ...] = (
    ("engine.errors", "engine.config_mcp", "engine.config", "engine.measures"),
    ("engine.audio",),
    ("engine.runtime",),
    ("engine.backends",),
    ("engine.models",),
    ("engine.pipeline",),
    ("engine.stages",),
    ("engine.units",),
    ("engine.report",),
    ("engine.history",),
    ("engine.tools",),
    ("engine", "engine.engine", "engine.config_diff"),
    ("engine.recording",),
    ("engine.doctor",),
    ("engine.mcp_server",),
    ("engine.server",),
    ("engine.bench",),
    ("engine.cli",),
)


def engine_step(dotted: str) -> int | None:
    """The index in ``ENGINE_STAIRCASE`` of an ``engine`` module's step; None for a module
    outside ``engine``, or one no step names."""
    parts = dotted.split(".")
    if parts[0] != "engine":
        return None
    key = ".".join(parts[:2])
    return next((i for i, step in enumerate(ENGINE_STAIRCASE) if key in step), None)


def test_every_engine_module_has_a_step_on_the_staircase():
    modules = [name for name in _sources() if name.split(".")[0] == "engine"]
    lost = sorted({".".join(m.split(".")[:2]) for m in modules if engine_step(m) is None})
    assert lost == [], f"add these to ENGINE_STAIRCASE, at the step their imports allow: {lost}"
    named = [entry for step in ENGINE_STAIRCASE for entry in step]
    assert len(named) == len(set(named)), "a module or layer is on two steps of ENGINE_STAIRCASE"


def _upward(imports: list[Import]) -> list[Import]:
    ups = []
    for imp in imports:
        here, there = engine_step(imp.importer), engine_step(imp.target)
        if here is not None and there is not None and there > here:
            ups.append(imp)
    return ups


def test_engine_imports_point_down_the_staircase(all_imports):
    # Lazy and TYPE_CHECKING imports count: each is a dependency all the same. No exceptions.
    bad = [f"{_where(i)}{' (type only)' if i.type_only else ''}" for i in _upward(all_imports)]
    assert bad == [], ("an engine module imports a layer above its own (ENGINE_STAIRCASE, bottom "
                       "to top): move the shared part down, or pass it in:\n" + "\n".join(bad))


def test_the_staircase_sees_this_tree():
    assert engine_step("engine.errors") == 0 and engine_step("engine.audio.pcm") == 1
    assert engine_step("engine") == engine_step("engine.engine") > engine_step("engine.units.unit")
    assert engine_step("engine.backends.base") < engine_step("engine.models.placement")
    assert engine_step("app.main") is None and engine_step("engine.nothing") is None
    up = Import("engine.audio.pcm", "engine.stages.turns", 1, lazy=True, type_only=False)
    down = Import("engine.stages.turns", "engine.audio.pcm", 1, lazy=False, type_only=True)
    assert _upward([up, down]) == [up]


APP_SHARED = ("core", "window")  # what the features share, and the composition root
#: Every other package under app/ is a feature: a new folder is one without being listed.
APP_FEATURES = tuple(sorted(p.name for p in (ROOT / "app").iterdir()
                            if (p / "__init__.py").is_file() and p.name not in APP_SHARED))
APP_TOP_LEVEL_MAX = 10  # files directly in app/, counting __init__.py


def _app_feature(dotted: str) -> str | None:
    """The feature package ``dotted`` belongs to (``app.bench.panel`` -> ``bench``), or None."""
    parts = dotted.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "app" and parts[1] in APP_FEATURES else None


def test_app_features_import_the_core_and_themselves_only(all_imports):
    # A feature reaches another only through what the window (the composition root) hands it.
    bad = [_where(i) for i in all_imports
           if (feature := _app_feature(i.importer)) is not None and _top(i.target) == "app"
           and not _within(i.target, ("app.core", f"app.{feature}"))]
    assert bad == [], ("an app feature imports app.core and its own modules, never another feature "
                       "or app.window:\n" + "\n".join(bad))


def test_app_core_imports_no_feature_and_not_the_window(all_imports):
    bad = [_where(i) for i in all_imports
           if _within(i.importer, ("app.core",)) and _top(i.target) == "app"
           and not _within(i.target, ("app.core",))]
    assert bad == [], "app.core is what the features share: it imports none of them:\n" + "\n".join(bad)


def test_the_app_rules_see_this_tree(all_imports):
    importers = {i.importer for i in all_imports}
    assert {f"app.{feature}" for feature in APP_FEATURES} <= importers  # each exports install()
    # Known features of this tree, ``tools`` among them (a list written by hand once left it out).
    assert {"conversation", "onboarding", "settings", "tools"} <= set(APP_FEATURES)
    assert not set(APP_SHARED) & set(APP_FEATURES)
    assert ("app.window.main_window", "app.conversation") in {(i.importer, i.target) for i in all_imports}
    assert _app_feature("app.bench.panel") == "bench" and _app_feature("app.core.widgets") is None
    assert _app_feature("app.window.main_window") is None and _app_feature("engine.bench") is None


def test_app_has_few_files_at_its_top_level():
    files = sorted(p.name for p in (ROOT / "app").iterdir() if p.is_file() and p.suffix == ".py")
    assert len(files) <= APP_TOP_LEVEL_MAX, f"app/ has {len(files)} files at its top level: {files}"


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
