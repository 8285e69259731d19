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


def test_a_2_s_timer_fires_with_a_chime_and_a_longer_one_outlives_a_restart(make_engine, registry):
    from engine.engine import Engine
    from engine.pipeline.events import TimerDue
    from engine.runtime.hub import HubStatus
    from engine.tools.host import CHIME_TURN

    run = make_engine(**{"tools.trusted": "set_timer, set_reminder"})
    run.ask("Set a timer for my tea.")  # the recorded call: 2 s, label "tea"
    run.ask("Set a reminder for the dentist.")  # the recorded call: 2 hours
    kinds = {t.kind: t for t in run.engine.timers()}
    assert set(kinds) <= {"timer", "reminder"} and "reminder" in kinds
    due = run.wait_for(lambda: run.of(TimerDue), 10, "the timer to fire")
    assert [(d.label, d.unit) for d in due] == [("tea", 0)]
    run.wait_for(lambda: any(p.turn_id == CHIME_TURN and p.samples_played
                             for p in run.sink.history()), 5, "the chime")
    assert [t.kind for t in run.engine.timers()] == ["reminder"]
    reminder = kinds["reminder"]
    assert reminder.label == "call the dentist"
    run.close()
    # A new engine (the app restarted) lists it from the timers file.
    again = Engine(run.engine.config, registry=registry, hub=HubStatus(offline=True))
    assert again.timers() == (reminder,)
    assert again.cancel_timer(reminder.timer_id) and not again.cancel_timer(reminder.timer_id)
    assert Engine(run.engine.config, registry=registry, hub=HubStatus(offline=True)).timers() == ()


def test_the_history_search_tool_finds_an_earlier_turn_once_allowed(make_engine, chat):
    from engine.history.recorder import record_history
    from engine.tools.runner import NOT_ASKED

    run = make_engine()
    # The LLM is remote: its server would receive the stored turns, so the tool asks first.
    assert run.engine.tool_support().remote_llm
    recorder = record_history(run.engine, "desktop")
    try:
        run.ask("Tell me about the castle in Edinburgh.")
        assert recorder.flush()
        asked = len(chat.requests)
        refused = run.ask("Search the history for it.")  # nobody to ask: not run
        assert run.of(ToolCallFinished)[-1].error == NOT_ASKED and NOT_ASKED in refused.record.reply
        # The server was sent no stored turn: the tool's output is only the refusal.
        outputs = [m["content"] for body in chat.requests[asked:] for m in body["messages"]
                   if m["role"] == "tool"]
        assert outputs and all("Edinburgh" not in text for text in outputs)
        questions = []
        run.engine.set_tool_confirmer(lambda call, info: questions.append(
            (call.name, info.returns_history, info.side_effects)) or True)
        finished = run.ask("Search the history for it.")  # the recorded call: query "Edinburgh"
    finally:
        recorder.close()
    assert questions == [("search_history", True, False)]
    call = run.of(ToolCallFinished)[-1]
    assert call.call.name == "search_history" and call.error is None
    turns = json.loads(call.result)["turns"]
    assert "Tell me about the castle in Edinburgh." in [t["user"] for t in turns]
    assert "castle in Edinburgh" in finished.record.reply


USER_MODULE = '''
"""Tools of a user's own (a test module)."""
import time

TOOLS = [
    {"name": "tell_fortune", "description": "Tell a fortune for a star sign.",
     "parameters": {"type": "object", "properties": {"sign": {"type": "string"}}},
     "side_effects": False},
    {"type": "function", "function": {"name": "explode_now", "description": "Always fails."},
     "side_effects": False},
    {"name": "wait_forever", "description": "Never returns.", "side_effects": False},
]


def tell_fortune(sign):
    return {"fortune": f"a fine week ahead for {sign}"}


def explode_now():
    raise RuntimeError("the fuse was lit")


def wait_forever():
    time.sleep(3600)
'''


@pytest.fixture
def user_module(tmp_path):
    path = tmp_path / "my_tools.py"
    path.write_text(USER_MODULE, "utf-8")
    return path


def _heard(run, turn: int) -> str:
    """Every word played in ``turn``'s audio (the acknowledgement and apology included)."""
    return run.unit.playback.heard_text(turn, 1e6)


def test_a_user_modules_tool_is_loaded_and_called(make_engine, user_module):
    run = make_engine(**{"tools.user_module": str(user_module)})
    infos = {t.name: t for t in run.engine.tool_support().tools}
    assert infos["tell_fortune"].source == "my_tools.py" and not infos["tell_fortune"].side_effects
    assert infos["get_time"].source == "built-in"
    finished = run.ask("Please tell my fortune.")
    call = run.of(ToolCallFinished)[-1]
    assert (call.call.name, call.error) == ("tell_fortune", None)
    assert json.loads(call.result) == {"fortune": "a fine week ahead for leo"}
    assert "a fine week ahead for leo" in finished.record.reply
    # The acknowledgement opened the turn the answer came in, and was played first.
    assert _heard(run, finished.record.turn_id) == f"One moment. {finished.record.reply}"


