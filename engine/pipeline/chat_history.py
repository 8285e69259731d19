"""The chat history of one pipeline unit: items in order, bounded, cancelled turns rolled back.

An item is what the Realtime API calls a conversation item: a user message, an assistant
message, a function call the model made, or a function's output. The LLM stage adds a
turn's items once its reply is complete (``append_turn``); a client adds its own
(``add``: a typed message, a tool's output) and may delete or truncate any. The prompt
is built from the items (``messages_for``) in the OpenAI chat format.

Items of a turn are found by the turn and their kind (``turn_id``, ``ItemKind``, and a
call's ``call_id``); items a client added carry the client's ``item_id``.

The turns the prompt no longer keeps (more than ``llm.history_turns``) may be folded into
a summary, one turn at a time (``pending_summary``, then ``set_summary``: the LLM stage
writes it between turns); the prompt carries it as a system message after the system
prompt. It grows incrementally, the previous summary plus each turn dropped since, and a
new conversation (``clear``) forgets it.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace

from engine.backends.base import ChatMessage, ToolCall
from engine.pipeline.control import CancelReason


class ItemKind(enum.StrEnum):
    """What a history item is; the words are the Realtime API's item types and roles."""

    USER = "user"
    ASSISTANT = "assistant"
    FUNCTION_CALL = "function_call"
    FUNCTION_OUTPUT = "function_call_output"


@dataclass(frozen=True, slots=True)
class HistoryItem:
    """One conversation item. ``text`` is the message text or a function's output;
    ``call_id``, ``name`` and ``arguments`` (JSON text) belong to function calls."""

    kind: ItemKind
    text: str = ""
    turn_id: int | None = None
    item_id: str | None = None
    call_id: str = ""
    name: str = ""
    arguments: str = ""


@dataclass(frozen=True, slots=True)
class SummaryWork:
    """What a summary must take in next: the summary so far and the items of the oldest
    turn that fell out of the prompt since. ``through`` counts the user turns (since the history
    began) the summary covers once this is folded in; ``through_turn`` is the last one's
    turn id (-1: a client's item); ``epoch`` tells whether the history was cleared since."""

    previous: str
    items: tuple[HistoryItem, ...]
    through: int
    through_turn: int
    epoch: int


#: How the prompt introduces the summary of the turns it no longer keeps. Worded for
#: SmolLM2-135M: introduced as "earlier in this conversation" or as notes, it read them
#: back as its reply; as facts, it answered from them ("What is my dog's name?").
SUMMARY_PREFIX = "Facts from earlier in this conversation: "


@dataclass(frozen=True, slots=True)
class Exchange:
    """A user message and the assistant's words after it (a view of the items)."""

    turn_id: int
    user: str
    assistant: str


#: What the unit heard of a turn's reply at barge-in (``Playback.heard_text``).
HeardText = Callable[[int], str]


