"""Function calls in a local model's reply: which format its chat template asks for, and a
strict streaming parser that keeps call text out of what is spoken.

Two formats, the ones the chat templates of today's small instruct models ask for:

- ``hermes`` (Qwen2.5, Qwen3, Hermes): each call is a JSON object between tags, one or
  several in a row: ``<tool_call>\\n{"name": "get_weather", "arguments": {"city":
  "Paris"}}\\n</tool_call>``. Text before (and between) calls is an ordinary reply.
- ``llama3`` (Llama 3.1, 3.2, 3.3 JSON tool calling): the whole reply is the call,
  ``{"name": "get_weather", "parameters": {"city": "Paris"}}``, optionally after
  ``<|python_tag|>`` (which may also follow some text). Several calls may be separated by
  ``;``. A Llama 3.1 call may carry ``"type": "function"``.

``ToolCallSplitter`` is fed the reply piece by piece: ``feed`` returns only the text that
can no longer turn out to be part of a call (a trailing ``<tool_c`` or a reply that starts
with ``{`` waits), ``finish`` returns the rest of the text and the checked calls. A call
that is not what the format says (bad JSON, a tool that was not offered, arguments that
are not an object, a tag never closed) is a ``ToolCallError`` naming what was wrong and
quoting the call, never text that reaches the speaker.

The rest is what the local backends share around it: the tools one reply offers
(``offered_tools``, ``choice_hint``) and the chat messages as templates want them
(``template_messages``).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from engine.backends.base import ChatMessage, GenerationOptions, ToolCall, ToolSpec
from engine.backends.llm.text_stream import ThinkFilter, partial_marker
from engine.errors import ConfigError, ModelError

ToolFormat = Literal["hermes", "llama3"]
HERMES: ToolFormat = "hermes"
LLAMA3: ToolFormat = "llama3"

OPEN_TAG = "<tool_call>"
CLOSE_TAG = "</tool_call>"
PYTHON_TAG = "<|python_tag|>"
#: The marker tokens of each format: a tokenizer may hold them as special tokens, which a
#: decode that skips special tokens would drop (and the call would be spoken).
MARKERS: Mapping[ToolFormat, tuple[str, ...]] = {HERMES: (OPEN_TAG, CLOSE_TAG), LLAMA3: (PYTHON_TAG,)}

_EXCERPT_CHARS = 120
#: Said when the reply is asked for a call ("required" or a function's name): templates
#: have no switch that forces one, so the model is told, as the last message.
_REQUIRED_HINT = "Answer only with a call of one of the functions offered; do not reply in words."
_NAMED_HINT = "Answer only with a call of the function {name}; do not reply in words."


class ToolCallError(ModelError):
    """The model wrote a function call that does not parse or check: ``reason`` says what
    was wrong, ``excerpt`` quotes (the start of) the call as written."""

    def __init__(self, reason: str, text: str) -> None:
        self.reason = reason
        self.excerpt = excerpt(text)
        super().__init__(f"the language model wrote a malformed tool call ({reason}): {self.excerpt!r}")


def excerpt(text: str, limit: int = _EXCERPT_CHARS) -> str:
    """``text`` stripped, cut to ``limit`` characters (with an ellipsis) for a message."""
    text = text.strip()
    return text if len(text) <= limit else text[:limit - 1] + "…"


def new_call_id() -> str:
    """A fresh call id in the OpenAI style: ``call_`` and 24 hex digits."""
    return f"call_{secrets.token_hex(12)}"


# ---------------------------------------------------------------------- the template's format
def template_text(chat_template: object) -> str:
    """The template text that renders tools: a string as it is; of several named
    templates (a dict, or transformers' list of ``{"name", "template"}``) the one
    ``apply_chat_template`` picks when tools are given (``tool_use``, else ``default``)."""
    if isinstance(chat_template, str):
        return chat_template
    if isinstance(chat_template, list):
        chat_template = {t.get("name"): t.get("template") for t in chat_template if isinstance(t, dict)}
    if isinstance(chat_template, dict):
        chosen = chat_template.get("tool_use") or chat_template.get("default")
        return chosen if isinstance(chosen, str) else ""
    return ""


def tool_format(chat_template: object) -> ToolFormat | None:
    """The call format ``chat_template`` asks the model for, or None when it renders no
    tools or asks for a format this parser does not read (Qwen3-Coder's ``<function=``
    XML, Llama 3.2's pythonic ``[f(x=1)]``)."""
    text = template_text(chat_template)
    if "tools" not in text:
        return None
    if OPEN_TAG in text:
        return None if "<function=" in text else HERMES
    if PYTHON_TAG in text or ('"parameters"' in text and "<|start_header_id|>" in text):
        return LLAMA3
    return None


def no_tools_reason(model_name: str) -> str:
    """Why a local model whose template has no known tool format cannot call tools."""
    return (f"the chat template of {model_name} offers no tools; models that can: "
            "Qwen2.5-Instruct, Qwen3 or Llama 3.x instruct models, or a remote OpenAI-compatible "
            "LLM that supports tools (llm.backend openai)")


# ---------------------------------------------------------------------- one reply's tools
def offered_tools(options: GenerationOptions) -> tuple[ToolSpec, ...]:
    """The tools this reply offers the model: none for ``tool_choice`` "none", only the
    named one for a function's name, all of them for "auto" and "required". ConfigError
    for a ``tool_choice`` that names no offered tool."""
    tools, choice = options.tools, options.tool_choice
    if not tools or choice == "none":
        return ()
    if choice in ("auto", "required"):
        return tools
    named = tuple(t for t in tools if t.name == choice)
    if not named:
        raise ConfigError(f"tool_choice = {choice!r} is neither auto, none nor required, and "
                          f"no offered tool has that name; offered: {_names(tools)}")
    return named[:1]


def choice_hint(options: GenerationOptions) -> str | None:
    """The instruction that stands in for a forced call ("required", a function's name)
    on a local model, whose template cannot force one; None when the model may choose."""
    if not offered_tools(options) or options.tool_choice == "auto":
        return None
    if options.tool_choice == "required":
        return _REQUIRED_HINT
    return _NAMED_HINT.format(name=options.tool_choice)


def template_messages(messages: Sequence[ChatMessage], hint: str | None = None) -> list[ChatMessage]:
    """``messages`` as chat templates take them, plus ``hint`` as a last system message.

    Plain messages are passed on as they are (the same objects: a conversation without
    tools renders exactly as before). An assistant message's calls get their arguments
    as a dict (Qwen2.5's and Llama's templates ``tojson`` them; a JSON string would be
    quoted twice) and a ``None`` content becomes ``""``; a ``tool`` message gets the
    ``name`` of the function it answers (some templates require it).
    """
    names: dict[str, str] = {}
    converted: list[ChatMessage] = []
    for message in messages:
        calls = message.get("tool_calls")
        if message.get("role") == "assistant" and calls:
            converted.append(_assistant_for_template(message, calls, names))
        elif message.get("role") == "tool" and "name" not in message:
            name = names.get(str(message.get("tool_call_id")))
            converted.append({**message, "name": name} if name else message)
        else:
            converted.append(message)
    if hint:
        converted.append({"role": "system", "content": hint})
    return converted


#: What every local backend tells a chat template: no reasoning before the answer. A hybrid
#: thinking template (Qwen3's) then closes an empty ``<think>`` block in the generation
#: prompt; templates without the switch ignore it. A voice reply has a budget of tens of
#: tokens, which reasoning would spend (and TTS would read out).
THINKING_OFF: Mapping[str, Any] = {"enable_thinking": False}


def render_chat(tokenizer, model_name: str, fmt: ToolFormat | None, messages: Sequence[ChatMessage],
                options: GenerationOptions | None, **kwargs: Any) -> Any:
    """``tokenizer.apply_chat_template`` of ``messages`` with the tools ``options`` offer,
    thinking off (``THINKING_OFF``).

    Without tools it is the plain call (the prompt a conversation always had, so a KV
    cache's prefix stays valid); with tools it adds ``tools=`` and, for a forced
    ``tool_choice``, the hint as a last system message. A Llama 3.x template takes one
    call per assistant message: an answer that made several is rendered as one message
    per call, each followed by its result. ModelError when tools are offered to a
    template without a known ``fmt``, or the template refuses the conversation.
    """
    from jinja2.exceptions import TemplateError

    tools = offered_tools(options) if options is not None else ()
    if tools and fmt is None:
        raise ModelError(f"cannot offer tools: {no_tools_reason(model_name)}")
    hint = choice_hint(options) if options is not None and tools else None
    extra = {"tools": [t.as_openai() for t in tools]} if tools else {}
    converted = template_messages(messages, hint)
    if fmt == LLAMA3:
        converted = one_call_per_message(converted)
    try:
        return tokenizer.apply_chat_template(converted, **{**THINKING_OFF, **kwargs}, **extra)
    except TemplateError as exc:
        raise ModelError(f"the chat template of {model_name} cannot render this conversation: "
                         f"{exc}") from None


def one_call_per_message(messages: Sequence[ChatMessage]) -> list[ChatMessage]:
    """``messages`` with each assistant message of several calls split into one message
    per call, each followed by the ``tool`` message that answers it (matched by
    ``tool_call_id``; answers that match no call follow in their order)."""
    out: list[ChatMessage] = []
    at = 0
    while at < len(messages):
        message = messages[at]
        at += 1
        calls = list(message.get("tool_calls") or ()) if message.get("role") == "assistant" else []
        if len(calls) < 2:
            out.append(message)
            continue
        answers: list[ChatMessage] = []
        while at < len(messages) and messages[at].get("role") == "tool":
            answers.append(messages[at])
            at += 1
        for number, call in enumerate(calls):
            out.append({**message, "content": message.get("content") if number == 0 else "",
                        "tool_calls": [call]})
            answer = next((a for a in answers if str(a.get("tool_call_id")) == str(call.get("id"))), None)
            if answer is not None:
                answers.remove(answer)
                out.append(answer)
        out.extend(answers)
    return out


def _assistant_for_template(message: ChatMessage, calls: Iterable[Any],
                            names: dict[str, str]) -> ChatMessage:
    rendered = []
    for call in calls:
        function = dict(call.get("function") or {})
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            try:
                function["arguments"] = json.loads(arguments) if arguments.strip() else {}
            except ValueError:
                raise ModelError(f"the assistant message's call of {function.get('name')!r} has "
                                 f"arguments that are not JSON: {excerpt(arguments)!r}") from None
        names[str(call.get("id"))] = str(function.get("name"))
        rendered.append({**call, "function": function})
    return {**message, "content": message.get("content") or "", "tool_calls": rendered}


def _names(tools: Iterable[ToolSpec]) -> str:
    return ", ".join(t.name for t in tools) or "none"


# ---------------------------------------------------------------------- checking one call
def checked_call(name: object, arguments: object, tools: Sequence[ToolSpec], source: str,
                 call_id: str | None = None, arguments_key: str = "arguments") -> ToolCall:
    """A ToolCall of ``name`` with ``arguments`` (a dict, stored as compact JSON), after
    checking both against the offered ``tools``; ToolCallError quoting ``source``."""
    if not isinstance(name, str) or not name:
        raise ToolCallError("the call names no function", source)
    if name not in {t.name for t in tools}:
        raise ToolCallError(f"{name!r} is not an offered tool; offered: {_names(tools)}", source)
    if not isinstance(arguments, dict):
        raise ToolCallError(f"{arguments_key!r} must be a JSON object, not "
                            f"{_json_type(arguments)}", source)
    return ToolCall(call_id or new_call_id(), name,
                    json.dumps(arguments, ensure_ascii=False, separators=(",", ":")))


def call_from_json_text(name: str, arguments: str, tools: Sequence[ToolSpec],
                        call_id: str | None = None) -> ToolCall:
    """A call whose arguments arrived as JSON text (an OpenAI server's ``tool_calls``)."""
    source = f"{name}({arguments})"
    try:
        value = json.loads(arguments) if arguments.strip() else {}
    except ValueError as exc:
        raise ToolCallError(f"the arguments are not valid JSON ({exc})", source) from None
    return checked_call(name, value, tools, source, call_id)


def _json_type(value: object) -> str:
    kinds = {str: "a string", list: "an array", bool: "a boolean", int: "a number",
             float: "a number", type(None): "null"}
    return kinds.get(type(value), type(value).__name__)


def _call_object(value: object, fmt: ToolFormat, tools: Sequence[ToolSpec], source: str) -> ToolCall:
    if not isinstance(value, dict):
        raise ToolCallError(f"a call must be a JSON object, not {_json_type(value)}", source)
    key = "arguments" if fmt == HERMES else "parameters"
    allowed = {"name", key} | ({"type"} if fmt == LLAMA3 else set())
    extra = sorted(set(value) - allowed)
    if extra:
        raise ToolCallError(f"unexpected key{'s' if len(extra) > 1 else ''} "
                            f"{', '.join(map(repr, extra))}; a call has {' and '.join(sorted(allowed))}",
                            source)
    if fmt == LLAMA3 and value.get("type", "function") != "function":
        raise ToolCallError(f"'type' must be \"function\", not {value['type']!r}", source)
    if key not in value:
        raise ToolCallError(f"the call has no {key!r}", source)
    return checked_call(value.get("name"), value[key], tools, source, arguments_key=key)


def _json_values(text: str, separators: str, source: str) -> list[Any]:
    """The JSON values ``text`` holds one after another (blanks or ``separators`` between);
    ToolCallError quoting ``source`` where one does not parse. A raw newline or tab inside
    a string (which strict JSON spells ``\\n``) is read as that character: a model that
    writes a multi-line argument that way means it."""
    decoder = json.JSONDecoder(strict=False)
    values, at = [], 0
    while True:
        while at < len(text) and (text[at].isspace() or text[at] in separators):
            at += 1
        if at == len(text):
            return values
        try:
            value, at = decoder.raw_decode(text, at)
        except json.JSONDecodeError as exc:
            raise ToolCallError(f"not valid JSON: {exc.msg} at character {exc.pos}", source) from None
        values.append(value)


# ---------------------------------------------------------------------- the streaming splitter
class ToolCallSplitter:
    """Splits one reply, fed piece by piece, into speakable text and checked calls.

    ``feed(piece)`` returns the text that is safe to speak now; ``finish()`` returns the
    text still held back and the calls, or raises ToolCallError. Use once per reply.
    """

    def __init__(self, fmt: ToolFormat, tools: Sequence[ToolSpec]) -> None:
        self.format = fmt
        self.tools = tuple(tools)
        self._pending = ""  # text not released yet: a possible marker, or call text
        self._in_call = False  # hermes: inside <tool_call>; llama3: the rest is the call
        self._decided = False  # llama3: the reply's first visible characters were read
        self._calls: list[ToolCall] = []

    def feed(self, piece: str) -> str:
        """The text of ``piece`` (with what was held back) that can be spoken now."""
        self._pending += piece
        return self._feed_hermes() if self.format == HERMES else self._feed_llama3()

    def finish(self) -> tuple[str, tuple[ToolCall, ...]]:
        """The text still held back, and the calls of the whole reply."""
        pending, self._pending = self._pending, ""
        if self.format == HERMES:
            if self._in_call:
                raise ToolCallError(f"{OPEN_TAG} is never closed by {CLOSE_TAG}", OPEN_TAG + pending)
            return pending, tuple(self._calls)
        if not self._in_call:
            return pending, ()
        if not pending.strip():
            raise ToolCallError(f"nothing follows {PYTHON_TAG}", PYTHON_TAG + pending)
        values = _json_values(pending, ";", pending)
        return "", tuple(_call_object(v, LLAMA3, self.tools, pending) for v in values)

    def _feed_hermes(self) -> str:
        spoken: list[str] = []
        while True:
            text = self._pending
            if self._in_call:
                end = text.find(CLOSE_TAG)
                if end < 0:
                    if OPEN_TAG in text:
                        raise ToolCallError(f"a {OPEN_TAG} opens inside another call", OPEN_TAG + text)
                    return "".join(spoken)
                self._calls.append(self._hermes_call(text[:end]))
                self._pending, self._in_call = text[end + len(CLOSE_TAG):], False
                continue
            start, stray = text.find(OPEN_TAG), text.find(CLOSE_TAG)
            if stray >= 0 and (start < 0 or stray < start):
                raise ToolCallError(f"{CLOSE_TAG} without a {OPEN_TAG} before it", text[stray:])
            if start >= 0:
                spoken.append(text[:start])
                self._pending, self._in_call = text[start + len(OPEN_TAG):], True
                continue
            keep = partial_marker(text, (OPEN_TAG, CLOSE_TAG))
            spoken.append(text[:len(text) - keep])
            self._pending = text[len(text) - keep:]
            return "".join(spoken)

    def _hermes_call(self, body: str) -> ToolCall:
        source = f"{OPEN_TAG}{body}{CLOSE_TAG}"
        values = _json_values(body, "", source)
        if len(values) != 1:
            raise ToolCallError(f"a {OPEN_TAG} must hold exactly one JSON object, not "
                                f"{len(values)}", source)
        return _call_object(values[0], HERMES, self.tools, source)

    def _feed_llama3(self) -> str:
        text = self._pending
        if self._in_call:
            return ""
        if not self._decided:
            visible = text.lstrip()
            if visible.startswith("{"):
                self._in_call = self._decided = True
                return ""
            if visible.startswith(PYTHON_TAG):
                self._pending = visible[len(PYTHON_TAG):]
                self._in_call = self._decided = True
                return ""
            if not visible or PYTHON_TAG.startswith(visible):
                return ""  # still undecided: blanks, or the start of <|python_tag|>
            self._decided = True
        tag = text.find(PYTHON_TAG)
        if tag >= 0:
            self._pending, self._in_call = text[tag + len(PYTHON_TAG):], True
            return text[:tag]
        keep = partial_marker(text, (PYTHON_TAG,))
        self._pending = text[len(text) - keep:]
        return text[:len(text) - keep]


class CallFilter:
    """One reply's text with any ``<think>`` reasoning dropped (``ThinkFilter``), then
    through a ToolCallSplitter where tools were offered (``fmt`` and ``tools``).
    ``thinking_open``: the prompt left a ``<think>`` block open (``opens_thinking``)."""

    def __init__(self, fmt: ToolFormat | None, tools: Sequence[ToolSpec], *,
                 thinking_open: bool = False) -> None:
        self.thinking = ThinkFilter(opened=thinking_open)
        self.splitter = ToolCallSplitter(fmt, tools) if fmt and tools else None

    def split(self, piece: str, finished: bool) -> tuple[str, tuple[ToolCall, ...]]:
        """What of ``piece`` is spoken now, and (when ``finished``) the reply's calls."""
        piece = self.thinking.feed(piece) + (self.thinking.finish() if finished else "")
        if self.splitter is None:
            return piece, ()
        spoken = self.splitter.feed(piece)
        if not finished:
            return spoken, ()
        rest, calls = self.splitter.finish()
        return spoken + rest, calls


def split_reply(text: str, fmt: ToolFormat, tools: Sequence[ToolSpec]) -> tuple[str, tuple[ToolCall, ...]]:
    """A whole reply's speakable text and calls (``ToolCallSplitter`` in one go)."""
    splitter = ToolCallSplitter(fmt, tools)
    spoken = splitter.feed(text)
    rest, calls = splitter.finish()
    return spoken + rest, calls
