"""RealtimeSession with fakes: client events in, server events out, no models, no sockets."""

from __future__ import annotations

import asyncio
import base64
import json
import time

import numpy as np
import pytest

from engine.audio.base import InputMarker
from engine.config import BargeIn, EndOfTurn, EngineConfig
from engine.errors import ConfigError
from engine.backends.base import ToolCall
from engine.measures import Figure, Mark
from engine.pipeline.events import (EngineError, FinalTranscript, PartialTranscript, ReplyText, ToolCallsMade,
                                    TurnCancelled, TurnFinished, UserSpeaking)
from engine.pipeline.metrics import TurnRecord
from engine.backends.voices import Voice, VoiceList, openai_voice
from engine.pipeline.chat_history import ChatHistory, ItemKind
from engine.pipeline.messages import PLAIN_REPLY, ReplyRequest
from engine.server.limits import TokenBucket
from engine.server.pacing import ToolCallPacing
from engine.server.session_update import Capabilities
from engine.server.protocol import RealtimeSession
from engine.server.server_settings import ServerSettings
from engine.audio.pcm import to_pcm16 as float_to_pcm16
from engine.server.stream_audio import StreamSource
from tests.support.server import text_item


class FakeUnit:
    """What a session needs of a PipelineUnit, recording the calls."""

    def __init__(self, session_box: list | None = None) -> None:
        self.config = EngineConfig().with_overrides({"turns.live_transcription": True})
        self.chat_history = ChatHistory()
        self.applied: list[EngineConfig] = []
        self.said: list[str] = []
        self.requests: list[ReplyRequest] = []
        self.defaults = PLAIN_REPLY
        self.truncated: list[tuple[int, float]] = []
        self.interrupts = 0
        self.fail_apply = False
        self.during_say = None  # called inside say(), before its turn id is returned

    def apply(self, config, models):
        if self.fail_apply:
            raise RuntimeError("boom")
        self.config = config
        self.applied.append(config)

    def say(self, text, request=PLAIN_REPLY):
        self.said.append(text)
        self.requests.append(request)
        if self.during_say:
            self.during_say(100 + len(self.said))
        return 100 + len(self.said)

    def interrupt(self):
        self.interrupts += 1

    def set_reply_defaults(self, request):
        self.defaults = request

    def truncate_reply(self, turn, seconds):
        self.truncated.append((turn, seconds))
        return "heard words"


class FakeTts:
    """A TTS with two voices, ``auto`` and ``joe``; OpenAI's names map to ``auto``."""

    def voice_for(self, name):
        voice = openai_voice(name, VoiceList((Voice("auto", "auto"), Voice("joe", "Joe")))) or name
        if voice not in ("auto", "joe"):
            raise ConfigError(f"'tts.voice' = {voice!r} is not a speaker of this voice")
        return voice


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


async def run_now(fn, *args):
    return fn(*args)


class Timers:
    """A ``call_later`` the test runs by hand."""

    def __init__(self) -> None:
        self.due: list[tuple[float, object]] = []

    def __call__(self, delay: float, callback) -> None:
        self.due.append((delay, callback))

    def run(self) -> None:
        due, self.due = self.due, []
        for _delay, callback in due:
            callback()


def make(settings: ServerSettings | None = None, clock=None, source: StreamSource | None = None,
         capabilities: Capabilities | None = None, pacing: ToolCallPacing | None = None):
    """A session on a fake unit. Function calls are not paced unless ``pacing`` says so."""
    sent: list[dict] = []
    pacing = pacing or ToolCallPacing(clock or time.monotonic, gap_s=0.0)
    session = RealtimeSession(sent.append, settings or ServerSettings(), run_now,
                              **({"clock": clock} if clock else {}), pacing=pacing)
    unit = FakeUnit()
    source = source or StreamSource()
    session.attach(unit, source, unit_number=3, voice_for=FakeTts().voice_for,
                   parley={"notes": ["a note"]}, capabilities=capabilities)
    return session, unit, source, sent


def handle(session, event) -> None:
    asyncio.run(session.handle_text(event if isinstance(event, str) else json.dumps(event)))


def types(sent) -> list[str]:
    return [e["type"] for e in sent]


def last_error(sent) -> dict:
    errors = [e for e in sent if e["type"] == "error"]
    assert errors, f"no error event in {types(sent)}"
    return errors[-1]["error"]


def pcm_b64(seconds: float) -> str:
    return base64.b64encode(float_to_pcm16(np.zeros(round(seconds * 24000), np.float32))).decode()


