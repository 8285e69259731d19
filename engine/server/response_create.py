"""``response.create``'s ``response`` object, read into how Parley makes that one reply.

Honoured: ``instructions`` (this response only), ``output_modalities`` (``["text"]``: no
TTS), ``metadata`` (echoed in ``response.created``/``.done``), ``conversation``
(``"none"``: out of band, kept out of the history), ``input`` (the items to answer
instead of the conversation: inline items or ``item_reference``s), ``tools``,
``tool_choice``, ``max_output_tokens``. A voice or audio format per response is
ignored with a log line (the session's voice speaks every reply).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any

from engine.backends.base import ToolSpec
from engine.pipeline.chat_history import chat_messages
from engine.pipeline.messages import ReplyRequest
from engine.server.items import Conversation, client_item, history_item
from engine.server.session_update import modalities, parse_tools, tool_choice
from engine.server.validation import INVALID_VALUE, ClientError, expect

log = logging.getLogger("parley.server")

MAX_METADATA_KEYS = 16


@dataclass(frozen=True, slots=True)
class ResponseSpec:
    """One ``response.create``: the reply to make, and what the response echoes."""

    request: ReplyRequest
    metadata: dict | None
    has_input: bool  # it brings its own ``input`` (so it cannot be an audio turn's claim)
    plain: bool  # nothing was asked beyond the session's settings


def response_spec(value: Any, defaults: ReplyRequest, conversation: Conversation,
                  tools_refused: str | None) -> ResponseSpec:
    """Read ``response.create``'s ``response`` over the session's ``defaults``.
    ``tools_refused``: why the model cannot call tools (tools given here are then left
    out, with a log line), or None."""
    if value is None:
        return ResponseSpec(defaults, None, False, True)
    spec = expect(value, "object", "response")
    fields: dict[str, Any] = {}
    if spec.get("instructions") is not None:
        fields["instructions"] = expect(spec["instructions"], "string", "response.instructions")
    if spec.get("output_modalities") is not None:
        fields["speak"] = modalities(spec["output_modalities"], "response.output_modalities")
    if spec.get("modalities") is not None:  # the beta API's name
        fields["speak"] = "audio" in expect(spec["modalities"], "array", "response.modalities")
    conversation_mode = spec.get("conversation", "auto")
    if conversation_mode not in ("auto", "none"):
        raise ClientError(INVALID_VALUE, f"'response.conversation' must be auto or none; got "
                          f"{conversation_mode!r}", "response.conversation")
    if conversation_mode == "none":
        fields["record"] = False
    if spec.get("input") is not None:
        fields["context"] = _context(spec["input"], conversation)
    if spec.get("tools") is not None:
        tools: tuple[ToolSpec, ...] = parse_tools(spec["tools"], "response.tools")
        if tools and tools_refused is not None:
            log.info("response.create: tools left out: %s", tools_refused)
            tools = ()
        fields["tools"] = tools
    if spec.get("tool_choice") is not None:
        fields["tool_choice"] = tool_choice(spec["tool_choice"], "response.tool_choice")
    tokens = spec.get("max_output_tokens", spec.get("max_response_output_tokens"))
    if tokens is not None and tokens != "inf":
        tokens = expect(tokens, "integer", "response.max_output_tokens")
        if tokens < 1:
            raise ClientError(INVALID_VALUE, "'response.max_output_tokens' must be at least 1",
                              "response.max_output_tokens")
        fields["max_new_tokens"] = tokens
    for name in ("voice", "audio", "output_audio_format"):
        if spec.get(name) is not None:
            log.info("response.create: response.%s ignored: the session's voice speaks", name)
    metadata = spec.get("metadata")
    if metadata is not None:
        metadata = expect(metadata, "object", "response.metadata")
        if len(metadata) > MAX_METADATA_KEYS or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise ClientError(INVALID_VALUE, f"'response.metadata' holds at most "
                              f"{MAX_METADATA_KEYS} string values", "response.metadata")

    request = replace(defaults, **fields)
    return ResponseSpec(request, metadata, "context" in fields, not fields)


def _context(value: Any, conversation: Conversation) -> tuple:
    items = []
    for i, entry in enumerate(expect(value, "array", "response.input")):
        where = f"response.input[{i}]"
        entry = expect(entry, "object", where)
        if entry.get("type") == "item_reference":
            items.append(history_item(conversation.get(entry.get("id"), f"{where}.id")))
        else:
            items.append(client_item(entry, where)[1])
    return tuple(chat_messages(items))