class ChatHistory:
    """One unit's items, bounded; the prompt takes the last ``history_turns`` user turns.

    The system prompt and the history length are read per turn (they are runtime
    settings), so the history itself outlives any change of them. Thread-safe.
    """

    #: Items kept (the most any prompt can ask for is ``llm.history_turns`` <= 100 turns).
    KEEP = 400

    def __init__(self, heard: HeardText | None = None) -> None:
        """``heard(turn)``: the words of a barged-in reply that were heard, which stay in
        the history (None: a barged-in reply is dropped whole)."""
        self._lock = threading.Lock()
        self._items: list[HistoryItem] = []
        self._heard = heard
        self._summary = ""
        self._covered = 0  # user turns, counted since the history began, the summary covers
        self._trimmed_users = 0  # user turns trimmed off the front (KEEP)
        self._epoch = 0  # bumped by clear(): a summary of the old conversation is void

    def continue_from(self, other: ChatHistory) -> None:
        """Take ``other``'s items and summary: a unit started again goes on with the
        conversation of the one it replaces (``Engine.start(..., carry_conversation=True)``)."""
        with other._lock:
            items, summary = list(other._items), other._summary
            covered, trimmed = other._covered, other._trimmed_users
        with self._lock:
            self._items, self._summary = items, summary
            self._covered, self._trimmed_users = covered, trimmed

    # ------------------------------------------------------------------ the prompt
    def messages_for(self, user_text: str | None, system_prompt: str,
                     history_turns: int, summary: bool = True) -> list[ChatMessage]:
        """Chat messages for a reply: the system prompt, the summary of the turns it no
        longer keeps (when ``summary`` and there is one), the last ``history_turns`` user
        turns with what followed them, then ``user_text`` (None: the items as they stand,
        e.g. after a tool's output or for a greeting)."""
        with self._lock:
            items = self._last_turns(history_turns)
            carried = self._summary if summary and self._dropped(history_turns) > 0 else ""
        return [{"role": "system", "content": system_prompt},
                *([{"role": "system", "content": SUMMARY_PREFIX + carried}] if carried else []),
                *chat_messages(items),
                *([{"role": "user", "content": user_text}] if user_text is not None else [])]

    def _user_starts(self) -> list[int]:
        return [i for i, item in enumerate(self._items) if item.kind is ItemKind.USER]

    def _dropped(self, history_turns: int) -> int:
        """User turns in the items that the prompt no longer keeps."""
        return max(0, len(self._user_starts()) - history_turns) if history_turns > 0 else 0

    # ------------------------------------------------------------------ the summary
    @property
    def summary(self) -> str:
        """The summary of the turns the prompt no longer keeps ("" none yet)."""
        with self._lock:
            return self._summary

    def pending_summary(self, history_turns: int) -> SummaryWork | None:
        """The oldest turn that fell out of a ``history_turns`` prompt and the summary
        does not cover yet (its user item and what followed it; the first also takes any
        items before it), or None: nothing new dropped (``history_turns`` 0 keeps no
        history, so there is nothing to summarise either)."""
        with self._lock:
            dropped = self._dropped(history_turns)
            first = max(0, self._covered - self._trimmed_users)  # in the items' user turns
            if dropped <= 0 or first >= dropped:
                return None
            starts = self._user_starts()
            items = tuple(self._items[starts[first] if first else 0:starts[first + 1]])
            turn = self._items[starts[first]].turn_id
            return SummaryWork(self._summary, items, self._trimmed_users + first + 1,
                               -1 if turn is None else turn, self._epoch)

    def set_summary(self, work: SummaryWork, summary: str) -> bool:
        """Fold ``work`` in: ``summary`` covers it and everything before. False (nothing
        changed) when the history was cleared since, or a newer summary is in."""
        with self._lock:
            if work.epoch != self._epoch or work.through <= self._covered:
                return False
            self._summary, self._covered = summary, work.through
            return True

    def _last_turns(self, turns: int) -> list[HistoryItem]:
        if turns <= 0:
            return []
        starts = [i for i, item in enumerate(self._items) if item.kind is ItemKind.USER]
        if len(starts) <= turns:
            return list(self._items)
        return self._items[starts[-turns]:]

    # ------------------------------------------------------------------ changes
    def append_turn(self, turn_id: int, user: str | None, assistant: str,
                    calls: tuple[ToolCall, ...] = ()) -> None:
        """A finished reply: the user's text (None when it is in the history already),
        the assistant's words, and the functions it called."""
        items = [] if user is None else [HistoryItem(ItemKind.USER, user, turn_id)]
        if assistant:
            items.append(HistoryItem(ItemKind.ASSISTANT, assistant, turn_id))
        items += [HistoryItem(ItemKind.FUNCTION_CALL, "", turn_id, call_id=call.call_id,
                              name=call.name, arguments=call.arguments) for call in calls]
        with self._lock:
            self._items += items
            self._trim()

    def keep_cut_off(self, turn_id: int, user: str, reason: CancelReason) -> None:
        """A reply cut off before the LLM stage added its turn (``on_cancel`` found nothing
        to keep): after a barge-in or a failure the user's words stay, since they were
        really said, with what was heard of the reply; other reasons keep nothing."""
        if reason not in (CancelReason.BARGE_IN, CancelReason.FAILED):
            return
        heard = self._heard(turn_id) if reason is CancelReason.BARGE_IN and self._heard else ""
        with self._lock:
            if any(item.turn_id == turn_id and item.kind is ItemKind.USER for item in self._items):
                return
            self._items.append(HistoryItem(ItemKind.USER, user, turn_id))
            if heard:
                self._items.append(HistoryItem(ItemKind.ASSISTANT, heard, turn_id))
            self._trim()

    def add(self, item: HistoryItem, after: str | None = None) -> None:
        """A client's item, after the item ``after`` names (its ``item_id``), else last."""
        with self._lock:
            at = len(self._items)
            if after is not None:
                at = next((i + 1 for i, old in enumerate(self._items) if old.item_id == after), at)
            self._items.insert(at, item)
            self._trim()

    def _trim(self) -> None:
        cut = max(0, len(self._items) - self.KEEP)
        self._trimmed_users += sum(item.kind is ItemKind.USER for item in self._items[:cut])
        del self._items[:cut]

    def delete(self, *, item_id: str | None = None, turn_id: int | None = None,
               kind: ItemKind | None = None, call_id: str | None = None) -> bool:
        """Remove the item that matches (a client's ``item_id``, or a turn's item of
        ``kind``); True if one was removed."""
        with self._lock:
            kept = [item for item in self._items
                    if not _matches(item, item_id, turn_id, kind, call_id)]
            removed = len(kept) != len(self._items)
            self._items = kept
            return removed

    def truncate(self, text: str, *, item_id: str | None = None,
                 turn_id: int | None = None) -> bool:
        """The assistant message becomes ``text`` (what was heard; empty: removed)."""
        with self._lock:
            for i, item in enumerate(self._items):
                if _matches(item, item_id, turn_id, ItemKind.ASSISTANT, None):
                    if text:
                        self._items[i] = replace(item, text=text)
                    else:
                        del self._items[i]
                    return True
            return False

    def keep_heard(self, turn_id: int, user: str | None, heard: str) -> None:
        """``turn_id``'s reply becomes the words ``heard``; a reply cut off before it was
        recorded (the LLM was still writing) is recorded with them now, after the user's
        words (``user``, when the turn has no user item yet)."""
        if self.truncate(heard, turn_id=turn_id) or not heard:
            return
        with self._lock:
            has_user = any(i.turn_id == turn_id and i.kind is ItemKind.USER for i in self._items)
        self.append_turn(turn_id, None if has_user else user, heard)

    def clear(self) -> None:
        """Forget every item and the summary (a new conversation)."""
        with self._lock:
            self._items.clear()
            self._summary, self._covered, self._trimmed_users = "", 0, 0
            self._epoch += 1

    def on_cancel(self, turn_id: int, reason: CancelReason) -> None:
        """A reopened turn vanishes (its new revision will be added); of a barged-in reply
        only the words heard stay, and the user's words stay, since they were really said."""
        heard = self._heard(turn_id) if reason is CancelReason.BARGE_IN and self._heard else ""
        with self._lock:
            if reason in (CancelReason.REOPENED, CancelReason.CLEARED, CancelReason.NEW_CONVERSATION):
                self._items = [item for item in self._items if item.turn_id != turn_id]
                return
            kept = []
            for item in self._items:
                if item.turn_id == turn_id and item.kind is ItemKind.ASSISTANT:
                    if heard:
                        kept.append(replace(item, text=heard))
                    continue
                kept.append(item)
            self._items = kept

    # ------------------------------------------------------------------ views
    def items(self) -> tuple[HistoryItem, ...]:
        """Every item, oldest first."""
        with self._lock:
            return tuple(self._items)

    def exchanges(self) -> tuple[Exchange, ...]:
        """Each user message with the assistant's words after it (-1: a client's item)."""
        out: list[Exchange] = []
        for item in self.items():
            if item.kind is ItemKind.USER:
                out.append(Exchange(-1 if item.turn_id is None else item.turn_id, item.text, ""))
            elif item.kind is ItemKind.ASSISTANT and out:
                last = out[-1]
                words = f"{last.assistant} {item.text}" if last.assistant else item.text
                out[-1] = Exchange(last.turn_id, last.user, words)
        return tuple(out)


