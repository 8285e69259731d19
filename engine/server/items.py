"""The conversation of one Realtime session as items: what the client sees, and where each
item lives in the unit's chat history.

``Conversation`` keeps the items in order as the client knows them (the wire form, for
``conversation.item.retrieve`` and ``previous_item_id``) and, for each, the key of its
twin in the unit's ``ChatHistory``: a client's item by its id, an item Parley made by the
turn it belongs to (the user's words of a spoken turn, the assistant's reply, a call).
``client_item`` reads a ``conversation.item.create`` item into a history item.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from engine.pipeline.chat_history import HistoryItem, ItemKind
from engine.server import wire
from engine.server.validation import INVALID_VALUE, UNSUPPORTED, ClientError, expect

MAX_ITEMS = 512  # items a session remembers (the oldest are forgotten first)


@dataclass(frozen=True, slots=True)
class HistoryKey:
    """Where an item's twin is in the unit's history: a client's ``item_id``, or the
    ``turn_id`` and ``kind`` (and ``call_id``) of an item Parley made."""

    item_id: str | None = None
    turn_id: int | None = None
    kind: ItemKind | None = None
    call_id: str | None = None

    def lookup(self) -> dict:
        """Keyword arguments for ``ChatHistory.delete``."""
        if self.item_id is not None:
            return {"item_id": self.item_id}
        return {"turn_id": self.turn_id, "kind": self.kind, "call_id": self.call_id}


class Conversation:
    """The items of one session in order, with their history keys."""

    def __init__(self) -> None:
        self._order: list[str] = []
        self._items: dict[str, dict] = {}
        self._keys: dict[str, HistoryKey] = {}

    @property
    def last_id(self) -> str | None:
        """The id of the newest item (the ``previous_item_id`` of the next one)."""
        return self._order[-1] if self._order else None

    def add(self, item: dict, key: HistoryKey, after: str | None = None) -> str | None:
        """Record ``item`` (after the item ``after``, else last); returns the id before it."""
        item_id = item["id"]
        if item_id in self._items:
            self._order.remove(item_id)
        at = self._order.index(after) + 1 if after in self._items else len(self._order)
        self._order.insert(at, item_id)
        self._items[item_id], self._keys[item_id] = item, key
        while len(self._order) > MAX_ITEMS:
            old = self._order.pop(0)
            self._items.pop(old, None)
            self._keys.pop(old, None)
        return self._order[at - 1] if at > 0 else None

    def update(self, item: dict) -> None:
        """The item's newer form (its transcript, its status), if it is still known."""
        if item["id"] in self._items:
            self._items[item["id"]] = item

    def get(self, item_id: Any, param: str = "item_id") -> dict:
        """The item with ``item_id``; a ClientError naming ``param`` if there is none."""
        item_id = expect(item_id, "string", param)
        item = self._items.get(item_id)
        if item is None:
            raise ClientError("item_not_found", f"no item with id {item_id[:64]!r} in this "
                              "conversation", param)
        return item

    def key(self, item_id: str) -> HistoryKey:
        return self._keys[item_id]

    def remove(self, item_id: str) -> None:
        self._order.remove(item_id)
        del self._items[item_id], self._keys[item_id]

    def __contains__(self, item_id: object) -> bool:
        return isinstance(item_id, str) and item_id in self._items


