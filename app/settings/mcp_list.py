"""Settings > Tools: the MCP servers of ``tools.mcp_servers``, each with its status as the
engine last reported it (``ToolSupport.servers``: up with its tool count, failed and why,
or not connected yet) and, expanded, its tools with their hints (read-only: runs without
asking; otherwise asks first, unless its "Ask before running" box is cleared); Add… opens
``McpServerDialog``, Remove drops the selected server.

The list edits the setting's JSON text in a hidden field editor (``editor``, the Tools
group's ``tools.mcp_servers`` field), so an edit is a pending change like any other and
Apply connects the servers (on the controller's lane, never on the GUI thread).
"""

from __future__ import annotations

import json

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (QAbstractItemView, QHBoxLayout, QLabel, QLineEdit, QPushButton, QTreeWidget,
                               QTreeWidgetItem, QVBoxLayout, QWidget)

from app.settings.mcp_dialog import McpServerDialog
from engine.config_mcp import McpServerSpec, parse_servers
from engine.errors import ConfigError
from engine.tools.registry import FAILED, UP, ToolInfo, ToolSupport

NOT_YET = "not connected yet: Apply connects it"


class McpServersList(QWidget):
    """The servers (``tree``: a row per server, its tools under it), ``details`` (the
    selected server's whole status) and the Add…/Remove buttons."""

    def __init__(self, editor: QLineEdit, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.editor = editor
        self.support: ToolSupport | None = None  # the last one handed over
        self._applied: tuple[McpServerSpec, ...] = ()  # the applied config's servers
        self._trusted: set[str] = set()
        self.dialog: McpServerDialog | None = None  # the Add… dialog while it is open
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.tree = QTreeWidget()
        self.tree.setObjectName("mcpServers")
        self.tree.setAccessibleName("MCP servers")
        self.tree.setHeaderLabels(["MCP server", "Status"])
        self.tree.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.tree.setRootIsDecorated(True)
        self.tree.setMaximumHeight(150)
        self.tree.itemSelectionChanged.connect(self._selected)
        layout.addWidget(self.tree)
        self.details = QLabel()
        self.details.setObjectName("hint")
        self.details.setWordWrap(True)
        self.details.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.details.setAccessibleName("MCP server details")
        layout.addWidget(self.details)
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        self.add_button = QPushButton("Add…")
        self.add_button.setAccessibleName("Add an MCP server")
        self.add_button.clicked.connect(self.open_add_dialog)
        self.remove_button = QPushButton("Remove")
        self.remove_button.setAccessibleName("Remove the selected MCP server")
        self.remove_button.clicked.connect(self.remove_selected)
        row.addWidget(self.add_button)
        row.addWidget(self.remove_button)
        row.addStretch(1)
        layout.addLayout(row)
        editor.textChanged.connect(lambda _text: self.refresh())
        self.refresh()

    # ------------------------------------------------------------------ what is shown
    def specs(self) -> tuple[McpServerSpec, ...]:
        """The servers the field holds now (none while its text is not valid)."""
        try:
            return parse_servers(self.editor.text())
        except ConfigError:
            return ()

    def set_support(self, support: ToolSupport | None, applied_servers: str = "", trusted: str = "") -> None:
        """Show the engine's word (a ToolSupport, or None) on the servers of the applied
        ``tools.mcp_servers`` text ``applied_servers``; ``trusted`` names the tools that
        run without asking."""
        self.support = support
        try:
            self._applied = parse_servers(applied_servers)
        except ConfigError:
            self._applied = ()
        self._trusted = {n.strip() for n in trusted.split(",") if n.strip()}
        self.refresh()

    def status_of(self, spec: McpServerSpec) -> tuple[str, str]:
        """``(short status, the whole of it)`` for ``spec``."""
        if spec not in self._applied or self.support is None:
            return "not connected yet", f"{spec.name}: {NOT_YET}."
        status = next((s for s in self.support.servers if s.name == spec.name), None)
        if status is None:
            return "not connected yet", (f"{spec.name}: not connected yet (tools are off, or the engine "
                                         "is loading).")
        if status.state == UP:
            count = len(self.support.server_tools(spec.name))
            short = f"up · {count} tool{'' if count == 1 else 's'}"
            return short, f"{spec.name}: {short} ({_where(spec)})."
        if status.state == FAILED:
            return f"failed: {status.reason}", f"{spec.name} failed: {status.reason}"
        return "not connected", f"{spec.name}: not connected; {status.reason}."

    def rows(self) -> list[tuple[str, str, list[tuple[str, str]]]]:
        """``(server, status, [(tool, hint)])`` as shown (tests, copying)."""
        out = []
        for item in self._servers():
            children = [c for c in (item.child(j) for j in range(item.childCount())) if c is not None]
            out.append((item.text(0), item.text(1), [(c.text(0), c.text(1)) for c in children]))
        return out

    def _servers(self) -> list[QTreeWidgetItem]:
        """The tree's server rows."""
        items = (self.tree.topLevelItem(i) for i in range(self.tree.topLevelItemCount()))
        return [item for item in items if item is not None]

    def refresh(self) -> None:
        """Fill the tree from the field's servers and the engine's last word."""
        selected = self._selected_name()
        support = self.support
        self.tree.clear()
        for spec in self.specs():
            short, whole = self.status_of(spec)
            item = QTreeWidgetItem([spec.name, short])
            item.setData(0, Qt.ItemDataRole.UserRole, spec.name)
            item.setData(1, Qt.ItemDataRole.UserRole, whole)
            item.setToolTip(0, _where(spec))
            item.setToolTip(1, whole)
            tools: list[tuple[ToolInfo, str]] = []
            if support is not None and spec in self._applied:
                tools = [(tool, self._hint(support, tool)) for tool in support.server_tools(spec.name)]
            for tool, hint in tools:
                child = QTreeWidgetItem([tool.name, hint])
                child.setToolTip(0, tool.description)
                child.setToolTip(1, tool.description)
                item.addChild(child)
            self.tree.addTopLevelItem(item)
            if spec.name == selected:
                item.setSelected(True)
        self.tree.resizeColumnToContents(0)
        self._selected()

    def _hint(self, support: ToolSupport, tool: ToolInfo) -> str:
        if not support.asks_first(tool):
            return "read-only: runs without asking"
        if tool.name in self._trusted:
            return "changes things; trusted: runs without asking"
        return "changes things: asks first"

    def _selected_name(self) -> str:
        items = self.tree.selectedItems()
        if not items:
            return ""
        item = items[0]
        top = item.parent() or item
        return str(top.data(0, Qt.ItemDataRole.UserRole))

    def _selected(self) -> None:
        name = self._selected_name()
        self.remove_button.setEnabled(bool(name))
        item = next((i for i in self._servers() if i.data(0, Qt.ItemDataRole.UserRole) == name), None)
        if item is not None:
            self.details.setText(str(item.data(1, Qt.ItemDataRole.UserRole)))
        else:
            count = self.tree.topLevelItemCount()
            self.details.setText("No MCP server: Add… connects one's tools." if count == 0 else
                                 "Select a server to see its status; expand it for its tools.")

    def select(self, name: str) -> None:
        """Select server ``name``'s row."""
        for item in self._servers():
            item.setSelected(item.data(0, Qt.ItemDataRole.UserRole) == name)

    # ------------------------------------------------------------------ editing
    def open_add_dialog(self) -> McpServerDialog:
        """Open the Add… dialog (not blocking); an accepted server is added to the field."""
        dialog = self.dialog = McpServerDialog(self.specs(), self)
        dialog.accepted.connect(lambda: self._add(dialog.spec))
        dialog.finished.connect(lambda _result: setattr(self, "dialog", None))
        dialog.open()
        return dialog

    def _add(self, spec: McpServerSpec | None) -> None:
        if spec is not None:
            self._write((*self.specs(), spec))
            self.select(spec.name)

    def remove_selected(self) -> None:
        """Drop the selected server from the field."""
        name = self._selected_name()
        if name:
            self._write(tuple(s for s in self.specs() if s.name != name))

    def _write(self, specs: tuple[McpServerSpec, ...]) -> None:
        self.editor.setText(json.dumps([s.as_dict() for s in specs], ensure_ascii=False) if specs else "")


def _where(spec: McpServerSpec) -> str:
    return " ".join((spec.command, *spec.args)) if spec.command else spec.url
