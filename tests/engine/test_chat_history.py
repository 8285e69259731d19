"""The chat history as items: the prompt it builds (tool calls and outputs paired), what a
client may delete and truncate, and what a barge-in or a reopened turn leaves."""

from __future__ import annotations

import pytest

from engine.backends.base import ToolCall
from engine.pipeline.chat_history import ChatHistory, HistoryItem, ItemKind
from engine.pipeline.control import CancelReason, TurnControl


def test_turns_and_client_items_become_chat_messages_in_order():
    history = ChatHistory()
    history.append_turn(1, "What's the weather?", "Let me look.",
                        (ToolCall("call_1", "get_weather", '{"city":"Paris"}'),))
    history.add(HistoryItem(ItemKind.FUNCTION_OUTPUT, '{"temp_c":21}', item_id="out", call_id="call_1"))
    messages = history.messages_for(None, "Be kind.", 10)
    assert messages == [
        {"role": "system", "content": "Be kind."},
        {"role": "user", "content": "What's the weather?"},
        {"role": "assistant", "content": "Let me look.", "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temp_c":21}'},
    ]


def test_a_call_without_its_output_is_left_out_of_the_prompt():
    history = ChatHistory()
    history.append_turn(1, "Set a timer.", "", (ToolCall("call_2", "timer", "{}"),))
    assert history.messages_for("Hello?", "S", 10)[1:] == [
        {"role": "user", "content": "Set a timer."}, {"role": "user", "content": "Hello?"}]


def test_history_turns_counts_user_turns_with_what_followed_them():
    history = ChatHistory()
    for turn in range(1, 4):
        history.append_turn(turn, f"q{turn}", f"a{turn}")
    assert [m["content"] for m in history.messages_for("q4", "S", 2)] == ["S", "q2", "a2", "q3", "a3", "q4"]
    assert [m["content"] for m in history.messages_for("q4", "S", 0)] == ["S", "q4"]


def test_delete_and_truncate_by_client_id_or_by_turn():
    history = ChatHistory()
    history.add(HistoryItem(ItemKind.USER, "typed", item_id="item_a"))
    history.append_turn(2, None, "A long reply that was cut.")
    assert history.truncate("A long reply", turn_id=2)
    assert history.exchanges()[0].assistant == "A long reply"
    assert history.delete(item_id="item_a") and not history.delete(item_id="item_a")
    assert [i.kind for i in history.items()] == [ItemKind.ASSISTANT]
    assert history.truncate("", turn_id=2) and history.items() == ()  # nothing heard: gone


def test_a_barged_in_reply_keeps_the_words_heard_and_a_reopened_turn_vanishes():
    heard = {1: "Paris is", 2: ""}
    history = ChatHistory(heard=heard.__getitem__)
    history.append_turn(1, "Capital of France?", "Paris is the capital of France.")
    history.append_turn(2, "And Italy?", "Rome.")
    history.on_cancel(1, CancelReason.BARGE_IN)
    history.on_cancel(2, CancelReason.BARGE_IN)
    assert [(e.user, e.assistant) for e in history.exchanges()] == [
        ("Capital of France?", "Paris is"), ("And Italy?", "")]
    history.on_cancel(2, CancelReason.REOPENED)
    assert [e.user for e in history.exchanges()] == ["Capital of France?"]


def test_keep_heard_records_a_reply_cut_off_before_the_llm_recorded_it():
    history = ChatHistory()
    history.add(HistoryItem(ItemKind.USER, "typed question", item_id="item_q"))
    history.keep_heard(7, None, "Once upon")  # a typed turn: its user item is the client's
    history.keep_heard(8, "spoken question", "Well")  # a spoken turn cut while the LLM wrote
    history.keep_heard(9, "nothing heard", "")
    assert [(i.kind, i.text, i.turn_id) for i in history.items()] == [
        (ItemKind.USER, "typed question", None), (ItemKind.ASSISTANT, "Once upon", 7),
        (ItemKind.USER, "spoken question", 8), (ItemKind.ASSISTANT, "Well", 8)]
    history.keep_heard(8, "spoken question", "We")  # a second truncate cuts further
    assert history.items()[-1].text == "We" and len(history.items()) == 4



@pytest.mark.parametrize("reason", [CancelReason.BARGE_IN, CancelReason.FAILED])
def test_a_reply_cut_off_before_it_was_added_keeps_the_users_words(reason):
    # The turn is cancelled while its reply is still being written (nothing added yet),
    # then the LLM stage stops: the user's words stay, they were really said.
    control = TurnControl()
    history = ChatHistory(heard=lambda turn: "It is" if turn == 7 else "")
    control.on_cancel(history.on_cancel)
    history.append_turn(6, "Hello.", "Hi there.")
    generation = control.generation
    assert control.cut_reason(7, generation) is None  # still wanted
    control.cancel_all(7, reason)
    assert control.cut_reason(7, generation) is reason
    history.keep_cut_off(7, "What time is it?", control.cut_reason(7, generation))
    history.keep_cut_off(7, "What time is it?", reason)  # once only
    heard = "It is" if reason is CancelReason.BARGE_IN else ""
    assert [(e.turn_id, e.user, e.assistant) for e in history.exchanges()] == [
        (6, "Hello.", "Hi there."), (7, "What time is it?", heard)]


def test_a_reopened_reply_cut_off_keeps_nothing():
    control = TurnControl()
    history = ChatHistory()
    control.on_cancel(history.on_cancel)
    generation = control.generation
    control.cancel_turn(3, CancelReason.REOPENED)
    history.keep_cut_off(3, "And so my fellow", control.cut_reason(3, generation))
    # Another turn's barge-in makes turn 5's work stale too, but names turn 4's reply.
    control.cancel_all(4, CancelReason.BARGE_IN)
    assert control.cut_reason(5, generation) is None
    assert history.exchanges() == ()
