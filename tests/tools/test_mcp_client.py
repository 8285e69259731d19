"""MCP servers as tool sources (``engine/tools/mcp_client.py``) against real servers
written with the ``mcp`` SDK (``tests/support/mcp_servers.py``): stdio and streamable HTTP."""

from __future__ import annotations

import json
import os
import threading
import time

import pytest

from engine.tools.mcp_client import McpServers, McpTool
from engine.config_mcp import parse_servers
from engine.tools.mcp_naming import mcp_tools, name_tools
from engine.tools.worker import ToolRaised, ToolTimeout
from tests.support.mcp_servers import HttpNotes, stdio_server

pytest.importorskip("mcp")


class Changes:
    """Counts ``on_change`` calls; ``wait`` for the next one."""

    def __init__(self) -> None:
        self.count = 0
        self._cond = threading.Condition()

    def __call__(self) -> None:
        with self._cond:
            self.count += 1
            self._cond.notify_all()

    def wait(self, above: int, timeout: float = 10.0) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self.count > above, timeout)


@pytest.fixture
def servers():
    made: list[McpServers] = []

    def make(entries: list[dict]) -> tuple[McpServers, Changes, list[str]]:
        changes = Changes()
        connected = McpServers(changes)
        made.append(connected)
        return connected, changes, connected.configure(parse_servers(entries))

    yield make
    for connected in made:
        connected.close()


def test_a_stdio_servers_tools_are_listed_with_their_safety(servers, monkeypatch):
    monkeypatch.setenv("NOTES_SECRET", "s3cret")
    connected, _changes, faults = servers([stdio_server(NOTES_TOKEN="token-${NOTES_SECRET}")])
    assert faults == []
    tools = mcp_tools(connected, {}, lambda: 5.0)
    assert {"read_note", "delete_note", "touch_note", "grow"} <= set(tools)
    info = {name: tool.info for name, tool in tools.items()}
    # Read-only runs without asking; destructive, and no annotation at all, ask first.
    assert not info["read_note"].side_effects
    assert info["delete_note"].side_effects and info["touch_note"].side_effects
    assert info["read_note"].source == "MCP server notes" and info["read_note"].server == "notes"
    assert tools["read_note"].spec.parameters["required"] == ["title"]
    assert tools["read_note"].run is not None
    assert tools["read_note"].run({"title": "shopping"}) == "eggs, milk and bread"
    # The secret came from Parley's environment, not from the config.
    assert connected.call("notes", "token", {}, 5.0) == "token-s3cret"


def test_a_missing_secret_is_a_clear_fault_and_offers_no_tools(servers, monkeypatch):
    monkeypatch.delenv("NOTES_SECRET", raising=False)
    connected, _changes, faults = servers([stdio_server(NOTES_TOKEN="${NOTES_SECRET}")])
    assert faults == ["MCP server 'notes': env.NOTES_TOKEN needs the environment variable "
                      "NOTES_SECRET, which is not set"]
    assert connected.listings() == ()


def test_an_http_servers_tools_are_listed_and_its_header_secret_is_sent(servers, monkeypatch):
    monkeypatch.setenv("HOME_TOKEN", "abc123")
    http = HttpNotes()
    try:
        connected, _changes, faults = servers([{"name": "home", "url": http.url,
                                                "headers": {"Authorization": "Bearer ${HOME_TOKEN}"}}])
        assert faults == []
        assert {t.name for t in connected.listings()} >= {"read_note", "delete_note"}
        assert connected.call("home", "token", {}, 5.0) == "Bearer abc123"
        assert connected.call("home", "read_note", {"title": "shopping"}, 5.0) == "eggs, milk and bread"
    finally:
        http.close()


def test_a_server_that_cannot_start_is_reported(servers):
    _connected, _changes, faults = servers([{"name": "gone", "command": "/nonexistent/mcp-server"}])
    assert len(faults) == 1 and faults[0].startswith("MCP server 'gone' (/nonexistent/mcp-server) "
                                                      "could not be used:")


