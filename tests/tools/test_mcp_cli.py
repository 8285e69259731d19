"""``parley-cli tools list`` and ``tools call``: the tools tried without the LLM, an MCP
server's among them (``tests/support/mcp_servers.py``, over stdio)."""

from __future__ import annotations

import json

import pytest

from tests.support.cli import run_cli
from tests.support.mcp_servers import stdio_server

pytest.importorskip("mcp")


@pytest.fixture
def servers_flag(tmp_path):
    return ["--tools-mcp-servers", json.dumps([stdio_server(NOTES_TOKEN="${NOTES_SECRET}")]),
            "--tools-user-module", ""]


def test_tools_list_names_each_tool_its_server_and_whether_it_asks(servers_flag, tmp_path):
    done = run_cli("tools", "list", "--json", *servers_flag,
                   env={"NOTES_SECRET": "x", "PARLEY_DATA_DIR": str(tmp_path)}, timeout=120)
    assert done.returncode == 0, done.stderr
    rows = {row["name"]: row for row in json.loads(done.stdout)["tools"]}
    assert rows["get_time"]["source"] == "built-in" and not rows["get_time"]["asks_first"]
    assert rows["read_note"]["server"] == "notes" and not rows["read_note"]["asks_first"]
    assert rows["delete_note"]["source"] == "MCP server notes" and rows["delete_note"]["asks_first"]


def test_tools_call_runs_an_mcp_tool_and_a_failure_is_one_line(servers_flag, tmp_path, monkeypatch):
    monkeypatch.delenv("NOTES_SECRET", raising=False)
    env = {"NOTES_SECRET": "from-env", "PARLEY_DATA_DIR": str(tmp_path)}
    done = run_cli("tools", "call", "read_note", '{"title": "shopping"}', *servers_flag, env=env, timeout=120)
    assert (done.returncode, done.stdout) == (0, "eggs, milk and bread\n"), done.stderr
    assert run_cli("tools", "call", "token", *servers_flag, env=env, timeout=120).stdout == "from-env\n"
    crashed = run_cli("tools", "call", "crash", *servers_flag, env=env, timeout=120)
    assert crashed.returncode == 2 and "Traceback" not in crashed.stderr
    assert ("parley-cli: error: crash failed: the MCP server 'notes' failed while running crash"
            in crashed.stderr)
    unknown = run_cli("tools", "call", "nope", *servers_flag, env=env, timeout=120)
    assert unknown.returncode == 2 and "there is no tool 'nope'; the tools are: " in unknown.stderr
    missing = run_cli("tools", "list", *servers_flag, env={"PARLEY_DATA_DIR": str(tmp_path)}, timeout=120)
    assert missing.returncode == 0 and "read_note" not in missing.stdout
    assert "needs the environment variable NOTES_SECRET, which is not set" in missing.stderr



def test_a_long_result_reaches_the_model_cut_with_the_cut_said(servers_flag, tmp_path):
    from engine.tools.runner import MAX_RESULT_CHARS, cut_for_model

    env = {"NOTES_SECRET": "x", "PARLEY_DATA_DIR": str(tmp_path)}
    done = run_cli("tools", "call", "long_text", json.dumps({"characters": 3 * MAX_RESULT_CHARS}),
                   *servers_flag, env=env, timeout=120)
    whole = done.stdout.rstrip("\n")
    assert done.returncode == 0 and len(whole) == 3 * MAX_RESULT_CHARS, done.stderr  # you asked: all of it
    told = cut_for_model(whole)
    assert told.startswith(whole[:MAX_RESULT_CHARS]) and len(told) < MAX_RESULT_CHARS + 100
    assert told.endswith(f"(cut: the result had {3 * MAX_RESULT_CHARS} characters; only the first "
                         f"{MAX_RESULT_CHARS} are shown)")
    assert cut_for_model("short") == "short"
