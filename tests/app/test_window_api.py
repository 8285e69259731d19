"""The app's composition contract, read from the source with ``ast`` (nothing is imported):

- outside ``app/window/`` nothing sets an attribute on the window (``window.<name> = …``,
  ``setattr(window, …)``): a feature keeps its state on the object its ``install`` returns,
  and what one feature needs from another is an argument of its ``install``;
- every ``install`` a feature exports takes the window as ``WindowApi``
  (``app/core/window_api.py``), so pyright checks what a feature uses of it.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "app"
WINDOW_PACKAGE = APP / "window"
#: What a feature calls the window it was given (``self.window``, ``self._window`` included).
WINDOW_NAMES = ("window", "_window")


def _is_window(node: ast.expr) -> bool:
    """``window``, ``self.window``, ``self._window``."""
    if isinstance(node, ast.Name):
        return node.id in WINDOW_NAMES
    return isinstance(node, ast.Attribute) and node.attr in WINDOW_NAMES


def window_writes(source: str) -> list[tuple[int, str]]:
    """Every ``<window>.<name> = …`` (plain, annotated or augmented assignment, a tuple
    target included) and ``setattr(<window>, …)`` in ``source``: (line, what)."""
    found: list[tuple[int, str]] = []

    def targets(node: ast.expr) -> list[ast.expr]:
        if isinstance(node, ast.Tuple | ast.List):
            return [t for element in node.elts for t in targets(element)]
        return [node.value] if isinstance(node, ast.Starred) else [node]

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign):
            written = [t for target in node.targets for t in targets(target)]
        elif isinstance(node, ast.AnnAssign | ast.AugAssign):
            written = [node.target]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr"
              and node.args and _is_window(node.args[0])):
            found.append((node.lineno, ast.unparse(node)))
            continue
        else:
            continue
        found += [(node.lineno, f"{ast.unparse(t)} = …") for t in written
                  if isinstance(t, ast.Attribute) and _is_window(t.value)]
    return found


def _app_sources() -> list[Path]:
    return sorted(p for p in APP.rglob("*.py") if "__pycache__" not in p.parts)


def test_the_reader_finds_each_kind_of_write():
    source = ("window.a = 1\n"
              "self.window.b: int = 2\n"
              "self._window.c += 3\n"
              "x, window.d = 4, 5\n"
              "setattr(window, 'e', None)\n"
              "window.banner.show_message('fine')\n"  # a call on what the window offers
              "self.window = window\n"  # keeping the window given is not writing to it
              "panel.inputs = []\n")
    assert [line for line, _what in window_writes(source)] == [1, 2, 3, 4, 5]


def test_nothing_outside_the_window_package_sets_attributes_on_the_window():
    sources = [p for p in _app_sources() if WINDOW_PACKAGE not in p.parents]
    assert any(p.parent.name == "onboarding" for p in sources)  # the features are read
    bad = [f"{p.relative_to(ROOT)}:{line}: {what}" for p in sources
           for line, what in window_writes(p.read_text(encoding="utf-8"))]
    assert bad == [], ("a feature keeps its state on the object its install() returns, not on the "
                       "window:\n" + "\n".join(bad))


def _installs(path: Path) -> list[ast.FunctionDef]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "install"]


def test_every_install_takes_the_window_as_its_api():
    features = sorted(p.parent for p in APP.glob("*/__init__.py")
                      if p.parent.name not in ("core", "window"))
    assert {"conversation", "onboarding", "tools"} <= {f.name for f in features}
    untyped = []
    for path in _app_sources():
        if WINDOW_PACKAGE in path.parents or (APP / "core") in path.parents:
            continue
        for install in _installs(path):
            first = install.args.args[0] if install.args.args else None
            if first is None or first.annotation is None or ast.unparse(first.annotation) != "WindowApi":
                untyped.append(f"{path.relative_to(ROOT)}:{install.lineno}")
    exported = [f.name for f in features if not _installs(f / "__init__.py")]
    assert exported == [], f"feature packages without install(window): {exported}"
    assert untyped == [], "install(window) must take the window as WindowApi:\n" + "\n".join(untyped)
