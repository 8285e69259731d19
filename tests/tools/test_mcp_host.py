"""The MCP servers' tools in the engine's ``ToolHost`` (no LLM: as ``parley-cli tools``
runs it): trusted names, a server that fails beside one that works, a changed list."""

from __future__ import annotations

import json

import pytest

from engine.config import EngineConfig
from engine.errors import ConfigError
from tests.support.tools import tool_host_with_errors
from tests.support.mcp_servers import stdio_server
from tests.support.threads import wait_for

pytest.importorskip("mcp")


@pytest.fixture
def tool_host(data_dir):
    """A ToolHost and the EngineError messages it emitted."""
    with tool_host_with_errors() as made:
        yield made


def _tools(servers: list[dict], trusted: str = ""):
    return EngineConfig().with_overrides({"tools.mcp_servers": json.dumps(servers),
                                          "tools.trusted": trusted}).tools


def test_trusted_may_name_an_mcp_tool_and_an_unknown_name_lists_them(tool_host):
    host, _errors = tool_host
    host.configure(_tools([stdio_server()], "delete_note"), None)
    assert {"read_note", "delete_note", "get_time"} <= {t.name for t in host.support().tools}
    with pytest.raises(ConfigError, match=r"tools\.trusted names 'delete_notes', which is not a tool; "
                                          r"the tools are: .*delete_note"):
        host.configure(_tools([stdio_server()], "delete_notes"), None)


def test_a_server_that_fails_is_reported_and_the_others_tools_are_offered(tool_host):
    host, errors = tool_host
    # The trusted name may be a tool of the server that failed: not an error then.
    host.configure(_tools([stdio_server(), {"name": "gone", "command": "/nonexistent/mcp"}],
                          "gone_tool"), None)
    assert "read_note" in {t.name for t in host.support().tools}
    assert len(errors) == 1 and errors[0].startswith("MCP server 'gone' (/nonexistent/mcp)")


def test_a_changed_list_is_offered_and_a_collision_gets_the_server_prefix(tool_host):
    host, _errors = tool_host
    host.configure(_tools([stdio_server("a"), stdio_server("b")]), None)
    names = {t.name: t.server for t in host.support().tools}
    assert names["a__read_note"] == "a" and names["b__read_note"] == "b" and "read_note" not in names
    assert host.call("a__grow", "{}") == "grown"
    assert wait_for(lambda: "extra" in {t.name for t in host.support().tools}), "the new tool was not offered"
    assert json.loads(host.call("extra", "{}")) == {"extra": True}


def test_stopping_ends_an_mcp_call_in_flight_at_once(tool_host):
    import threading
    import time

    from engine.tools.worker import ToolRaised

    host, _errors = tool_host
    host.configure(EngineConfig().with_overrides({"tools.mcp_servers": json.dumps([stdio_server()]),
                                                  "tools.timeout_s": 60.0}).tools, None)
    raised: list[Exception] = []

    def hang() -> None:
        try:
            host.call("hang", "{}")
        except ToolRaised as exc:
            raised.append(exc)

    caller = threading.Thread(target=hang)
    caller.start()
    time.sleep(1.0)  # the call is in flight
    start = time.monotonic()
    assert host.detach() == []
    caller.join(5.0)
    assert not caller.is_alive() and time.monotonic() - start < 5.0  # not the 60 s timeout
    assert [str(e) for e in raised] == ["hang was stopped: the engine is stopping"]
    host.attach([])  # started again: calls run
    assert host.call("read_note", '{"title": "shopping"}') == "eggs, milk and bread"