@pytest.mark.parametrize("question, name, error", [
    ("Explode it.", "explode_now", "RuntimeError: the fuse was lit"),
    ("Wait for it.", "wait_forever", "wait_forever took more than 1 s and was stopped"),
])
def test_a_raising_or_hanging_tool_ends_its_call_and_the_next_turn_is_answered(
        make_engine, user_module, chat, question, name, error):
    run = make_engine(**{"tools.user_module": str(user_module), "tools.timeout_s": 1.0})
    finished = run.ask(question)
    call = run.of(ToolCallFinished)[-1]
    assert call.call.name == name and call.error == error
    assert json.loads(call.result) == {"error": error}
    assert error in finished.record.reply  # the model was given the error
    # The acknowledgement and the apology were both spoken before the model's reply.
    apology = "Sorry, that took too long." if "took more" in error else "Sorry, that did not work."
    assert _heard(run, finished.record.turn_id) == f"One moment. {apology} {finished.record.reply}"
    assert run.ask("Hello there.").record.reply == chat.reply
    # The worker was restarted after a timeout: the module's tools still work.
    run.ask("Please tell my fortune.")
    assert run.of(ToolCallFinished)[-1].error is None


def test_the_confirmer_blocks_a_side_effecting_tool_until_it_answers(make_engine):
    import threading

    run = make_engine()
    asked: list[tuple[str, bool]] = []
    answer = threading.Event()

    def confirm(call, info):
        asked.append((call.name, info.side_effects))
        assert threading.current_thread().name == "parley-tools"
        answer.wait(30)
        return True

    run.engine.set_tool_confirmer(confirm)
    run.engine.say("Set a timer for my tea.")
    run.wait_for(lambda: asked, 30, "the confirmer to be asked")
    started = run.of(ToolCallStarted)
    assert [s.call.name for s in started] == ["set_timer"]
    assert run.of(ToolCallFinished) == [] and run.engine.timers() == ()
    answer.set()
    call = run.wait_for(lambda: run.of(ToolCallFinished), 30, "the call to end")[0]
    assert call.error is None and [t.label for t in run.engine.timers()] == ["tea"]
    assert asked == [("set_timer", True)]
    run.wait_for(lambda: any("tea" in e.record.reply for e in run.of(TurnFinished)), 30,
                 "the reply after the timer was set")
    # Declined: the call ends with the error, the model is told, nothing is set.
    run.engine.set_tool_confirmer(lambda call, info: False)
    finished = run.ask("Set a reminder for the dentist.")
    call = run.of(ToolCallFinished)[-1]
    assert call.error == "declined by the user" and "declined by the user" in finished.record.reply
    assert all(t.kind == "timer" for t in run.engine.timers())  # the 2 s one may have fired
    # No confirmer: not run, and the model is told nobody could be asked (not that the
    # user said no).
    from engine.tools.runner import NOT_ASKED

    run.engine.set_tool_confirmer(None)
    refused = run.ask("Set a reminder for the dentist.")
    assert run.of(ToolCallFinished)[-1].error == NOT_ASKED and "declined" not in refused.record.reply
    assert "nobody could be asked" in refused.record.reply


def test_an_interrupt_while_a_tool_runs_leaves_its_output_for_the_next_turn(make_engine, user_module, chat):
    run = make_engine(**{"tools.user_module": str(user_module), "tools.timeout_s": 2.0})
    run.engine.say("Wait for it.")
    run.wait_for(lambda: run.of(ToolCallStarted), 30, "the call to start")
    run.engine.interrupt()  # Esc while the tool runs: the acknowledgement is cut off
    call = run.wait_for(lambda: run.of(ToolCallFinished), 30, "the call to end")[0]
    assert call.error == "wait_forever took more than 2 s and was stopped"
    asked = len(chat.requests)
    finished = run.ask("Hello there.")
    assert finished.record.reply == chat.reply
    assert len(chat.requests) == asked + 1  # the tool's output was not answered on its own
    messages = chat.requests[-1]["messages"]
    assert [m["role"] for m in messages[-3:]] == ["assistant", "tool", "user"]
    assert json.loads(messages[-2]["content"]) == {"error": call.error}


def test_stopping_the_engine_ends_a_user_tool_in_flight_at_once(make_engine, user_module):
    from tests.support.threads import parley_threads

    run = make_engine(**{"tools.user_module": str(user_module), "tools.timeout_s": 60.0})
    run.engine.say("Wait for it.")
    run.wait_for(lambda: run.of(ToolCallStarted), 30, "the call to start")
    assert run.engine.stop() == []  # joined well before the tool's 60 s
    assert not {"parley-tools", "parley-timers"} & set(parley_threads())
    call = run.of(ToolCallFinished)[-1]
    assert call.call.name == "wait_forever" and "the engine is stopping" in (call.error or "")


def test_a_spoken_question_calls_the_clock_and_the_answer_is_spoken(make_engine):
    from engine.audio.decode import resample
    from engine.audio.file_source import FileSource
    from engine.pipeline.events import FinalTranscript

    def spoken(engine):
        audio, rate = engine.preview_voice("What time is it?")
        # At the speaking pace, with silence after it: the unit runs through the tool round
        # (the test stops it once the answer is heard).
        return FileSource(resample(audio, rate, 16000), realtime=True, trailing_silence_s=60.0)

    run = make_engine(source=spoken)
    heard = run.wait_for(lambda: run.of(FinalTranscript), 60, "the question to be heard")
    assert "time" in heard[0].text.lower()
    call = run.wait_for(lambda: run.of(ToolCallFinished), 60, "the clock to be called")[0]
    assert call.call.name == "get_time" and call.error is None
    hour_minute = json.loads(call.result)["time"]
    finished = run.wait_for(lambda: next((e for e in run.of(TurnFinished) if hour_minute in e.record.reply),
                                         None), 60, "the answer")
    assert run.sink.first_heard(finished.record.turn_id) is not None