# ---------------------------------------------------------------------- session
def test_attach_sends_session_created_with_the_units_settings():
    _session, _unit, _source, sent = make()
    assert types(sent) == ["session.created"]
    session = sent[0]["session"]
    assert session["type"] == "realtime" and session["id"].startswith("sess_")
    assert session["audio"]["input"]["format"] == {"type": "audio/pcm", "rate": 24000}
    assert session["audio"]["input"]["turn_detection"] == {
        "type": "server_vad", "threshold": 0.5, "silence_duration_ms": 300, "prefix_padding_ms": 300,
        "idle_timeout_ms": None, "create_response": True, "interrupt_response": True}
    assert session["parley"] == {"notes": ["a note"], "unit": 3, "live_transcription": True,
                                 "tool_support": Capabilities().tool_support,
                                 "session_notes": [], "ignored": []}
    assert session["output_modalities"] == ["audio"] and session["tools"] == []


def test_session_update_maps_server_vad_instructions_and_voice():
    session, unit, _source, sent = make()
    handle(session, {"type": "session.update", "session": {
        "type": "realtime", "instructions": "Be brief.",
        "audio": {"input": {"format": {"type": "audio/pcm", "rate": 24000},
                            "turn_detection": {"type": "server_vad", "threshold": 0.7,
                                               "silence_duration_ms": 500, "prefix_padding_ms": 200}},
                  "output": {"voice": "joe", "speed": 1.2}}}})
    assert types(sent)[-1] == "session.updated"
    config = unit.config
    assert (config.vad.threshold, config.vad.min_silence_ms, config.vad.pad_ms) == (0.7, 500, 200)
    assert config.llm.system_prompt == "Be brief."
    assert (config.tts.voice, config.tts.speed) == ("joe", 1.2)
    assert config.turns.end_of_turn is EndOfTurn.SILENCE
    assert sent[-1]["session"]["instructions"] == "Be brief."
    assert sent[-1]["session"]["audio"]["input"]["turn_detection"]["threshold"] == 0.7


def test_turn_detection_null_means_manual_commits_and_no_barge_in():
    session, unit, _source, sent = make()
    handle(session, {"type": "session.update", "session": {"audio": {"input": {"turn_detection": None}}}})
    assert unit.config.turns.end_of_turn is EndOfTurn.MANUAL
    assert unit.config.turns.barge_in is BargeIn.OFF
    assert sent[-1]["session"]["audio"]["input"]["turn_detection"] is None
    handle(session, {"type": "session.update", "session": {"audio": {"input": {
        "turn_detection": {"type": "server_vad", "interrupt_response": False}}}}})
    assert unit.config.turns.end_of_turn is EndOfTurn.SILENCE
    assert unit.config.turns.barge_in is BargeIn.OFF
    assert unit.config.vad.threshold == 0.5  # a new server_vad object starts from the defaults


@pytest.mark.parametrize(("session_field", "code", "param"), [
    ({"audio": {"input": {"turn_detection": {"type": "server_vad", "threshold": "high"}}}},
     "invalid_value", "session.audio.input.turn_detection.threshold"),
    ({"audio": {"input": {"turn_detection": {"type": "server_vad", "threshold": 5}}}},
     "invalid_value", "session.audio.input.turn_detection.threshold"),
    ({"audio": {"input": {"turn_detection": {"type": "server_vad", "silence_duration_ms": 1.5}}}},
     "invalid_value", "session.audio.input.turn_detection.silence_duration_ms"),
    ({"audio": {"input": {"turn_detection": {"type": "server_vad", "create_response": False}}}},
     "unsupported", "session.audio.input.turn_detection.create_response"),
    ({"audio": {"input": {"turn_detection": {"type": "semantic_vad", "eagerness": "eager"}}}},
     "invalid_value", "session.audio.input.turn_detection.eagerness"),
    ({"audio": {"input": {"format": {"type": "audio/pcmu"}}}},
     "unsupported", "session.audio.input.format.type"),
    ({"audio": {"output": {"voice": "nobody"}}}, "invalid_value", "session.audio.output.voice"),
    ({"audio": {"output": {"voice": 7}}}, "invalid_value", "session.audio.output.voice"),
    ({"output_modalities": ["video"]}, "invalid_value", "session.output_modalities"),
    ({"tools": [{"type": "function", "name": "no spaces allowed"}]}, "invalid_value",
     "session.tools[0].name"),
])
def test_a_bad_session_field_is_refused_alone_and_the_rest_is_applied(session_field, code, param):
    session, unit, _source, sent = make()
    handle(session, {"type": "session.update", "event_id": "evt_1",
                     "session": {**session_field, "instructions": "Keep this."}})
    error = last_error(sent)
    assert (error["code"], error["param"], error["event_id"]) == (code, param, "evt_1")
    assert error["type"] == "invalid_request_error" and error["message"]
    assert types(sent).count("error") == 1 and types(sent)[-1] == "session.updated"
    assert unit.config.llm.system_prompt == "Keep this."  # the good field was not dropped
    assert sent[-1]["session"]["instructions"] == "Keep this."


