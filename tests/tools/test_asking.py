"""Which tool calls need the user's yes: a tool with side effects always, one whose
result is stored conversations while the LLM is remote (its server would receive them),
a user's tool unless it declares ``side_effects: false``; the built-ins say which they are."""

from __future__ import annotations

import pytest

from engine.tools.builtins import built_in_tools
from engine.tools.registry import ToolInfo, ToolSupport, asks_first
from engine.tools.timers import TimerBook
from engine.tools.user_module import load_user_module


@pytest.fixture
def infos(tmp_path):
    tools = built_in_tools(TimerBook(tmp_path / "timers.json"), lambda: tmp_path / "history.db")
    return {name: tool.info for name, tool in tools.items()}


def test_only_the_history_search_returns_stored_conversations(infos):
    assert [name for name, info in infos.items() if info.returns_history] == ["search_history"]


def test_a_remote_llm_makes_the_history_search_ask_first(infos):
    local = {name for name, info in infos.items() if asks_first(info, remote_llm=False)}
    remote = {name for name, info in infos.items() if asks_first(info, remote_llm=True)}
    assert local == {"set_timer", "set_reminder", "cancel_timer"}
    assert remote == local | {"search_history"}
    assert ToolSupport(True, "", tuple(infos.values()), remote_llm=True).asks_first(infos["search_history"])
    assert not ToolSupport(True, "", tuple(infos.values())).asks_first(infos["search_history"])


def test_a_user_tool_that_says_nothing_has_side_effects(tmp_path):
    path = tmp_path / "mine.py"
    path.write_text('''
TOOLS = [{"name": "say_nothing", "description": "Says nothing of its effects."},
         {"type": "function", "function": {"name": "wrapped"}},
         {"name": "pure", "description": "Declares it has none.", "side_effects": False},
         {"type": "function", "function": {"name": "pure_wrapped"}, "side_effects": False}]

def say_nothing(): pass
def wrapped(): pass
def pure(): pass
def pure_wrapped(): pass
''', "utf-8")
    tools, _functions = load_user_module(str(path))
    assert {t.name: t.side_effects for t in tools} == {
        "say_nothing": True, "wrapped": True, "pure": False, "pure_wrapped": False}
    unsure = ToolInfo("say_nothing", "", True, "mine.py")
    assert asks_first(unsure, remote_llm=False)