def test_results_give_text_and_structure_and_name_media(servers):
    connected, _changes, _faults = servers([stdio_server()])
    text = connected.call("notes", "picture", {}, 5.0)
    assert text.splitlines() == ["the garden at noon", "[an image (image/png), not shown]",
                                 json.dumps({"flowers": 12})]
    assert "iVBOR" not in text  # the image's bytes are not given to the model


def test_a_tool_error_is_the_models_to_hear_and_the_server_stays(servers):
    connected, _changes, _faults = servers([stdio_server()])
    with pytest.raises(ToolRaised, match=r"read_note \(MCP server 'notes'\) reported an error"):
        connected.call("notes", "read_note", {}, 5.0)  # no title
    assert connected.call("notes", "read_note", {"title": "x"}, 5.0) == "there is no note 'x'"


def test_a_crashing_server_ends_only_that_call_and_is_restarted_on_the_next(servers):
    connected, changes, _faults = servers([stdio_server()])
    with pytest.raises(ToolRaised, match=r"the MCP server 'notes' failed while running crash .* starts "
                                         r"again on the next call"):
        connected.call("notes", "crash", {}, 5.0)
    seen = changes.count
    assert connected.call("notes", "read_note", {"title": "shopping"}, 5.0) == "eggs, milk and bread"
    assert changes.count > seen  # re-listed after the restart


def test_a_server_answering_garbage_ends_only_that_call_and_is_restarted(servers):
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("the garbage tool finds its wire through Linux's /proc")
    connected, _changes, _faults = servers([stdio_server()])
    with pytest.raises(ToolRaised) as info:
        connected.call("notes", "garbage", {}, 5.0)
    assert str(info.value).startswith("the MCP server 'notes' failed while running garbage "
                                      "(ValidationError: ")
    assert "\n" not in str(info.value)
    assert connected.call("notes", "read_note", {"title": "shopping"}, 5.0) == "eggs, milk and bread"


def test_a_hanging_server_is_stopped_at_the_timeout_and_restarted_on_the_next_call(servers):
    connected, _changes, _faults = servers([stdio_server()])
    start = time.monotonic()
    with pytest.raises(ToolTimeout, match="did not answer hang within 1 s"):
        connected.call("notes", "hang", {}, 1.0)
    assert time.monotonic() - start < 5.0
    assert connected.call("notes", "read_note", {"title": "shopping"}, 5.0) == "eggs, milk and bread"


def test_a_list_changed_notice_lists_the_tools_again(servers):
    connected, changes, _faults = servers([stdio_server()])
    assert "extra" not in {t.name for t in connected.listings()}
    seen = changes.count
    assert connected.call("notes", "grow", {}, 5.0) == "grown"
    assert changes.wait(seen), "on_change was not called"
    assert "extra" in {t.name for t in connected.listings()}
    assert json.loads(connected.call("notes", "extra", {}, 5.0)) == {"extra": True}  # said once


def test_names_get_the_server_prefix_only_where_they_collide():
    def tool(server: str, name: str) -> McpTool:
        return McpTool(server, name, "", {"type": "object"}, True)

    listed = (tool("a", "search"), tool("b", "search"), tool("a", "get_time"), tool("a", "notes.read"),
              tool("b", "unique"))
    named = name_tools(listed, {"get_time"})
    assert {name: (t.server, t.name) for name, t in named.items()} == {
        "a__search": ("a", "search"), "b__search": ("b", "search"),
        "a__get_time": ("a", "get_time"), "notes_read": ("a", "notes.read"), "unique": ("b", "unique")}


def test_closing_ends_the_loop_thread_and_the_server_process(servers):
    from tests.support.threads import parley_threads

    connected, _changes, _faults = servers([stdio_server()])
    assert "parley-mcp" in parley_threads()
    connected.close()
    assert "parley-mcp" not in parley_threads()
