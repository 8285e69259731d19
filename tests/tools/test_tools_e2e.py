"""The assistant's tools through the real pipeline (Silero VAD, tiny.en, Piper), the LLM
remote: ``tests/support/chat_server.py`` answers a message naming a tool with the
recorded stream of its call (``tests/server/data/tool_call_<name>.jsonl``), and a tool's
output with "Here is what the tool found: <output>."."""

from __future__ import annotations

import json

import pytest

from engine.pipeline.events import ToolCallFinished, ToolCallStarted, TurnFinished
from engine.tools.builtins import local_zone_name

pytestmark = pytest.mark.slow


def test_the_clock_tools_result_reaches_the_reply(make_engine, chat):
    run = make_engine()
    support = run.engine.tool_support()
    assert support.available and support.reason == ""
    assert "get_time" in {t.name for t in support.tools}
    finished = run.ask("What time is it?")
    started = run.of(ToolCallStarted)
    calls = run.of(ToolCallFinished)
    assert [c.call.name for c in started] == ["get_time"] == [c.call.name for c in calls]
    call = calls[0]
    assert call.error is None and call.seconds >= 0
    result = json.loads(call.result)
    assert result["time_zone"] == local_zone_name()
    assert result["time"] in finished.record.reply
    # The model was offered the tools and given the call's output.
    assert chat.requests[-1]["messages"][-1]["role"] == "tool"
    assert any(t["function"]["name"] == "get_time" for t in chat.requests[-1]["tools"])
    assert run.of(TurnFinished)
