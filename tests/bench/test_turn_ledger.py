"""``TurnLedger``: every committed turn of a connection classified from made-up server events
(answered, cut by a barge-in, dropped by the client, lost and why)."""

from __future__ import annotations

import base64

from engine.bench.turn_ledger import TurnLedger, tally

AUDIO = base64.b64encode(bytes(4800)).decode("ascii")  # 0.1 s of PCM16 at 24 kHz


class Wire:
    """Feeds a ledger the events Parley sends, in its order, at made-up times."""

    def __init__(self) -> None:
        self.ledger = TurnLedger()
        self.t = 0.0

    def send(self, kind: str, **fields) -> None:
        self.t += 0.1
        self.ledger.feed(self.t, {"type": kind, **fields})

    def speech(self, item: str) -> None:
        self.send("input_audio_buffer.speech_started", item_id=item, audio_start_ms=0)

    def commit(self, item: str, response: str) -> None:
        self.send("input_audio_buffer.speech_stopped", item_id=item, audio_end_ms=900)
        self.send("input_audio_buffer.committed", item_id=item)
        self.send("conversation.item.added", item={"id": item})
        self.send("response.created", response={"id": response, "status": "in_progress"})

    def transcript(self, item: str, text: str) -> None:
        self.send("conversation.item.input_audio_transcription.completed", item_id=item,
                  content_index=0, transcript=text)

    def audio(self, response: str) -> None:
        self.send("response.output_audio.delta", response_id=response, delta=AUDIO)

    def done(self, response: str, status: str = "completed", reason: str | None = None) -> None:
        details = {"type": status, "reason": reason} if reason else None
        self.send("response.done", response={"id": response, "status": status,
                                             "status_details": details, "output": []})


def by_item(ledger: TurnLedger) -> dict[str, tuple[str, str]]:
    return {o.item_id: (o.outcome, o.why) for o in ledger.outcomes()}


def test_an_answered_turn_and_one_cut_by_the_next_are_on_purpose():
    wire = Wire()
    wire.speech("a")
    wire.commit("a", "r1")
    wire.transcript("a", "What is the weather?")
    wire.audio("r1")
    wire.done("r1")
    wire.speech("b")
    wire.commit("b", "r2")
    wire.transcript("b", "Tell me a story.")
    wire.audio("r2")
    wire.done("r2", "cancelled", "turn_detected")  # sent just before the next speech_started
    wire.speech("c")
    wire.commit("c", "r3")
    wire.transcript("c", "A joke instead.")
    wire.done("r3")
    outcomes = by_item(wire.ledger)
    assert [o for o, _why in outcomes.values()] == ["answered", "barge_in", "answered"]
    assert wire.ledger.settled()
    counts = tally(wire.ledger.outcomes())
    assert (counts["turns"], counts["answered"], counts["barge_in"], counts["lost"]) == (3, 2, 1, 0)


def test_a_turn_cut_before_its_transcript_came_is_lost():
    wire = Wire()  # the bug bench lost-turns found: committed, cut, never transcribed
    wire.speech("a")
    wire.commit("a", "r1")
    wire.done("r1", "cancelled", "turn_detected")
    wire.speech("b")
    wire.commit("b", "r2")
    wire.transcript("b", "But I was a boy.")
    wire.audio("r2")
    wire.done("r2")
    assert not wire.ledger.settled()  # a's transcript is still awaited
    outcome, why = by_item(wire.ledger)["a"]
    assert outcome == "lost" and "before it was transcribed" in why
    counts = tally(wire.ledger.outcomes())
    assert counts["lost"] == 1 and counts["lost_turns"][0]["item_id"] == "a"
    assert counts["lost_turns"][0]["response_status"] == "cancelled"


def test_a_cancel_with_no_speech_after_it_is_lost_and_so_is_a_turn_never_answered():
    wire = Wire()
    wire.speech("a")
    wire.commit("a", "r1")
    wire.transcript("a", "Since the commencement of the season.")
    wire.done("r1", "cancelled", "turn_detected")  # nobody spoke again then
    wire.t += 5.0
    wire.speech("b")
    wire.send("input_audio_buffer.committed", item_id="b")  # and no response.created follows
    wire.transcript("b", "Hello?")
    outcomes = by_item(wire.ledger)
    assert outcomes["a"][0] == "lost" and "no barge-in" in outcomes["a"][1]
    assert outcomes["b"] == ("lost", "never answered")


def test_a_failed_reply_is_lost_and_a_client_that_left_dropped_its_turn():
    wire = Wire()
    wire.speech("a")
    wire.commit("a", "r1")
    wire.transcript("a", "Hi.")
    wire.done("r1", "failed")
    wire.speech("b")
    wire.commit("b", "r2")
    wire.ledger.note_drop(wire.t)
    outcomes = by_item(wire.ledger)
    assert outcomes["a"][0] == "lost" and outcomes["a"][1].startswith("failed")
    assert outcomes["b"][0] == "dropped"


def test_speech_never_committed_is_not_a_turn_and_answered_after_sees_only_later_turns():
    wire = Wire()
    wire.speech("a")
    wire.commit("a", "r1")
    t_after_a = wire.t
    wire.audio("r1")
    assert wire.ledger.answered_after(0.0) and not wire.ledger.answered_after(t_after_a)
    wire.speech("b")  # the client left (or cleared) before the commit
    assert [t.item_id for t in wire.ledger.committed()] == ["a"]
    assert len(wire.ledger.outcomes()) == 1
