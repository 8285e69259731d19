"""docs/ARCHITECTURE.md stays true: what it names exists, and its layer table is the real
import graph (read with ``ast``; nothing is imported)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.test_layering import _sources, imports_of

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "ARCHITECTURE.md"
# Every folder may import these.
FOUNDATION = {"engine.errors", "engine.config", "engine.config_mcp", "engine.measures"}

PATH = re.compile(r"(?<![\w./-])((?:engine|app|tests)/[\w./<>-]*)")
MODULE = re.compile(r"(?<![\w./])((?:engine|app)(?:\.\w+)+)")


def _text() -> str:
    return DOC.read_text(encoding="utf-8")


def _code_spans(text: str) -> list[str]:
    return re.findall(r"`([^`]+)`", text)


def named_paths(text: str) -> list[str]:
    """Every ``engine/...``, ``app/...`` or ``tests/...`` path in a code span (placeholders
    such as ``<stage>`` are left out: they name a pattern, not a file)."""
    found = [m.rstrip(".,") for span in _code_spans(text) for m in PATH.findall(span)]
    return sorted({p for p in found if "<" not in p})


def named_modules(text: str) -> list[str]:
    """Every dotted ``engine.x`` / ``app.x`` name in a code span."""
    return sorted({m for span in _code_spans(text) for m in MODULE.findall(span)})


def module_file(dotted: str) -> Path | None:
    """The source of a module of this tree, found without importing anything."""
    base = ROOT.joinpath(*dotted.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def layer_rows(text: str) -> dict[str, set[str]]:
    """The layer table: folder (``engine/pipeline/``, ``app/`` for the top level) -> what it
    may import besides the foundation."""
    rows: dict[str, set[str]] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not re.fullmatch(r"`(engine|app)/(\w+/)?`", cells[0]):
            continue
        rows[cells[0].strip("`")] = set(_code_spans(cells[2]))
    return rows


def row_of(dotted: str) -> str:
    """The table row a module belongs to: its layer folder, or its package's top level."""
    parts = dotted.split(".")
    if len(parts) > 1 and (ROOT / parts[0] / parts[1]).is_dir():
        return f"{parts[0]}/{parts[1]}/"
    return f"{parts[0]}/"


def layer_of(dotted: str) -> str:
    """How the table names what a module is: ``engine.pipeline`` for anything in that
    folder, ``engine.report`` for a top-level module, ``app`` for the package itself."""
    return ".".join(dotted.split(".")[:2])


def test_every_path_it_names_exists():
    missing = [p for p in named_paths(_text()) if not (ROOT / p).exists()]
    assert missing == [], f"docs/ARCHITECTURE.md names paths that do not exist: {missing}"


def test_every_module_it_names_exists_and_parses():
    modules = named_modules(_text())
    missing = [m for m in modules if module_file(m) is None]
    assert missing == [], f"docs/ARCHITECTURE.md names modules that do not exist: {missing}"
    for m in modules:
        ast.parse(module_file(m).read_text(encoding="utf-8"))


def test_every_folder_of_engine_and_app_has_one_row():
    rows = set(layer_rows(_text()))
    folders: set[str] = set()
    for pkg in ("engine", "app"):
        folders.add(f"{pkg}/")
        folders |= {f"{pkg}/{d.name}/" for d in (ROOT / pkg).iterdir()
                    if d.is_dir() and (d / "__init__.py").is_file()}
    assert rows == folders, f"rows without a folder: {sorted(rows - folders)}; " \
                            f"folders without a row: {sorted(folders - rows)}"


def test_each_folder_imports_only_what_its_row_says():
    rows = layer_rows(_text())
    sources = _sources()
    known = set(sources)
    wrong = []
    for name, path in sources.items():
        row = row_of(name)
        allowed = rows.get(row, set()) | FOUNDATION
        for imp in imports_of(name, path, known):
            if imp.target not in known or row_of(imp.target) == row:
                continue
            if layer_of(imp.target) not in allowed:
                wrong.append(f"{name} (line {imp.line}) imports {imp.target}: "
                             f"not in the row of `{row}`")
    assert wrong == [], ("docs/ARCHITECTURE.md's layer table is out of date (or the import is "
                         "wrong):\n" + "\n".join(sorted(set(wrong))))


def test_every_import_it_allows_is_used():
    # A row that lists more than the folder imports would no longer be true either.
    rows = layer_rows(_text())
    sources = _sources()
    known = set(sources)
    used: dict[str, set[str]] = {row: set() for row in rows}
    for name, path in sources.items():
        for imp in imports_of(name, path, known):
            if imp.target in known and row_of(imp.target) != row_of(name):
                used.setdefault(row_of(name), set()).add(layer_of(imp.target))
    unused = {row: sorted(allowed - used[row]) for row, allowed in rows.items() if allowed - used[row]}
    assert unused == {}, f"rows that list imports the folder does not make: {unused}"


@pytest.mark.parametrize(("text", "paths", "modules"), [
    ("see `engine/pipeline/stage.py` and `engine.server.protocol`, e.g. `engine/backends/<stage>/`",
     ["engine/pipeline/stage.py"], ["engine.server.protocol"]),
    ("`app/core/` `tests/x.py`.", ["app/core/", "tests/x.py"], []),
])
def test_the_reader_finds_paths_and_modules(text, paths, modules):
    assert named_paths(text) == paths and named_modules(text) == modules


def test_the_table_reader_and_the_doc_agree_on_a_known_row():
    rows = layer_rows(_text())
    assert rows["engine/history/"] == {"engine.pipeline", "engine.report", "engine.runtime"}
    assert row_of("engine.stages.end_of_turn.board") == "engine/stages/"
    assert row_of("engine.recording") == "engine/" and layer_of("engine.recording") == "engine.recording"
    assert module_file("engine.history.store") is not None and module_file("engine.nothing") is None
