"""Conversations longer than the prompt: the turns ``llm.history_turns`` no longer keeps
are summarised by the LLM between turns, and the prompt carries the summary.

Through the real pipeline (Silero VAD, tiny.en, Piper loaded; the turns typed): the LLM
is the scripted server of ``tests/support/chat_server.py``, which keeps every request, so
the test reads the prompts, and answers each summary request with a note naming the
exchange's topic. The last test runs the real SmolLM2.
"""

from __future__ import annotations

import re
import time

import pytest

from engine.audio.file_sink import FileSink
from engine.cli.typed import TypedConversation
from engine.config import EngineConfig
from engine.measures import Mark
from engine.pipeline.chat_history import SUMMARY_PREFIX, ChatHistory, HistoryItem, ItemKind
from engine.pipeline.events import HistorySummarized
from engine.models.model_registry import ModelRegistry
from engine.stages.summary import SUMMARY_CHARS, clean_note, grow_summary, note_messages
from tests.support.chat_server import ChatServer, message_text

TOPICS = ("apples", "boats", "clocks", "deserts", "engines")
NOTE_REQUEST = "Write a short note about each exchange."


class NotingServer(ChatServer):
    """Answers a summary request with "The user asked about <topic>." (the topic of its
    exchange's user line), slowly enough that a new message can cut it off."""

    def __init__(self, note_delay_s: float = 0.0) -> None:
        self.note_delay_s = note_delay_s
        super().__init__(reply="Here is a short answer about that.")

    def _answer(self, body: dict):
        last = message_text((body.get("messages") or [{}])[-1])
        if NOTE_REQUEST not in last:
            return super()._answer(body)
        topic = re.findall(r"^User: Tell me about (\w+)\.$", last, re.MULTILINE)[-1]
        words = f"The user asked about {topic}.".split(" ")
        if self.note_delay_s:
            words += ["And", "so", "on."] * 20  # a long note, to be cut off
        return [{"role": "assistant", "content": ""},
                *({"content": w if i == 0 else " " + w} for i, w in enumerate(words))], "stop"

    def note_requests(self) -> list[dict]:
        return [b for b in self.requests if NOTE_REQUEST in message_text(b["messages"][-1])]

    def prompt_for(self, text: str) -> list[dict]:
        """The messages of the (last) turn request whose user message is ``text``."""
        return [b for b in self.requests if message_text(b["messages"][-1]) == text][-1]["messages"]


# ----------------------------------------------------------------------------- the parts
def _history(turns: int) -> ChatHistory:
    history = ChatHistory()
    for turn in range(1, turns + 1):
        history.append_turn(turn, f"q{turn}", f"a{turn}")
    return history


def test_the_oldest_dropped_turn_is_summarised_first_one_at_a_time():
    history = ChatHistory()
    history.add(HistoryItem(ItemKind.ASSISTANT, "Hello! How can I help?", item_id="greeting"))
    for turn in range(1, 5):
        history.append_turn(turn, f"q{turn}", f"a{turn}")
    assert history.pending_summary(4) is None and history.pending_summary(0) is None
    first = history.pending_summary(2)
    assert first is not None and first.previous == "" and first.through_turn == 1
    assert [i.text for i in first.items] == ["Hello! How can I help?", "q1", "a1"]
    assert history.set_summary(first, "One.") and history.summary == "One."
    assert not history.set_summary(first, "again")  # covered already
    second = history.pending_summary(2)
    assert second is not None and [i.text for i in second.items] == ["q2", "a2"]
    assert second.previous == "One." and second.through_turn == 2
    assert history.set_summary(second, "One. Two.")
    assert history.pending_summary(2) is None
    assert history.messages_for("q5", "S", 2) == [
        {"role": "system", "content": "S"},
        {"role": "system", "content": SUMMARY_PREFIX + "One. Two."},
        {"role": "user", "content": "q3"}, {"role": "assistant", "content": "a3"},
        {"role": "user", "content": "q4"}, {"role": "assistant", "content": "a4"},
        {"role": "user", "content": "q5"}]
    assert history.messages_for("q5", "S", 2, summary=False)[1]["content"] == "q3"
    assert history.messages_for("q5", "S", 10)[1]["content"] == "Hello! How can I help?"  # all kept


def test_a_new_conversation_forgets_the_summary_and_voids_work_in_flight():
    history = _history(3)
    work = history.pending_summary(1)
    assert work is not None and history.set_summary(work, "Old.")
    in_flight = history.pending_summary(1)
    history.clear()
    assert history.summary == "" and history.pending_summary(1) is None
    for turn in range(4, 7):
        history.append_turn(turn, f"q{turn}", f"a{turn}")
    assert in_flight is not None and not history.set_summary(in_flight, "stale")
    fresh = history.pending_summary(1)
    assert fresh is not None and fresh.through_turn == 4 and fresh.previous == ""


