"""A realtime session's user turns: each turn starts from a fresh ``UserTurn``, nothing of
the one before leaks into it, and a turn's late transcript still finds its own item."""

from __future__ import annotations

from engine.pipeline.events import FinalTranscript, PartialTranscript, UserSpeaking
from engine.server.user_turns import UserTurns
from tests.server.test_server_protocol import clear_speech_in_progress, make, types


def test_each_turn_starts_fresh_and_the_ones_before_stay_findable():
    turns = UserTurns()
    assert turns.current is None and not turns.speaking
    first = turns.start(7)
    first.clearing, first.transcript_sent = True, "hello there"
    second = turns.start(8)
    assert turns.current is second and second is not first
    assert (second.turn_id, second.speaking, second.clearing, second.transcript_sent) == (
        8, True, False, "")
    assert second.item_id.startswith("item_") and second.item_id != first.item_id
    assert turns.get(7) is first and first.transcript_sent == "hello there"  # left as it was
    assert turns.drop(7) is first and turns.get(7) is None and turns.drop(7) is None
    committed = turns.start(9, speaking=False)  # first seen at its commit
    assert turns.current is committed and not turns.speaking


def test_only_the_newest_turns_are_kept_in_a_long_session():
    turns = UserTurns()
    kept = [turns.start(turn) for turn in range(65)]
    assert turns.get(0) is None and turns.get(32) is None
    assert turns.get(33) is kept[33] and turns.get(64) is kept[64] is turns.current


def _deltas(sent, item_id: str) -> list[str]:
    return [e["delta"] for e in sent
            if e["type"] == "conversation.item.input_audio_transcription.delta"
            and e["item_id"] == item_id]


def test_a_new_turns_transcript_starts_from_nothing_and_a_late_one_finds_its_turn():
    session, _unit, _source, sent = make()
    session.on_event(UserSpeaking(3, 7, True))
    session.on_event(PartialTranscript(3, 7, "hello there", ""))
    session.on_event(UserSpeaking(3, 7, False))
    # The user speaks again before turn 7's final transcript came.
    session.on_event(UserSpeaking(3, 8, True))
    session.on_event(PartialTranscript(3, 8, "hello", ""))
    session.on_event(FinalTranscript(3, 7, "Hello there."))
    started = [e["item_id"] for e in sent if e["type"] == "input_audio_buffer.speech_started"]
    assert len(started) == 2 and started[0] != started[1]
    assert _deltas(sent, started[0]) == ["hello there"]
    assert _deltas(sent, started[1]) == ["hello"]  # not held back by turn 7's words
    (completed,) = [e for e in sent
                    if e["type"] == "conversation.item.input_audio_transcription.completed"]
    assert (completed["item_id"], completed["transcript"]) == (started[0], "Hello there.")


def test_speech_resumed_in_the_grace_keeps_its_turn_and_item():
    session, _unit, _source, sent = make()
    session.on_event(UserSpeaking(3, 7, True))
    session.on_event(PartialTranscript(3, 7, "hello", ""))
    session.on_event(UserSpeaking(3, 7, True))  # the pause was not the end: same turn
    session.on_event(PartialTranscript(3, 7, "hello there", ""))
    assert types(sent).count("input_audio_buffer.speech_started") == 1
    (started,) = [e["item_id"] for e in sent if e["type"] == "input_audio_buffer.speech_started"]
    assert _deltas(sent, started) == ["hello", " there"]


def test_a_cleared_turn_leaves_nothing_to_the_next_one():
    session, _unit, source, sent = make()
    clear_speech_in_progress(session, source)
    assert "input_audio_buffer.committed" not in types(sent)
    session.on_event(UserSpeaking(3, 5, True))
    session.on_event(UserSpeaking(3, 5, False))  # the next turn commits as usual
    assert types(sent).count("input_audio_buffer.committed") == 1
    assert types(sent).count("response.created") == 1