def test_a_session_of_another_type_or_not_an_object_is_refused_whole():
    session, unit, _source, sent = make()
    handle(session, {"type": "session.update", "session": {"type": "transcription",
                                                            "instructions": "No."}})
    assert (last_error(sent)["code"], last_error(sent)["param"]) == ("unsupported", "session.type")
    handle(session, {"type": "session.update", "session": "everything"})
    assert last_error(sent)["param"] == "session" and unit.applied == []


def test_what_agent_frameworks_send_by_default_is_taken_without_an_error():
    """openai-agents: semantic_vad and an OpenAI voice; others add noise reduction, a
    transcription model, tracing and fields from newer API versions."""
    session, unit, _source, sent = make(capabilities=Capabilities(learned_end_of_turn=True))
    handle(session, {"type": "session.update", "session": {
        "type": "realtime", "model": "gpt-realtime", "instructions": "You are a pirate.",
        "output_modalities": ["audio"], "tracing": "auto", "include": None,
        "prompt": {"id": "pmpt_1"}, "a_field_from_the_future": {"x": 1},
        "audio": {"input": {"format": {"type": "audio/pcm", "rate": 24000},
                            "noise_reduction": {"type": "near_field"},
                            "transcription": {"model": "gpt-4o-mini-transcribe", "language": "en"},
                            "turn_detection": {"type": "semantic_vad", "eagerness": "high",
                                               "interrupt_response": True, "create_response": True}},
                  "output": {"format": {"type": "audio/pcm", "rate": 24000}, "voice": "ash",
                             "speed": 1.0}}}})
    assert "error" not in types(sent), [e for e in sent if e["type"] == "error"]
    config = unit.config
    assert config.llm.system_prompt == "You are a pirate."
    assert config.turns.end_of_turn is EndOfTurn.LEARNED
    assert config.turns.end_of_turn_threshold == 0.15  # eagerness high commits sooner
    assert config.tts.voice == "auto"  # "ash" has no match in this voice: the default voice
    updated = sent[-1]["session"]
    assert updated["audio"]["input"]["turn_detection"]["type"] == "semantic_vad"
    ignored = " ".join(updated["parley"]["ignored"])
    for name in ("tracing", "prompt", "a_field_from_the_future", "noise_reduction"):
        assert name in ignored
    assert any("ash" in note for note in updated["parley"]["session_notes"])


def test_semantic_vad_without_the_model_ends_turns_by_silence_and_says_so():
    session, unit, _source, sent = make(capabilities=Capabilities(learned_end_of_turn=False))
    handle(session, {"type": "session.update", "session": {
        "audio": {"input": {"turn_detection": {"type": "semantic_vad"}}}}})
    assert "error" not in types(sent)
    assert unit.config.turns.end_of_turn is EndOfTurn.SILENCE
    assert any("silence" in note for note in sent[-1]["session"]["parley"]["session_notes"])


def test_the_beta_api_shape_is_mapped_to_the_ga_fields():
    session, unit, _source, sent = make()
    handle(session, {"type": "session.update", "session": {
        "modalities": ["text", "audio"], "voice": "joe", "input_audio_format": "pcm16",
        "output_audio_format": "pcm16", "instructions": "Beta.",
        "turn_detection": {"type": "server_vad", "silence_duration_ms": 400},
        "input_audio_transcription": {"model": "whisper-1"}}})
    assert "error" not in types(sent), [e for e in sent if e["type"] == "error"]
    assert (unit.config.tts.voice, unit.config.vad.min_silence_ms) == ("joe", 400)
    assert unit.config.llm.system_prompt == "Beta."


