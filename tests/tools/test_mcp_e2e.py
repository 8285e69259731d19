"""An MCP server's tools through the real pipeline (Silero VAD, tiny.en, Piper), the LLM
remote and scripted (``tests/support/chat_server.py``, its tool calls recorded here), the
server a real one written with the ``mcp`` SDK (``tests/support/mcp_servers.py``)."""

from __future__ import annotations

import json

import pytest

from engine.config import EngineConfig
from engine.engine import Engine
from engine.pipeline.events import EngineError, ToolCallFinished
from engine.runtime.hub import HubStatus
from engine.tools.runner import APOLOGY, DECLINED, NOT_ASKED
from tests.support.chat_server import ChatServer
from tests.support.mcp_servers import stdio_server
from tests.support.tools import ToolEngine

pytest.importorskip("mcp")
pytestmark = pytest.mark.slow

#: The recorded calls: what the scripted LLM calls when the user's words name the tool.
CALLS = {"read_note": {"title": "shopping"}, "delete_note": {"title": "shopping"}, "crash": {}}


@pytest.fixture
def chat(tmp_path):
    recordings = tmp_path / "recordings"
    recordings.mkdir()
    for name, arguments in CALLS.items():
        call = {"index": 0, "id": f"call_{name}", "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)}}
        chunks = [{"choices": [{"index": 0, "delta": {"role": "assistant", "content": None,
                                                      "tool_calls": [call]}, "finish_reason": None}]},
                  {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}]
        (recordings / f"tool_call_{name}.jsonl").write_text(
            "\n".join(json.dumps(c) for c in chunks), "utf-8")
    server = ChatServer(recordings=recordings)
    yield server
    server.close()


@pytest.fixture
def make_engine(registry, chat, data_dir):
    made: list[ToolEngine] = []

    def make(source=None) -> ToolEngine:
        config = EngineConfig().with_overrides({
            "turns.barge_in": "off", "llm.backend": "openai", "llm.base_url": chat.url,
            "llm.model": chat.model, "tools.timeout_s": 5.0,
            "tools.mcp_servers": json.dumps([stdio_server()])})
        engine = Engine(config, registry=registry, hub=HubStatus(offline=True))
        engine.load()
        run = ToolEngine(engine, source(engine) if source else None)
        made.append(run)
        return run

    yield make
    for run in made:
        run.close()


def test_a_read_only_tool_runs_and_a_destructive_one_asks_first(make_engine, chat):
    run = make_engine()
    support = run.engine.tool_support()
    infos = {t.name: t for t in support.tools}
    assert support.available and not run.of(EngineError)
    assert infos["read_note"].server == "notes" and infos["get_time"].server == ""
    # Read-only: no confirmer, and it runs.
    finished = run.ask("Read my shopping notes.")
    call = run.of(ToolCallFinished)[-1]
    assert (call.call.name, call.error, call.result) == ("read_note", None, "eggs, milk and bread")
    assert "eggs, milk and bread" in finished.record.reply
    assert any(t["function"]["name"] == "delete_note" for t in chat.requests[-1]["tools"])
    # Destructive: nobody to ask, so it is not run; then declined; then allowed.
    run.ask("Delete my shopping notes.")
    assert run.of(ToolCallFinished)[-1].error == NOT_ASKED
    asked = []
    run.engine.set_tool_confirmer(lambda call, info: asked.append((call.name, info.source)) or False)
    run.ask("Delete my shopping notes.")
    assert run.of(ToolCallFinished)[-1].error == DECLINED
    run.engine.set_tool_confirmer(lambda call, info: True)
    run.ask("Delete my shopping notes.")
    assert run.of(ToolCallFinished)[-1].result == "deleted shopping"
    assert asked == [("delete_note", "MCP server notes")]
    finished = run.ask("Read my shopping notes.")
    assert run.of(ToolCallFinished)[-1].result == "there is no note 'shopping'"


def test_a_crash_ends_the_call_with_an_apology_and_the_next_call_restarts_the_server(make_engine):
    run = make_engine()
    finished = run.ask("Crash it now.")
    call = run.of(ToolCallFinished)[-1]
    assert call.call.name == "crash" and "the MCP server 'notes' failed while running crash" in call.error
    assert "starts again on the next call" in finished.record.reply  # the model was told
    heard = run.unit.playback.heard_text(finished.record.turn_id, 1e6)
    assert heard == f"One moment. {APOLOGY} {finished.record.reply}"
    run.ask("Read my shopping notes.")
    assert run.of(ToolCallFinished)[-1].result == "eggs, milk and bread"


def test_a_spoken_question_calls_an_mcp_tool_and_its_result_is_spoken(make_engine):
    from engine.audio.decode import resample
    from engine.audio.file_source import FileSource
    from engine.pipeline.events import FinalTranscript, TurnFinished

    def spoken(engine):
        audio, rate = engine.preview_voice("Read my shopping note.")
        return FileSource(resample(audio, rate, 16000), realtime=True, trailing_silence_s=60.0)

    run = make_engine(source=spoken)
    heard = run.wait_for(lambda: run.of(FinalTranscript), 60, "the question to be heard")
    assert "note" in heard[0].text.lower()
    call = run.wait_for(lambda: run.of(ToolCallFinished), 60, "the MCP tool to be called")[0]
    assert (call.call.name, call.error, call.result) == ("read_note", None, "eggs, milk and bread")
    finished = run.wait_for(lambda: next((e for e in run.of(TurnFinished)
                                          if "eggs, milk and bread" in e.record.reply), None),
                            60, "the answer")
    assert run.sink.first_heard(finished.record.turn_id) is not None
    assert "eggs, milk and bread" in run.unit.playback.heard_text(finished.record.turn_id, 1e6)