def _matches(item: HistoryItem, item_id: str | None, turn_id: int | None,
             kind: ItemKind | None, call_id: str | None) -> bool:
    if item_id is not None:
        return item.item_id == item_id
    return (turn_id is not None and item.turn_id == turn_id and item.item_id is None
            and (kind is None or item.kind is kind)
            and (call_id is None or item.call_id == call_id))


def chat_messages(items: list[HistoryItem]) -> list[ChatMessage]:
    """Items as OpenAI chat messages. A function call with no output yet is left out (a
    chat API refuses a call that is not answered), and so is an output with no call; an
    assistant's words and the calls right after them are one assistant message."""
    answered = {item.call_id for item in items if item.kind is ItemKind.FUNCTION_OUTPUT}
    called = {item.call_id for item in items if item.kind is ItemKind.FUNCTION_CALL}
    out: list[ChatMessage] = []
    for item in items:
        if item.kind is ItemKind.USER:
            out.append({"role": "user", "content": item.text})
        elif item.kind is ItemKind.ASSISTANT:
            out.append({"role": "assistant", "content": item.text})
        elif item.kind is ItemKind.FUNCTION_CALL:
            if item.call_id not in answered:
                continue
            call = {"id": item.call_id, "type": "function",
                    "function": {"name": item.name, "arguments": item.arguments or "{}"}}
            last = out[-1] if out else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                out.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif item.call_id in called:
            out.append({"role": "tool", "tool_call_id": item.call_id, "content": item.text})
    return out