def test_turns_trimmed_off_the_front_are_counted():
    history = _history(0)
    history.KEEP = 6  # three turns of two items
    for turn in range(1, 6):
        history.append_turn(turn, f"q{turn}", f"a{turn}")
    work = history.pending_summary(1)  # q1, q2 trimmed away; q3, q4 dropped from the prompt
    assert work is not None and work.through_turn == 3
    assert history.set_summary(work, "Three.")
    assert history.pending_summary(1).through_turn == 4  # type: ignore[union-attr]


def test_a_note_is_the_first_sentence_before_any_made_up_exchange():
    assert clean_note(" The user has a dog named Rex.\nNote: The user asked") == (
        "The user has a dog named Rex.")
    assert clean_note("The user lives in Oslo. He likes it there.") == "The user lives in Oslo."
    assert clean_note("**The user** asked about Paris") == "The user asked about Paris"
    assert clean_note("User: I live in Sydney.\nAssistant: Nice!") == ""


def test_the_summary_grows_by_new_notes_and_keeps_its_first_under_the_cap():
    assert grow_summary("", "A one.") == "A one."
    assert grow_summary("A one.", "A one.") == "A one."  # the same note twice: once
    assert grow_summary("A one.", "") == "A one."
    notes = [f"The user asked about topic number {n}, which took a while." for n in range(30)]
    summary = ""
    for note in notes:
        summary = grow_summary(summary, note)
    assert len(summary) <= SUMMARY_CHARS
    assert summary.startswith(notes[0]) and summary.endswith(notes[-1])


def test_the_note_request_quotes_the_exchange_after_the_examples():
    (request,) = note_messages((HistoryItem(ItemKind.USER, "I have a dog called Rex.", 1),
                                HistoryItem(ItemKind.ASSISTANT, "What a nice name!", 1)))
    assert request["role"] == "user"
    assert request["content"].startswith(NOTE_REQUEST)
    assert request["content"].endswith("User: I have a dog called Rex.\n"
                                       "Assistant: What a nice name!\nNote:")


# ----------------------------------------------------------------------------- the pipeline
@pytest.fixture(scope="module")
def registry():
    return ModelRegistry()


@pytest.fixture
def server():
    chat = NotingServer()
    yield chat
    chat.close()


def _conversation(registry, server, **overrides) -> TypedConversation:
    config = EngineConfig().with_overrides({
        "turns.barge_in": "off", "llm.backend": "openai", "llm.base_url": server.url,
        "llm.model": server.model, "llm.history_turns": 2, **overrides})
    return TypedConversation(config, FileSink(None, realtime=False), history=None,
                             registry=registry)


def _wait(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)
    return value


def _question(i: int) -> str:
    return f"Tell me about {TOPICS[i]}."


@pytest.mark.slow
def test_the_fifth_prompt_carries_a_summary_written_between_turns(registry, server):
    with _conversation(registry, server) as chat:
        summaries: list[HistorySummarized] = []
        chat.engine.subscribe(lambda e: summaries.append(e) if isinstance(e, HistorySummarized) else None)
        turns = []
        for i in range(5):
            answer = chat.answer(_question(i), speak=True)
            assert answer.errors == [] and answer.record is not None and answer.record.finished
            turns.append(answer.turn_id)
            if i in (2, 3):  # turn i-1 fell out of the prompt: its summary comes before turn i+1
                _wait(lambda n=i - 1: len(summaries) >= n, 30, f"the summary after turn {i + 1}")
        records = [chat.engine.metrics.turn(0, t) for t in turns]
        unit = chat.engine.units[0]

    # One summary request per turn that fell out, each quoting just that exchange.
    notes = server.note_requests()
    assert [re.findall(r"^User: (.*)$", message_text(n["messages"][-1]), re.MULTILINE)[-1]
            for n in notes[:2]] == [_question(0), _question(1)]
    assert [(s.summary, s.through_turn) for s in summaries[:2]] == [
        ("The user asked about apples.", turns[0]),
        ("The user asked about apples. The user asked about boats.", turns[1])]
    # The fifth prompt: the system prompt, the summary, turns 3 and 4, the fifth question.
    prompt = server.prompt_for(_question(4))
    assert [m["role"] for m in prompt] == ["system", "system", "user", "assistant", "user",
                                           "assistant", "user"]
    assert prompt[1]["content"] == (SUMMARY_PREFIX + "The user asked about apples. "
                                    "The user asked about boats.")
    assert [m["content"] for m in prompt if m["role"] == "user"] == [
        _question(2), _question(3), _question(4)]
    assert unit.chat_history.summary.startswith(summaries[1].summary)
    # The third and fourth prompts: no summary yet, then the first one.
    assert [m["role"] for m in server.prompt_for(_question(2))][:2] == ["system", "user"]
    assert server.prompt_for(_question(3))[1]["content"] == SUMMARY_PREFIX + summaries[0].summary

    # Between turns: after the reply it follows was played, and done before the next turn's
    # LLM started; never inside any turn's LLM start .. reply end.
    ran = [(records[i].marks[Mark.SUMMARY_START], records[i].marks[Mark.SUMMARY_END], i)
           for i in range(5) if Mark.SUMMARY_START in records[i].marks]
    assert [i for _, _, i in ran][:2] == [2, 3]  # (one after the fifth may have begun)
    for start, end, i in ran:
        assert records[i].marks[Mark.REPLY_DONE] <= start < end
        if i < 4:
            assert end <= records[i + 1].marks[Mark.LLM_START]
        for record in records:
            busy = (record.marks[Mark.LLM_START], record.marks[Mark.REPLY_DONE])
            assert end <= busy[0] or start >= busy[1], (start, end, busy)


