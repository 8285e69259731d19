"""Settings > Tools > MCP servers > Add…: one server of ``tools.mcp_servers``, a stdio
command (its arguments, and ``env`` as ``NAME=${VARIABLE}`` lines) or a streamable-HTTP
URL (``headers`` as ``Name: value`` lines). OK checks it with the engine's own
``parse_servers`` (beside the servers already listed: names must differ); bad input is a
message in the dialog, which stays open, and nothing changes.
"""

from __future__ import annotations

import shlex

from PySide6.QtWidgets import (QButtonGroup, QDialog, QDialogButtonBox, QFormLayout, QLabel, QLineEdit,
                               QPlainTextEdit, QRadioButton, QVBoxLayout, QWidget)

from engine.config_mcp import KEY, McpServerSpec, parse_servers
from engine.errors import ConfigError


def _lines(text: str, separator: str, what: str, example: str) -> dict[str, str]:
    """``NAME<separator>value`` lines as a dict; a ConfigError names the bad line."""
    out: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        name, found, value = line.partition(separator)
        if not found or not name.strip():
            raise ConfigError(f"{what} line {number} ({line.strip()!r}) must be {example}")
        out[name.strip()] = value.strip()
    return out


class McpServerDialog(QDialog):
    """The Add… dialog; ``spec`` is the server once accepted (None before)."""

    def __init__(self, existing: tuple[McpServerSpec, ...], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Add an MCP server")
        self.setObjectName("mcpServerDialog")
        self.existing = existing
        self.spec: McpServerSpec | None = None
        layout = QVBoxLayout(self)
        form = QFormLayout()
        self.name = QLineEdit()
        self.name.setPlaceholderText("notes (letters, digits, - and _)")
        self.name.setAccessibleName("Server name")
        form.addRow("Name", self.name)
        self.stdio = QRadioButton("A command (stdio)")
        self.http = QRadioButton("A URL (streamable HTTP)")
        kinds = QButtonGroup(self)
        kinds.addButton(self.stdio)
        kinds.addButton(self.http)
        self.stdio.setChecked(True)
        form.addRow(self.stdio)
        self.command = QLineEdit()
        self.command.setPlaceholderText("uvx, npx, python…")
        self.command.setAccessibleName("Command")
        form.addRow("Command", self.command)
        self.arguments = QLineEdit()
        self.arguments.setPlaceholderText("notes-mcp --root ~/Notes (quoted as in a shell)")
        self.arguments.setAccessibleName("Arguments")
        form.addRow("Arguments", self.arguments)
        self.env = QPlainTextEdit()
        self.env.setPlaceholderText("NOTES_TOKEN=${NOTES_TOKEN}  (one a line; ${NAME}: from Parley's "
                                    "environment)")
        self.env.setAccessibleName("Environment variables")
        self.env.setMaximumHeight(60)
        form.addRow("Environment", self.env)
        form.addRow(self.http)
        self.url = QLineEdit()
        self.url.setPlaceholderText("http://127.0.0.1:8123/mcp")
        self.url.setAccessibleName("URL")
        form.addRow("URL", self.url)
        self.headers = QPlainTextEdit()
        self.headers.setPlaceholderText("Authorization: Bearer ${HOME_TOKEN}  (one a line)")
        self.headers.setAccessibleName("Headers")
        self.headers.setMaximumHeight(60)
        form.addRow("Headers", self.headers)
        layout.addLayout(form)
        self.error = QLabel()
        self.error.setObjectName("message")
        self.error.setProperty("level", "error")
        self.error.setWordWrap(True)
        self.error.hide()
        layout.addWidget(self.error)
        ok, cancel = QDialogButtonBox.StandardButton.Ok, QDialogButtonBox.StandardButton.Cancel
        self.buttons = QDialogButtonBox(ok | cancel)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        layout.addWidget(self.buttons)
        self.stdio.toggled.connect(self._follow_kind)
        self._follow_kind()

    def _follow_kind(self) -> None:
        stdio = self.stdio.isChecked()
        for editor in (self.command, self.arguments, self.env):
            editor.setEnabled(stdio)
        for editor in (self.url, self.headers):
            editor.setEnabled(not stdio)

    def entry(self) -> dict[str, object]:
        """The server as a ``tools.mcp_servers`` entry; a ConfigError names a bad line."""
        out: dict[str, object] = {"name": self.name.text().strip()}
        if self.stdio.isChecked():
            out["command"] = self.command.text().strip()
            try:
                args = shlex.split(self.arguments.text())
            except ValueError as exc:
                raise ConfigError(f"the arguments {self.arguments.text()!r} cannot be split: {exc}") from None
            if args:
                out["args"] = args
            env = _lines(self.env.toPlainText(), "=", "Environment", "NAME=value, such as TOKEN=${TOKEN}")
            if env:
                out["env"] = env
        else:
            out["url"] = self.url.text().strip()
            headers = _lines(self.headers.toPlainText(), ":", "Headers",
                             "Name: value, such as Authorization: Bearer ${TOKEN}")
            if headers:
                out["headers"] = headers
        return out

    def accept(self) -> None:
        """Check the server with ``parse_servers``: saved and closed if good, else the
        message shows and the dialog stays open."""
        try:
            entry = self.entry()
            specs = parse_servers([*(s.as_dict() for s in self.existing), entry], KEY)
        except ConfigError as exc:
            self.error.setText(str(exc))
            self.error.show()
            return
        self.spec = specs[-1]
        super().accept()