def test_text_only_sessions_and_tools_become_the_reply_defaults():
    session, unit, _source, sent = make(capabilities=Capabilities(tool_support=None))
    tool = {"type": "function", "name": "get_weather", "description": "The weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
    handle(session, {"type": "session.update", "session": {
        "output_modalities": ["text"], "tools": [tool], "tool_choice": "required"}})
    assert "error" not in types(sent)
    assert unit.defaults.speak is False and unit.defaults.tool_choice == "required"
    assert [t.name for t in unit.defaults.tools] == ["get_weather"]
    assert unit.defaults.tools[0].parameters["properties"]["city"] == {"type": "string"}
    updated = sent[-1]["session"]
    assert updated["output_modalities"] == ["text"] and updated["tools"][0]["name"] == "get_weather"


def test_tools_for_a_model_that_cannot_call_them_are_refused_in_session_updated():
    session, unit, _source, sent = make(capabilities=Capabilities(
        tool_support="the chat template of SmolLM2 offers no tools"))
    handle(session, {"type": "session.update", "session": {
        "instructions": "Still applied.",
        "tools": [{"type": "function", "name": "get_time"}]}})
    assert "error" not in types(sent) and unit.defaults.tools == ()
    assert unit.config.llm.system_prompt == "Still applied."
    parley = sent[-1]["session"]["parley"]
    assert any("get_time" in line and "SmolLM2" in line for line in parley["ignored"])
    assert parley["tool_support"] == "the chat template of SmolLM2 offers no tools"


# ---------------------------------------------------------------------- malformed input
@pytest.mark.parametrize(("message", "code", "param"), [
    ("{not json", "invalid_json", None),
    ("[1, 2]", "invalid_json", None),
    ({"event_id": "e"}, "invalid_value", "type"),
    ({"type": "no.such.event"}, "unknown_event_type", "type"),
    ({"type": "input_audio_buffer.append", "audio": "***not base64***"}, "invalid_audio", "audio"),
    ({"type": "input_audio_buffer.append", "audio": base64.b64encode(b"\x01\x02\x03").decode()},
     "invalid_audio", "audio"),
    ({"type": "input_audio_buffer.append", "audio": 12}, "invalid_value", "audio"),
    ({"type": "conversation.item.create", "item": {"type": "message", "role": "critic",
                                                   "content": []}}, "invalid_value", "item.role"),
    ({"type": "conversation.item.retrieve", "item_id": "item_nope"}, "item_not_found", "item_id"),
    ({"type": "conversation.item.delete", "item_id": 5}, "invalid_value", "item_id"),
    ({"type": "conversation.item.truncate", "item_id": "item_nope", "audio_end_ms": 10},
     "item_not_found", "item_id"),
    ({"type": "response.create", "response": {"conversation": "sideways"}}, "invalid_value",
     "response.conversation"),
    ({"type": "response.create", "response": {"metadata": {"n": 1}}}, "invalid_value",
     "response.metadata"),
    ({"type": "conversation.item.create", "item": {"type": "message", "role": "user", "content": [
        {"type": "input_audio", "audio": ""}]}}, "unsupported", "item.content[0].type"),
    ({"type": "response.cancel"}, "response_cancel_not_active", None),
])
def test_malformed_events_get_an_error_and_the_session_stays_usable(message, code, param):
    session, _unit, _source, sent = make()
    handle(session, message)
    error = last_error(sent)
    assert (error["code"], error["param"]) == (code, param)
    if code == "unknown_event_type":
        assert "no.such.event" in error["message"]
    handle(session, {"type": "session.update", "session": {}})
    assert types(sent)[-1] == "session.updated"


def test_oversized_message_is_refused_softly():
    session, _unit, source, sent = make(ServerSettings(max_message_bytes=2048))
    handle(session, {"type": "input_audio_buffer.append", "audio": pcm_b64(0.1)})  # 6.4 kB
    assert last_error(sent)["code"] == "message_too_large"
    assert source.received_s == 0
    handle(session, {"type": "input_audio_buffer.append", "audio": pcm_b64(0.02)})
    assert source.received_s == pytest.approx(0.02) and types(sent).count("error") == 1


def test_audio_beyond_the_buffer_is_an_overflow_error_and_is_dropped():
    session, _unit, source, sent = make(source=StreamSource(max_buffer_s=0.5))
    handle(session, {"type": "input_audio_buffer.append", "event_id": "a1", "audio": pcm_b64(0.8)})
    error = last_error(sent)
    assert (error["code"], error["event_id"]) == ("input_audio_buffer_overflow", "a1")
    assert source.buffered_s == 0
    handle(session, {"type": "input_audio_buffer.append", "audio": pcm_b64(0.3)})
    assert source.buffered_s > 0.2 and types(sent).count("error") == 1


def test_rate_limit_drops_events_over_the_budget_and_recovers():
    clock = Clock()
    session, _unit, _source, sent = make(ServerSettings(max_events_per_s=5), clock=clock)
    for _ in range(8):
        handle(session, {"type": "session.update", "session": {}})
    assert types(sent).count("session.updated") == 5
    assert [e["error"]["code"] for e in sent if e["type"] == "error"] == ["rate_limit_exceeded"]
    clock.t = 1.0  # a second later the bucket is full again
    handle(session, {"type": "session.update", "session": {}})
    assert types(sent)[-1] == "session.updated"


def test_token_bucket_refills_at_its_rate():
    clock = Clock()
    bucket = TokenBucket(10, clock=clock)
    assert sum(bucket.take() for _ in range(20)) == 10
    clock.t = 0.35
    assert sum(bucket.take() for _ in range(20)) == 3


def test_a_failing_handler_is_a_server_error_for_this_session_only():
    session, unit, _source, sent = make()
    unit.fail_apply = True
    handle(session, {"type": "session.update", "event_id": "u1", "session": {}})
    error = sent[-1]
    assert error["type"] == "error" and error["error"]["type"] == "server_error"
    assert error["error"]["event_id"] == "u1"
    unit.fail_apply = False
    handle(session, {"type": "session.update", "session": {}})
    assert types(sent)[-1] == "session.updated"


# ---------------------------------------------------------------------- a spoken turn
def record(turn: int, **figures) -> TurnRecord:
    marks = {Mark.SPEECH_START: 1.0, Mark.SPEECH_END: 3.0, Mark.AUDIO_OUT_FIRST: 3.8}
    return TurnRecord(3, turn, marks, "hello there", "Hi. How are you?", False, True,
                      {Figure(k): v for k, v in figures.items()})


def test_a_spoken_turn_becomes_the_realtime_event_sequence():
    session, _unit, _source, sent = make()
    del sent[:]
    session.on_event(UserSpeaking(3, 7, True))
    session.on_event(PartialTranscript(3, 7, "", "hello"))
    session.on_event(PartialTranscript(3, 7, "hello", "there"))
    session.on_event(PartialTranscript(3, 7, "hello there", ""))
    session.on_event(UserSpeaking(3, 7, False))
    session.on_event(FinalTranscript(3, 7, "Hello there."))
    session.on_event(ReplyText(3, 7, "Hi."))
    session.on_audio(7, "AAAA")
    session.on_event(ReplyText(3, 7, "How are you?"))
    session.on_audio(7, "BBBB")
    session.on_event(TurnFinished(3, record(7, llm_history_turns=0)))
    assert types(sent) == [
        "input_audio_buffer.speech_started",
        "conversation.item.input_audio_transcription.delta",
        "conversation.item.input_audio_transcription.delta",
        "input_audio_buffer.speech_stopped", "input_audio_buffer.committed",
        "conversation.item.added", "response.created",
        "conversation.item.input_audio_transcription.completed", "conversation.item.done",
        "response.output_item.added", "conversation.item.added", "response.content_part.added",
        "response.output_audio_transcript.delta", "response.output_audio.delta",
        "response.output_audio_transcript.delta", "response.output_audio.delta",
        "response.output_audio.done", "response.output_audio_transcript.done",
        "response.content_part.done", "response.output_item.done", "conversation.item.done",
        "response.done"]
    by = {e["type"]: e for e in sent}
    item = by["input_audio_buffer.speech_started"]["item_id"]
    assert by["input_audio_buffer.committed"]["item_id"] == item
    deltas = [e["delta"] for e in sent if e["type"].endswith("transcription.delta")]
    assert deltas == ["hello", " there"]  # only confirmed words, appended
    assert by["conversation.item.input_audio_transcription.completed"]["transcript"] == "Hello there."
    assert by["conversation.item.input_audio_transcription.completed"]["item_id"] == item
    transcript = [e["delta"] for e in sent if e["type"] == "response.output_audio_transcript.delta"]
    assert "".join(transcript) == "Hi. How are you?"
    response = by["response.done"]["response"]
    assert response["status"] == "completed" and response["id"].startswith("resp_")
    assert response["output"][0]["content"][0]["transcript"] == "Hi. How are you?"
    assert response["parley"]["voice_to_voice_s"] == pytest.approx(0.8)
    assert response["parley"]["llm_history_turns"] == 0
    assert {e["response_id"] for e in sent if "response_id" in e} == {response["id"]}
    ids = [e["event_id"] for e in sent]
    assert len(set(ids)) == len(ids)
    # The conversation holds the user's item (with its transcript) and the assistant's.
    added = [e for e in sent if e["type"] == "conversation.item.added"]
    assert [a["item"]["role"] for a in added] == ["user", "assistant"]
    assert added[1]["previous_item_id"] == item
    handle(session, {"type": "conversation.item.retrieve", "item_id": item})
    assert sent[-1]["item"]["content"][0]["transcript"] == "Hello there."
    handle(session, {"type": "conversation.item.retrieve", "item_id": response["output"][0]["id"]})
    assert sent[-1]["item"]["content"][0]["transcript"] == "Hi. How are you?"


def test_barge_in_cancels_the_response_in_flight():
    session, _unit, _source, sent = make()
    session.on_event(UserSpeaking(3, 7, True))
    session.on_event(UserSpeaking(3, 7, False))
    session.on_event(TurnCancelled(3, 7, "barge-in"))
    session.on_audio(7, "late")  # audio made before the cut reaches nobody
    done = [e for e in sent if e["type"] == "response.done"]
    assert len(done) == 1
    assert done[0]["response"]["status"] == "cancelled"
    assert done[0]["response"]["status_details"]["reason"] == "turn_detected"
    assert "response.output_audio.delta" not in types(sent)


def test_response_cancel_interrupts_the_unit():
    session, unit, _source, sent = make()
    session.on_event(UserSpeaking(3, 7, True))
    session.on_event(UserSpeaking(3, 7, False))
    handle(session, {"type": "response.cancel"})
    assert unit.interrupts == 1
    done = [e for e in sent if e["type"] == "response.done"][-1]["response"]
    assert (done["status"], done["status_details"]["reason"]) == ("cancelled", "client_cancelled")
    session.on_event(TurnCancelled(3, 0, "barge-in"))  # the interrupt's own event: nothing more
    assert types(sent).count("response.done") == 1


def test_engine_error_fails_the_active_response_and_is_an_error_event_only_without_one():
    session, _unit, _source, sent = make()
    session.on_event(UserSpeaking(3, 7, True))
    session.on_event(UserSpeaking(3, 7, False))
    session.on_event(EngineError(3, "llm", "out of memory"))
    done = [e for e in sent if e["type"] == "response.done"][-1]["response"]
    assert done["status"] == "failed"
    assert "llm: out of memory" in done["status_details"]["error"]["message"]
    assert "error" not in types(sent)  # a client that takes every error as fatal goes on
    session.on_event(EngineError(3, "microphone", "lost"))  # no response to carry it
    error = last_error(sent)
    assert error["type"] == "server_error" and "microphone: lost" in error["message"]


# ---------------------------------------------------------------------- typed messages
def on_loop(session, *events) -> None:
    """Engine events handed to the session on a running loop (as the transport does), and
    the tasks they start run."""
    async def feed():
        for event in events:
            session.on_event(event)
        for _ in range(5):
            await asyncio.sleep(0)
    asyncio.run(feed())


def test_typed_message_enters_the_history_and_events_before_its_turn_id_are_kept():
    session, unit, _source, sent = make()
    # The reply starts streaming before say() returns its turn id to the session.
    unit.during_say = lambda turn: (session.on_event(ReplyText(3, turn, "Hello Ada.")),
                                    session.on_audio(turn, "QUJD"))
    handle(session, text_item("My name is Ada."))
    assert types(sent)[-2:] == ["conversation.item.added", "conversation.item.done"]
    assert [(i.kind, i.text) for i in unit.chat_history.items()] == [(ItemKind.USER, "My name is Ada.")]
    handle(session, {"type": "response.create"})
    assert unit.said == [""]  # the reply answers the conversation, which holds the message
    session.on_event(TurnFinished(3, record(101)))
    assert [e["delta"] for e in sent if e["type"] == "response.output_audio_transcript.delta"] == [
        "Hello Ada."]
    assert [e["delta"] for e in sent if e["type"] == "response.output_audio.delta"] == ["QUJD"]
    assert sent[-1]["type"] == "response.done" and sent[-1]["response"]["status"] == "completed"


def test_a_response_asked_for_while_one_is_active_waits_for_it():
    session, unit, _source, sent = make()
    handle(session, text_item("one"))
    handle(session, {"type": "response.create"})
    handle(session, text_item("two"))
    handle(session, {"type": "response.create", "event_id": "second"})
    assert "error" not in types(sent) and unit.said == [""]
    on_loop(session, TurnFinished(3, record(101)))
    assert unit.said == ["", ""] and types(sent).count("response.created") == 2
    assert "error" not in types(sent)


def test_response_create_honours_instructions_text_only_metadata_and_out_of_band():
    session, unit, _source, sent = make()
    handle(session, {"type": "response.create", "event_id": "greet", "response": {
        "instructions": "Greet the user.", "output_modalities": ["text"],
        "metadata": {"client_event_id": "abc"}}})
    request = unit.requests[-1]
    assert unit.said == [""]  # nothing to answer: the assistant speaks first
    assert (request.instructions, request.speak, request.record) == ("Greet the user.", False, True)
    created = [e for e in sent if e["type"] == "response.created"][-1]["response"]
    assert created["metadata"] == {"client_event_id": "abc"} and created["output_modalities"] == ["text"]
    session.on_event(ReplyText(3, 101, "Hello!"))
    session.on_audio(101, "QUJD")  # a text-only response carries no audio
    session.on_event(TurnFinished(3, record(101)))
    assert [e["delta"] for e in sent if e["type"] == "response.output_text.delta"] == ["Hello!"]
    assert "response.output_audio.delta" not in types(sent)
    done = sent[-1]["response"]
    assert done["metadata"] == {"client_event_id": "abc"}
    assert done["output"][0]["content"][0] == {"type": "output_text", "text": "Hello!"}
    # Out of band: no conversation items, and the request says so.
    before = types(sent).count("conversation.item.added")
    handle(session, {"type": "response.create", "response": {
        "conversation": "none", "input": [{"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "Summarise."}]}]}})
    request = unit.requests[-1]
    assert request.record is False and request.context == ({"role": "user", "content": "Summarise."},)
    session.on_event(ReplyText(3, 102, "A summary."))
    session.on_event(TurnFinished(3, record(102)))
    assert types(sent).count("conversation.item.added") == before
    assert sent[-1]["response"]["conversation_id"] is None


def test_function_calls_become_items_with_their_arguments_and_outputs_go_to_the_history():
    session, unit, _source, sent = make()
    session.on_event(UserSpeaking(3, 7, True))
    session.on_event(UserSpeaking(3, 7, False))
    call = ToolCall("call_1", "get_weather", '{"city":"Paris"}')
    session.on_event(ToolCallsMade(3, 7, (call,)))
    session.on_event(TurnFinished(3, record(7)))
    kinds = types(sent)
    for kind in ("response.function_call_arguments.delta", "response.function_call_arguments.done"):
        assert kind in kinds
    args = next(e for e in sent if e["type"] == "response.function_call_arguments.done")
    assert (args["call_id"], args["name"], args["arguments"]) == ("call_1", "get_weather",
                                                                  '{"city":"Paris"}')
    done = sent[-1]["response"]
    assert [o["type"] for o in done["output"]] == ["function_call"]
    added = [e["item"]["type"] for e in sent if e["type"] == "conversation.item.added"]
    assert added == ["message", "function_call"]
    handle(session, {"type": "conversation.item.create", "item": {
        "type": "function_call_output", "call_id": "call_1", "output": '{"temp_c": 21}'}})
    handle(session, {"type": "response.create"})
    assert "error" not in types(sent)
    outputs = [i for i in unit.chat_history.items() if i.kind is ItemKind.FUNCTION_OUTPUT]
    assert [(o.call_id, o.text) for o in outputs] == [("call_1", '{"temp_c": 21}')]
    assert unit.said == [""]


def test_a_function_call_ready_at_the_commit_waits_out_its_gap_and_what_follows_keeps_its_order():
    # pipecat loses a tool result that arrives in the same burst as speech_stopped.
    clock, timers = Clock(), Timers()
    session, _unit, _source, sent = make(clock=clock,
                                         pacing=ToolCallPacing(clock, gap_s=0.15, call_later=timers))
    session.on_event(UserSpeaking(3, 7, True))
    session.on_event(UserSpeaking(3, 7, False))
    session.on_event(ToolCallsMade(3, 7, (ToolCall("call_1", "get_weather", '{"city":"Paris"}'),)))
    session.on_audio(7, base64.b64encode(bytes(4800)).decode())
    session.on_event(TurnFinished(3, record(7)))
    assert "input_audio_buffer.speech_stopped" in types(sent)
    assert "response.function_call_arguments.done" not in types(sent)
    assert "response.done" not in types(sent)
    assert [round(delay, 2) for delay, _ in timers.due] == [0.15]
    clock.t = 0.15
    timers.run()
    kinds = types(sent)
    assert kinds.index("response.function_call_arguments.done") < kinds.index("response.done")
    assert kinds[-1] == "response.done"
    # The next turn's call, once the gap has passed, goes out at once.
    session.on_event(UserSpeaking(3, 8, True))
    session.on_event(UserSpeaking(3, 8, False))
    clock.t = 1.0
    session.on_event(ToolCallsMade(3, 8, (ToolCall("call_2", "get_weather", '{"city":"Rome"}'),)))
    assert "response.function_call_arguments.done" in types(sent)[-6:] and timers.due == []


def test_items_can_be_deleted_and_an_assistant_reply_truncated():
    session, unit, _source, sent = make()
    handle(session, text_item("Forget me."))
    item_id = [e for e in sent if e["type"] == "conversation.item.added"][-1]["item"]["id"]
    handle(session, {"type": "conversation.item.delete", "item_id": item_id})
    assert sent[-1] == {**sent[-1], "type": "conversation.item.deleted", "item_id": item_id}
    assert unit.chat_history.items() == ()
    handle(session, {"type": "conversation.item.retrieve", "item_id": item_id})
    assert last_error(sent)["code"] == "item_not_found"
    # A spoken reply, cut off: truncate keeps what was heard.
    session.on_event(UserSpeaking(3, 7, True))
    session.on_event(UserSpeaking(3, 7, False))
    session.on_event(ReplyText(3, 7, "A long answer."))
    session.on_audio(7, base64.b64encode(bytes(48000)).decode())  # 1 s of audio
    session.on_event(TurnCancelled(3, 7, "barge-in"))
    reply = next(e for e in sent if e["type"] == "response.output_item.added")["item"]["id"]
    handle(session, {"type": "conversation.item.truncate", "item_id": reply, "content_index": 0,
                     "audio_end_ms": 5000})
    assert sent[-1]["type"] == "conversation.item.truncated"
    assert sent[-1]["audio_end_ms"] == 1000  # past the end of what was sent: the end
    assert unit.truncated == [(7, 1.0)]
    handle(session, {"type": "conversation.item.retrieve", "item_id": reply})
    assert sent[-1]["item"]["content"][0]["transcript"] == "heard words"
    user = next(e for e in sent if e["type"] == "input_audio_buffer.committed")["item_id"]
    handle(session, {"type": "conversation.item.truncate", "item_id": user, "audio_end_ms": 0})
    assert (last_error(sent)["code"], last_error(sent)["param"]) == ("invalid_value", "item_id")


# ---------------------------------------------------------------------- commit and clear
def test_commit_with_no_speech_is_an_error_when_the_vad_reaches_it():
    session, _unit, source, sent = make()
    handle(session, {"type": "input_audio_buffer.commit", "event_id": "c1"})
    assert "error" not in types(sent)  # not yet: the VAD has not reached the commit
    session.on_marker(source.read(0.0).marker)
    error = last_error(sent)
    assert (error["code"], error["event_id"]) == ("input_audio_buffer_commit_empty", "c1")


def test_manual_commit_answers_the_turn_and_absorbs_the_clients_response_create():
    session, _unit, source, sent = make()
    handle(session, {"type": "session.update", "session": {"audio": {"input": {"turn_detection": None}}}})
    session.on_event(UserSpeaking(3, 9, True))  # no speech_started without turn detection
    handle(session, {"type": "input_audio_buffer.commit"})
    handle(session, {"type": "response.create"})  # sent before the VAD reached the commit
    session.on_marker(source.read(0.0).marker)
    session.on_event(UserSpeaking(3, 9, False))
    assert "error" not in types(sent)
    assert "input_audio_buffer.speech_started" not in types(sent)
    assert types(sent).count("input_audio_buffer.committed") == 1
    assert types(sent).count("response.created") == 1


def clear_speech_in_progress(session, source) -> None:
    """Unit 3's user speaks (turn 4) and the client clears the input buffer: the source
    passes the clear on, and the VAD's clear ends the speech and cancels the turn."""
    session.on_event(UserSpeaking(3, 4, True))
    handle(session, {"type": "input_audio_buffer.clear"})
    marker = source.read(0.0).marker
    assert marker is InputMarker.CLEAR
    session.on_marker(marker)
    session.on_event(UserSpeaking(3, 4, False))  # the VAD's clear ends the speech...
    session.on_event(TurnCancelled(3, 4, "cleared"))


def test_clear_forgets_the_turn_in_progress():
    session, _unit, source, sent = make()
    clear_speech_in_progress(session, source)
    assert "input_audio_buffer.cleared" in types(sent)
    assert "input_audio_buffer.committed" not in types(sent)  # ...without committing it
    assert "response.created" not in types(sent)


def test_a_create_sent_before_the_tool_output_waits_and_answers_with_it():
    """pipecat may ask for the next response before its tool's output item, while the
    response that called the tool is still running: the create waits, it is not taken
    for that running response."""
    session, unit, _source, sent = make()
    session.on_event(UserSpeaking(3, 7, True))
    session.on_event(UserSpeaking(3, 7, False))
    session.on_event(ToolCallsMade(3, 7, (ToolCall("call_1", "get_weather", "{}"),)))
    handle(session, {"type": "response.create", "response": {"output_modalities": ["audio"]}})
    handle(session, {"type": "conversation.item.create", "item": {
        "type": "function_call_output", "call_id": "call_1", "output": "sunny"}})
    assert unit.said == [] and "error" not in types(sent)
    on_loop(session, TurnFinished(3, record(7)))
    assert unit.said == [""] and types(sent).count("response.created") == 2
