"""Settings > Tools > MCP servers, on what a real ``ToolHost`` says of real MCP servers
(the stdio notes server of tests/support/mcp_servers.py, and a command that does not
exist), no model loaded: the list shows each server's status and its tools with their
hints; Add… checks its input with the engine's ``parse_servers`` (a bad entry is a
message in the dialog and nothing changes); Add and Remove edit ``tools.mcp_servers``,
which Apply hands on. And a tool call's row in the conversation names the MCP server
that answered it.
"""

from __future__ import annotations

import json
import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest

from app.settings.panel import SettingsPanel
from engine.config import EngineConfig
from engine.config_mcp import parse_servers
from engine.tools.host import ToolHost
from engine.tools.worker import ToolRaised
from tests.support.tools import tool_host_with_errors
from tests.support.mcp_servers import stdio_server

pytest.importorskip("mcp")

#: The notes server's tools (tests/support/mcp_servers.py).
NOTES_TOOLS = {"read_note", "delete_note", "touch_note", "token", "crash", "hang", "garbage", "picture",
               "long_text", "grow"}
GONE = {"name": "gone", "command": "/nonexistent/parley-mcp-server"}


@pytest.fixture
def tool_host(tmp_path, monkeypatch):
    """A real ToolHost (no LLM, as ``parley-cli tools`` runs it) and its EngineError messages."""
    monkeypatch.setenv("PARLEY_DATA_DIR", str(tmp_path / "data"))
    with tool_host_with_errors() as made:
        yield made


def _config(servers: list[dict], trusted: str = "") -> EngineConfig:
    return EngineConfig().with_overrides({"tools.mcp_servers": json.dumps(servers), "tools.trusted": trusted})


def _applied(panel: SettingsPanel, host: ToolHost, config: EngineConfig) -> None:
    """What Apply does for a tools setting: the host is configured, the panel shows the
    new config and then the engine's word on it."""
    host.configure(config.tools, None)
    panel.set_config(config)
    panel.set_tool_support(host.support())


def test_the_list_shows_each_servers_status_and_its_tools_with_their_hints(qtbot, tool_host):
    host, errors = tool_host
    config = _config([stdio_server(), GONE], trusted="touch_note")
    panel = SettingsPanel(config)
    qtbot.addWidget(panel)
    servers = panel.tools.mcp
    # Before the engine's word: listed, not connected yet.
    assert [(name, status) for name, status, _tools in servers.rows()] == [
        ("notes", "not connected yet"), ("gone", "not connected yet")]
    _applied(panel, host, config)
    (notes, notes_status, tools), (gone, gone_status, gone_tools) = servers.rows()
    assert (notes, notes_status) == ("notes", f"up · {len(NOTES_TOOLS)} tools")
    hints = dict(tools)
    assert set(hints) == NOTES_TOOLS
    assert hints["read_note"] == "read-only: runs without asking"
    assert hints["delete_note"] == "changes things: asks first"
    assert hints["touch_note"] == "changes things; trusted: runs without asking"
    # The same fault the engine reported, in the list: why it failed.
    assert gone == "gone" and gone_tools == [] and len(errors) == 1
    assert gone_status == f"failed: {errors[0]}"
    assert "/nonexistent/parley-mcp-server" in gone_status and "could not be used" in gone_status
    servers.select("gone")
    assert servers.details.text().startswith("gone failed: MCP server 'gone'")
    # An MCP tool that may change something has its "Ask before running" box.
    group = panel.tools
    assert group.asks["delete_note"].isChecked() and not group.asks["touch_note"].isChecked()
    assert "read_note" not in group.asks
    # The JSON text is edited by the list, not shown under Advanced.
    assert panel.tools.fields["tools.mcp_servers"].isHidden()
    assert panel.pending_changes().empty
    # A server that crashed in a call is not connected until the next call starts it.
    with pytest.raises(ToolRaised):
        host.call("crash", "{}")
    panel.set_tool_support(host.support())
    assert servers.rows()[0][1] == "not connected"
    servers.select("notes")
    assert servers.details.text() == "notes: not connected; it starts again on the next call."


