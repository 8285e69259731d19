"""The Settings tab's Tools group: whether the assistant may call tools, your own tools
(a Python file or module chosen here), the time limit of a call, and per tool that asks
first (side effects, or stored conversations sent to a remote LLM) whether Parley asks
before running it.

The tools themselves and whether the loaded language model can call them come from the
engine (``Engine.tool_support()``, read off the GUI thread by ``app.settings.install``
and handed over with ``set_support``). While the model cannot call tools (the bundled
SmolLM2), the group says why and which models can, and its controls are disabled; the
settings are still kept, for the model that can.

``tools.enabled``, ``tools.user_module`` and ``tools.timeout_s`` are plain field editors
(``app.settings.fields``), read and written with the Advanced fields; ``tools.trusted``
is the list of tools whose "Ask before running" box is cleared, kept here (names of tools
not listed now, a user module's not loaded yet, stay in it). ``tools.mcp_servers`` is a
field editor too, kept hidden: the MCP servers list (``app.settings.mcp_list``) shows and
edits it, with each server's status and tools (an MCP tool that may change something has
its "Ask before running" box like any other).
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import (QCheckBox, QFileDialog, QFormLayout, QGridLayout, QGroupBox, QHBoxLayout,
                               QLabel, QLineEdit, QPushButton, QWidget)

from app.core.widgets import clear_layout
from app.settings.fields import make_editor
from app.settings.mcp_list import McpServersList
from engine.config import config_fields

#: Laid out in this group, not under Advanced: the dotted keys and their labels.
TOOLS_FIELDS = (("tools.enabled", "Offer tools"), ("tools.user_module", "Your tools"),
                ("tools.timeout_s", "Time limit (s)"))
TRUSTED = "tools.trusted"
MCP_SERVERS = "tools.mcp_servers"
#: Every key this group edits.
TOOLS_KEYS = {d for d, _text in TOOLS_FIELDS} | {TRUSTED, MCP_SERVERS}
NOT_LOADED = "The tools are listed once the models are loaded."


def split_names(text: str) -> list[str]:
    """``tools.trusted``'s names, in order, without blanks or repeats."""
    names: list[str] = []
    for name in (part.strip() for part in text.split(",")):
        if name and name not in names:
            names.append(name)
    return names