def client_item(item: Any, param: str = "item") -> tuple[dict, HistoryItem]:
    """A ``conversation.item.create`` item: its wire form (with an id) and its history item.

    Takes user, assistant and system messages of text parts, ``function_call`` and
    ``function_call_output``; a system message is kept as a user message that says so
    (chat templates take one system prompt only: the session's instructions).
    """
    item = expect(item, "object", param)
    item_id = item.get("id")
    if item_id is not None:
        expect(item_id, "string", f"{param}.id")
        if not item_id or len(item_id) > 64:
            raise ClientError(INVALID_VALUE, f"'{param}.id' must be 1-64 characters", f"{param}.id")
    item_id = item_id or wire.new_id("item")
    kind = item.get("type", "message")
    if kind == "message":
        return _message(item, item_id, param)
    if kind == "function_call_output":
        call_id = expect(item.get("call_id"), "string", f"{param}.call_id")
        output = expect(item.get("output"), "string", f"{param}.output")
        wired = {"id": item_id, "object": "realtime.item", "type": kind, "status": "completed",
                 "call_id": call_id, "output": output}
        return wired, HistoryItem(ItemKind.FUNCTION_OUTPUT, output, item_id=item_id, call_id=call_id)
    if kind == "function_call":
        call_id = expect(item.get("call_id"), "string", f"{param}.call_id")
        name = expect(item.get("name"), "string", f"{param}.name")
        arguments = expect(item.get("arguments", "{}"), "string", f"{param}.arguments")
        try:
            json.loads(arguments)
        except (ValueError, RecursionError):
            raise ClientError(INVALID_VALUE, f"'{param}.arguments' is not JSON text",
                              f"{param}.arguments") from None
        wired = wire.function_call_item(item_id, call_id, name, arguments, "completed")
        return wired, HistoryItem(ItemKind.FUNCTION_CALL, item_id=item_id, call_id=call_id,
                                  name=name, arguments=arguments)
    raise ClientError(INVALID_VALUE, f"'{param}.type' must be message, function_call or "
                      f"function_call_output; got {kind!r}", f"{param}.type")


_TEXT_PARTS = {"user": ("input_text",), "system": ("input_text",),
               "assistant": ("output_text", "text", "output_audio")}


def _message(item: dict, item_id: str, param: str) -> tuple[dict, HistoryItem]:
    role = item.get("role")
    if not isinstance(role, str) or role not in _TEXT_PARTS:
        raise ClientError(INVALID_VALUE, f"'{param}.role' must be user, assistant or system; "
                          f"got {role!r}", f"{param}.role")
    parts = expect(item.get("content"), "array", f"{param}.content")
    texts = []
    for i, part in enumerate(parts):
        where = f"{param}.content[{i}]"
        part = expect(part, "object", where)
        kind = part.get("type")
        if kind not in _TEXT_PARTS[role]:
            hint = " (send speech with input_audio_buffer.append)" if kind == "input_audio" else ""
            raise ClientError(UNSUPPORTED, f"'{where}.type': a {role} message takes "
                              f"{' or '.join(_TEXT_PARTS[role])} parts; got {kind!r}{hint}",
                              f"{where}.type")
        text = part.get("transcript") if kind == "output_audio" else part.get("text")
        texts.append(expect(text if text is not None else "", "string", f"{where}.text"))
    text = "\n".join(t for t in texts if t.strip())
    if not text.strip():
        raise ClientError(INVALID_VALUE, f"'{param}.content' holds no text", f"{param}.content")
    wired = {"id": item_id, "object": "realtime.item", "type": "message", "role": role,
             "status": "completed", "content": [dict(p) for p in parts]}
    if role == "assistant":
        return wired, HistoryItem(ItemKind.ASSISTANT, text, item_id=item_id)
    if role == "system":
        text = f"(The system says: {text})"
    return wired, HistoryItem(ItemKind.USER, text, item_id=item_id)


def history_item(wired: dict) -> HistoryItem:
    """A known item's wire form as a history item (for a response's ``input`` reference)."""
    kind = wired.get("type")
    if kind == "function_call":
        return HistoryItem(ItemKind.FUNCTION_CALL, call_id=wired["call_id"], name=wired["name"],
                           arguments=wired.get("arguments") or "{}")
    if kind == "function_call_output":
        return HistoryItem(ItemKind.FUNCTION_OUTPUT, wired.get("output", ""), call_id=wired["call_id"])
    text = " ".join((part.get("text") or part.get("transcript") or "")
                    for part in wired.get("content", []))
    return HistoryItem(ItemKind.ASSISTANT if wired.get("role") == "assistant" else ItemKind.USER,
                       text.strip())