def test_add_checks_its_input_and_add_and_remove_edit_the_setting(qtbot, tool_host, monkeypatch):
    host, _errors = tool_host
    monkeypatch.delenv("PARLEY_TEST_HOME_TOKEN", raising=False)
    config = _config([stdio_server(), GONE])
    panel = SettingsPanel(config)
    qtbot.addWidget(panel)
    _applied(panel, host, config)
    servers = panel.tools.mcp
    before = panel.tools.fields["tools.mcp_servers"].text()

    def rejected(fill, *expected: str) -> None:
        dialog = servers.open_add_dialog()
        fill(dialog)
        dialog.buttons.button(dialog.buttons.StandardButton.Ok).click()
        assert dialog.isVisible() and dialog.error.isVisible(), "a bad entry must keep the dialog open"
        for text in expected:
            assert text in dialog.error.text(), dialog.error.text()
        dialog.reject()
        assert panel.tools.fields["tools.mcp_servers"].text() == before
        assert panel.pending_changes().empty

    rejected(lambda d: (d.name.setText("my notes"), d.command.setText("notes-mcp")),
             "tools.mcp_servers[2].name", "letters, digits, - or _", "'my notes'")
    rejected(lambda d: (d.name.setText("notes"), d.command.setText("notes-mcp")),
             "two servers are named 'notes'")
    rejected(lambda d: d.name.setText("lamp"), "needs exactly one of command")
    rejected(lambda d: (d.name.setText("lamp"), d.http.setChecked(True), d.url.setText("ftp://lamp")),
             "tools.mcp_servers[2] (lamp).url", "http:// or https://", "'ftp://lamp'")
    rejected(lambda d: (d.name.setText("lamp"), d.command.setText("lamp-mcp"),
                        d.env.setPlainText("LAMP_TOKEN=${LAMP}\nno equals sign")),
             "Environment line 2 ('no equals sign')", "NAME=value")
    rejected(lambda d: (d.name.setText("lamp"), d.command.setText("lamp-mcp"),
                        d.arguments.setText('--root "unclosed')), "cannot be split")

    # A good one: in the list at once (not connected yet), a pending change that applies now.
    dialog = servers.open_add_dialog()
    dialog.name.setText("home")
    dialog.http.setChecked(True)
    dialog.url.setText("http://127.0.0.1:9/mcp")
    dialog.headers.setPlainText("Authorization: Bearer ${PARLEY_TEST_HOME_TOKEN}\n")
    dialog.buttons.button(dialog.buttons.StandardButton.Ok).click()
    assert not dialog.isVisible() and servers.dialog is None
    assert [(n, s) for n, s, _t in servers.rows()][-1] == ("home", "not connected yet")
    assert servers.details.text() == "home: not connected yet: Apply connects it."
    assert panel.pending.text() == "tools.mcp_servers: applies now"
    emitted: list[EngineConfig] = []
    panel.apply_requested.connect(emitted.append)
    panel.apply()
    assert len(emitted) == 1
    saved = parse_servers(emitted[0].tools.mcp_servers)
    assert [s.name for s in saved] == ["notes", "gone", "home"]
    assert saved[2].url == "http://127.0.0.1:9/mcp"
    assert saved[2].headers == (("Authorization", "Bearer ${PARLEY_TEST_HOME_TOKEN}"),)
    # Applied: the engine connects it, and the list says why it failed (the secret is not set).
    _applied(panel, host, emitted[0])
    home_status = servers.rows()[-1][1]
    assert home_status.startswith("failed:") and "PARLEY_TEST_HOME_TOKEN" in home_status
    assert servers.rows()[0][1] == f"up · {len(NOTES_TOOLS)} tools"  # kept running

    # Remove the selected server: gone from the list and from the setting.
    assert servers.rows()[-1][0] == "home" and servers.details.text().startswith("home failed: ")
    servers.select("gone")
    assert servers.remove_button.isEnabled()
    servers.remove_button.click()
    assert [n for n, _s, _t in servers.rows()] == ["notes", "home"]
    assert [s.name for s in parse_servers(panel.config_from_widgets().tools.mcp_servers)] == ["notes", "home"]
    assert panel.pending.text() == "tools.mcp_servers: applies now"
    # Removing the last one empties the setting.
    for name in ("notes", "home"):
        servers.select(name)
        servers.remove_button.click()
    assert servers.rows() == [] and panel.config_from_widgets().tools.mcp_servers == ""
    assert servers.details.text().startswith("No MCP server") and not servers.remove_button.isEnabled()


def test_a_tool_call_row_names_the_mcp_server_that_answered(qtbot, tool_host):
    """The conversation view, given the engine's tools, names an MCP tool's server in its
    row; a built-in's row names none."""
    from app.conversation.view import ConversationView
    from engine.backends.base import ToolCall

    host, _errors = tool_host
    host.configure(_config([stdio_server()]).tools, None)
    view = ConversationView()
    qtbot.addWidget(view)
    view.set_tool_support(host.support())
    note = ToolCall("call_1", "read_note", '{"title": "shopping"}')
    clock = ToolCall("call_2", "get_time", "{}")
    view.on_tool_started(0, 1, note)
    view.on_tool_finished(0, 1, note, host.call("read_note", note.arguments), None, 0.25)
    view.on_tool_started(0, 1, clock)
    rows = view.tool_calls()
    assert rows[0] == 'read_note · notes (MCP) (title="shopping") -> eggs, milk and bread (0.25 s)'
    assert rows[1] == "get_time() running…"
    row = view.item(1).tool_rows["call_1"]
    assert "notes (MCP)" in row.text() and "notes (MCP)" in row.accessibleName()