class ToolsGroup(QObject):
    """The Tools group box (``box``) and its editors (``fields``, by dotted key).

    ``edited`` is emitted when an "Ask before running" box changes (the field editors
    report their own edits, like every field's)."""

    edited = Signal()

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.box = QGroupBox("Tools")
        self.box.setObjectName("toolsGroup")
        form = QFormLayout(self.box)
        fields = {d: (f, t) for d, f, t in config_fields()}
        self.fields: dict[str, QWidget] = {}
        for dotted, text in TOOLS_FIELDS:
            editor = self.fields[dotted] = make_editor(dotted, *fields[dotted])
            editor.setAccessibleName(text)
        enabled = self.fields["tools.enabled"]
        assert isinstance(enabled, QCheckBox)
        enabled.setText("Let the assistant use tools")
        enabled.setToolTip("The clock, timers and reminders, a calculator, search of past "
                           "conversations, and your own tools")
        # What the loaded model can do comes first: it decides whether the rest matters.
        self.status = QLabel(NOT_LOADED)
        self.status.setObjectName("hint")
        self.status.setWordWrap(True)
        self.status.setAccessibleName("Tools status")
        form.addRow(self.status)
        form.addRow(enabled)
        module = self._module()
        module.setPlaceholderText("none (a .py file, or a module name with a TOOLS list)")
        self.choose = QPushButton("Choose…")
        self.choose.setAccessibleName("Choose your tools' Python file")
        self.choose.setToolTip("Choose a Python file that defines a TOOLS list")
        self.choose.clicked.connect(self._choose_module)
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(module, 1)
        row.addWidget(self.choose)
        form.addRow("Your tools", row)
        form.addRow("Time limit (s)", self.fields["tools.timeout_s"])
        # The JSON text lives in a hidden editor: an Add or Remove is then a pending edit
        # like any field's, read and written by the panel with the others.
        servers = self.fields[MCP_SERVERS] = make_editor(MCP_SERVERS, *fields[MCP_SERVERS])
        servers.setParent(self.box)
        servers.hide()
        mcp_title = QLabel("MCP servers")
        mcp_title.setObjectName("formSection")
        form.addRow(mcp_title)
        assert isinstance(servers, QLineEdit)  # make_editor's editor of a str field
        self.mcp = McpServersList(servers)
        form.addRow(self.mcp)
        self.asks_title = QLabel("Ask before running")
        self.asks_title.setObjectName("formSection")
        form.addRow(self.asks_title)
        self._asks_body = QWidget()
        self._asks_grid = QGridLayout(self._asks_body)
        self._asks_grid.setContentsMargins(0, 0, 0, 0)
        form.addRow(self._asks_body)
        #: "Ask before running" per tool with side effects, by tool name.
        self.asks: dict[str, QCheckBox] = {}
        self.support = None  # the last ToolSupport handed over, or None before a load
        self._applied = None  # the applied ToolsConfig it was read under
        self._trusted: list[str] = []  # the config's names, those without a box included
        self._show_asks()
        self._follow_support()

    # ------------------------------------------------------------------ the engine's word
    def set_support(self, support, applied=None) -> None:
        """Show what ``support`` (an ``engine.tools.ToolSupport``, or None: no engine yet)
        says under the applied ``tools`` section ``applied`` (a ``ToolsConfig``): the tools
        with side effects get their box, and while tools are off the group says why and
        its controls are disabled, but for the switch that turned them off (the enabled
        box while it is cleared, the user module while one is named: a bad one can be
        changed)."""
        self.support = support
        self._applied = applied
        self._show_asks()
        self._follow_support()
        self._show_servers()

    def _show_servers(self) -> None:
        applied = self._applied
        self.mcp.set_support(self.support, "" if applied is None else applied.mcp_servers,
                             ",".join(self._trusted))

    @property
    def available(self) -> bool:
        """True when the loaded model can call tools (False before a load)."""
        return self.support is not None and bool(self.support.available)

    def _follow_support(self) -> None:
        support, applied = self.support, self._applied
        if support is None:
            text = NOT_LOADED
        elif support.available:
            listed = ", ".join(t.name for t in support.tools)
            text = f"The language model can call tools. Offered: {listed}." if listed else (
                "The language model can call tools; none is offered.")
        else:
            reason = support.reason
            # The engine's reason may say "tools are off" itself (the header-label lesson).
            text = (reason[:1].upper() + reason[1:] if reason.lower().startswith("tools are off")
                    else f"Tools are off: {reason}")
        self.status.setText(text)
        on = support is None or bool(support.available)
        for editor in (*self.fields.values(), self.choose, *self.asks.values()):
            editor.setEnabled(on)
        self.asks_title.setEnabled(on)
        if not on and applied is not None:
            self.fields["tools.enabled"].setEnabled(not applied.enabled)
            if applied.user_module.strip():
                self._module().setEnabled(True)
                self.choose.setEnabled(True)

    def _show_asks(self) -> None:
        """One "Ask before running" box per tool that asks first (``ToolSupport.asks_first``:
        side effects, or stored conversations sent to a remote LLM), checked unless trusted."""
        for box in self.asks.values():
            self._asks_grid.removeWidget(box)
            box.deleteLater()
        self.asks.clear()
        clear_layout(self._asks_grid)
        support = self.support
        tools = [] if support is None else [t for t in support.tools if support.asks_first(t)]
        # Two boxes a row, what each tool does in its tooltip: the group sits above
        # Advanced and must stay short.
        for i, tool in enumerate(tools):
            box = QCheckBox(tool.name)
            box.setObjectName(f"askBefore:{tool.name}")
            box.setAccessibleName(f"Ask before running {tool.name}")
            box.setAccessibleDescription(tool.description)
            why = "" if tool.side_effects else (
                " It returns your stored conversations, which the remote language model's "
                "server would receive.")
            box.setToolTip(f"{tool.description} ({tool.source}).{why} Cleared: it runs without asking.")
            box.setChecked(tool.name not in self._trusted)
            box.toggled.connect(lambda _on: self.edited.emit())
            self.asks[tool.name] = box
            self._asks_grid.addWidget(box, i // 2, i % 2)
        self.asks_title.setVisible(bool(tools))
        self._asks_body.setVisible(bool(tools))

    # ------------------------------------------------------------------ the trusted list
    def set_trusted(self, text: str) -> None:
        """Show ``tools.trusted`` (comma-separated names) in the boxes."""
        self._trusted = split_names(text)
        for name, box in self.asks.items():
            box.blockSignals(True)
            box.setChecked(name not in self._trusted)
            box.blockSignals(False)
        self._show_servers()

    def trusted(self) -> str:
        """``tools.trusted`` as the boxes say: a cleared box's tool is trusted; names
        without a box (a tool not offered now) are kept as the config had them."""
        # In the config's order, newly trusted ones after: an unchanged list is no edit.
        names = [n for n in self._trusted if n not in self.asks or not self.asks[n].isChecked()]
        names += [n for n, box in self.asks.items() if not box.isChecked() and n not in names]
        return ",".join(names)

    # ------------------------------------------------------------------ the user module
    def _module(self) -> QLineEdit:
        editor = self.fields["tools.user_module"]
        assert isinstance(editor, QLineEdit)  # make_editor's editor of a str field
        return editor

    def _choose_module(self) -> None:
        module = self._module()
        path, _ = QFileDialog.getOpenFileName(self.box, "Your tools: a Python file with a TOOLS list",
                                              module.text(), "Python (*.py);;All files (*)")
        if path:
            module.setText(path)