@pytest.mark.slow
def test_a_new_message_cuts_the_summary_off_and_it_is_redone_at_the_next_pause(registry):
    server = NotingServer(note_delay_s=0.05)
    server.delay_s = 0.05  # every reply streams slowly: the long note takes seconds
    try:
        with _conversation(registry, server) as chat:
            summaries: list[tuple[float, HistorySummarized]] = []
            chat.engine.subscribe(lambda e: summaries.append((time.perf_counter(), e))
                                  if isinstance(e, HistorySummarized) else None)
            turns = [chat.answer(_question(i), speak=False).turn_id for i in range(3)]
            _wait(lambda: server.note_requests(), 30, "the summary request after turn 3")
            fourth = chat.answer(_question(3), speak=False)  # sent while the note streams
            _wait(lambda: len(summaries) >= 2, 60, "the summaries after turn 4")
            third, after = (chat.engine.metrics.turn(0, t) for t in (turns[2], fourth.turn_id))
        # Cut off at the fourth message: it ended before that turn's LLM started, and no
        # summary came of it; the summary was redone once the fourth reply was played.
        assert third.marks[Mark.SUMMARY_END] <= after.marks[Mark.LLM_START]
        assert summaries[0][0] > after.marks[Mark.REPLY_DONE]
        assert after.marks[Mark.SUMMARY_START] >= after.marks[Mark.REPLY_DONE]
        assert len(server.note_requests()) >= 3  # the first one, again, then the second
        assert [e.through_turn for _, e in summaries[:2]] == [turns[0], turns[1]]
        assert summaries[0][1].summary == "The user asked about apples."  # its first sentence
    finally:
        server.close()


@pytest.mark.slow
def test_summarize_history_off_and_a_new_conversation(registry, server):
    with _conversation(registry, server, **{"llm.summarize_history": False}) as chat:
        for i in range(4):
            chat.answer(_question(i), speak=False)
        time.sleep(0.5)  # a pause as long as the first test's summaries took: none may start
        assert server.note_requests() == []
        assert [m["role"] for m in server.prompt_for(_question(3))][:2] == ["system", "user"]
        chat.engine.apply(chat.engine.config.with_overrides({"llm.summarize_history": True}))
        _wait(lambda: len(server.note_requests()) >= 2, 30, "the summaries once it is on")
        unit = chat.engine.units[0]
        _wait(lambda: unit.chat_history.summary.count("The user asked about") == 2, 30,
              "both notes in the summary")
        assert chat.engine.new_conversation()
        assert unit.chat_history.summary == ""
        chat.answer(_question(4), speak=False)
        assert [m["role"] for m in server.prompt_for(_question(4))] == ["system", "user"]


@pytest.mark.slow
def test_the_real_smollm2_writes_a_summary_the_prompt_carries(registry):
    config = EngineConfig().with_overrides({"turns.barge_in": "off", "llm.history_turns": 1})
    said = ["Hi, my name is Anna and I live in Berlin.", "I have a dog called Rex.",
            "What is the capital of France?", "Can you recommend a book about space?"]
    with TypedConversation(config, FileSink(None, realtime=False), history=None,
                           registry=registry) as chat:
        summaries: list[HistorySummarized] = []
        chat.engine.subscribe(lambda e: summaries.append(e) if isinstance(e, HistorySummarized) else None)
        for i, text in enumerate(said):
            answer = chat.answer(text, speak=False)
            assert answer.errors == [] and answer.reply
            if i:  # a turn fell out: wait for its summarising call to end (a note or none)
                _wait(lambda t=answer.turn_id: Mark.SUMMARY_END in chat.engine.metrics.turn(0, t).marks,
                      120, "the summarising call")
        unit = chat.engine.units[0]
        assert summaries, "SmolLM2 wrote no note about any of the three turns that fell out"
        summary = unit.chat_history.summary
        assert summary == summaries[-1].summary and 0 < len(summary) <= 600
        assert "The user" in summary  # a note, as the examples show
        prompt = unit.chat_history.messages_for("What is my dog's name?", "S", 1)
        assert prompt[1] == {"role": "system", "content": SUMMARY_PREFIX + summary}
        assert len(prompt) == 5  # system, summary, the last turn (user, assistant), the question
