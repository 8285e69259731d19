"""Client events checked field by field, into Parley settings and user text.

Every problem is a ``ClientError`` whose ``param`` is the path of the offending field as
the client wrote it (``session.audio.input.turn_detection.threshold``), so the ``error``
event can point at it. Fields Parley has no use for (tracing, truncation, include...) are
accepted and ignored; the ones it cannot honour are ``unsupported``, never silently
dropped.
"""

from __future__ import annotations

from typing import Any

from engine.config import EngineConfig
from engine.errors import ConfigError
from engine.server.stream_audio import CLIENT_RATE

INVALID_VALUE = "invalid_value"
UNSUPPORTED = "unsupported"


class ClientError(Exception):
    """A client event Parley refuses; becomes an ``error`` event."""

    def __init__(self, code: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.param = param


def _type_name(value: Any) -> str:
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string",
            list: "an array", dict: "an object", type(None): "null"}.get(type(value), type(value).__name__)


def expect(value: Any, kind: str, param: str) -> Any:
    """``value`` if it is of ``kind`` (string, integer, number, boolean, object, array);
    else an ``invalid_value`` ClientError naming ``param``."""
    ok = {
        "string": isinstance(value, str),
        "integer": isinstance(value, int) and not isinstance(value, bool),
        "number": isinstance(value, int | float) and not isinstance(value, bool),
        "boolean": isinstance(value, bool),
        "object": isinstance(value, dict),
        "array": isinstance(value, list),
    }[kind]
    if not ok:
        article = "an" if kind[0] in "aeiou" else "a"
        raise ClientError(INVALID_VALUE, f"'{param}' must be {article} {kind}; got {_type_name(value)}",
                          param)
    return value


def _unsupported(param: str, what: str) -> ClientError:
    return ClientError(UNSUPPORTED, f"'{param}': {what}", param)


def check_format(value: Any, param: str) -> None:
    """Only PCM16 at 24 kHz: Parley neither decodes nor encodes G.711."""
    fmt = expect(value, "object", param)
    kind = fmt.get("type", "audio/pcm")
    if kind != "audio/pcm":
        raise _unsupported(f"{param}.type", f"Parley speaks audio/pcm (24 kHz PCM16) only; got {kind!r}")
    rate = fmt.get("rate", CLIENT_RATE)
    if rate != CLIENT_RATE:
        raise _unsupported(f"{param}.rate", f"audio/pcm is 24000 Hz; got {rate!r}")


class SessionChange:
    """The settings a ``session.update`` asks for: ``{"section.key": value}`` with the
    client's field path of each, and the voice to check against the TTS model."""

    def __init__(self) -> None:
        self.overrides: dict[str, Any] = {}
        self.params: dict[str, str] = {}

    def set(self, key: str, value: Any, param: str) -> None:
        self.overrides[key] = value
        self.params[key] = param

    @property
    def voice(self) -> str | None:
        return self.overrides.get("tts.voice")

    def apply_to(self, config: EngineConfig) -> EngineConfig:
        """``config`` with the change; a value Parley rejects is a ClientError naming its
        field (checked one at a time, so the first bad one is the one named)."""
        for key, value in self.overrides.items():
            try:
                config = config.with_overrides({key: value})
            except ConfigError as exc:
                raise ClientError(INVALID_VALUE, str(exc), self.params[key]) from None
        return config


def session_change(session: Any, base: EngineConfig) -> SessionChange:
    """Read a ``session.update``'s ``session``. ``base`` holds the server's defaults, which
    a ``server_vad`` object starts from (it replaces the previous turn detection)."""
    session = expect(session, "object", "session")
    change = SessionChange()
    kind = session.get("type", "realtime")
    if kind != "realtime":
        raise _unsupported("session.type", f"Parley serves realtime sessions only; got {kind!r}")
    if "instructions" in session:
        change.set("llm.system_prompt", expect(session["instructions"], "string", "session.instructions"),
                   "session.instructions")
    if "max_output_tokens" in session:
        value = session["max_output_tokens"]
        tokens = base.llm.max_new_tokens if value == "inf" else expect(
            value, "integer", "session.max_output_tokens")
        change.set("llm.max_new_tokens", tokens, "session.max_output_tokens")
    if session.get("output_modalities") is not None:
        modes = expect(session["output_modalities"], "array", "session.output_modalities")
        if modes != ["audio"]:
            raise _unsupported("session.output_modalities", "Parley always answers with audio "
                               "and its transcript: use [\"audio\"]")
    if session.get("tools"):
        expect(session["tools"], "array", "session.tools")
        raise _unsupported("session.tools", "Parley's language model calls no tools")
    if session.get("audio") is not None:
        audio = expect(session["audio"], "object", "session.audio")
        if audio.get("input") is not None:
            _input(expect(audio["input"], "object", "session.audio.input"), base, change)
        if audio.get("output") is not None:
            _output(expect(audio["output"], "object", "session.audio.output"), change)
    return change


def _input(section: dict, base: EngineConfig, change: SessionChange) -> None:
    prefix = "session.audio.input"
    if section.get("format") is not None:
        check_format(section["format"], f"{prefix}.format")
    if "turn_detection" not in section:
        return
    param = f"{prefix}.turn_detection"
    detection = section["turn_detection"]
    if detection is None:  # the client commits each turn itself
        change.set("turns.end_of_turn", "manual", param)
        change.set("turns.barge_in", "off", param)
        return
    detection = expect(detection, "object", param)
    kind = detection.get("type", "server_vad")
    if kind == "semantic_vad":
        raise _unsupported(f"{param}.type", "Parley detects turns with server_vad only")
    if kind != "server_vad":
        raise ClientError(INVALID_VALUE, f"'{param}.type' must be server_vad; got {kind!r}",
                          f"{param}.type")
    # A new server_vad object replaces the previous one: what it leaves out is the default.
    fields = {"threshold": ("vad.threshold", "number", base.vad.threshold),
              "silence_duration_ms": ("vad.min_silence_ms", "integer", base.vad.min_silence_ms),
              "prefix_padding_ms": ("vad.pad_ms", "integer", base.vad.pad_ms)}
    for name, (key, expected, default) in fields.items():
        value = detection.get(name)
        change.set(key, default if value is None else expect(value, expected, f"{param}.{name}"),
                   f"{param}.{name}")
    change.set("turns.end_of_turn", "silence", param)
    interrupt = detection.get("interrupt_response")
    if interrupt is None:
        change.set("turns.barge_in", base.turns.barge_in.value, f"{param}.interrupt_response")
    else:
        interrupt = expect(interrupt, "boolean", f"{param}.interrupt_response")
        change.set("turns.barge_in", "full-duplex" if interrupt else "off",
                   f"{param}.interrupt_response")
    create = detection.get("create_response")
    if create is not None and not expect(create, "boolean", f"{param}.create_response"):
        raise _unsupported(f"{param}.create_response", "Parley answers every committed turn; "
                           "a turn cannot wait for response.create")
    if detection.get("idle_timeout_ms") is not None:
        expect(detection["idle_timeout_ms"], "integer", f"{param}.idle_timeout_ms")
        raise _unsupported(f"{param}.idle_timeout_ms", "Parley does not prompt an idle user")


def _output(section: dict, change: SessionChange) -> None:
    prefix = "session.audio.output"
    if section.get("format") is not None:
        check_format(section["format"], f"{prefix}.format")
    if section.get("voice") is not None:
        change.set("tts.voice", expect(section["voice"], "string", f"{prefix}.voice"), f"{prefix}.voice")
    if section.get("speed") is not None:
        change.set("tts.speed", expect(section["speed"], "number", f"{prefix}.speed"), f"{prefix}.speed")


def user_text(item: Any) -> str:
    """The text of a ``conversation.item.create`` item: a user message of input_text parts."""
    item = expect(item, "object", "item")
    if item.get("type", "message") != "message":
        raise _unsupported("item.type", f"Parley takes user messages only; got {item.get('type')!r}")
    if item.get("role") != "user":
        raise _unsupported("item.role", f"Parley takes messages with role user; got {item.get('role')!r}")
    parts = expect(item.get("content"), "array", "item.content")
    if not parts:
        raise ClientError(INVALID_VALUE, "'item.content' must not be empty", "item.content")
    texts = []
    for i, part in enumerate(parts):
        part = expect(part, "object", f"item.content[{i}]")
        if part.get("type") != "input_text":
            raise _unsupported(f"item.content[{i}].type",
                               f"Parley takes input_text parts; got {part.get('type')!r} "
                               "(send speech with input_audio_buffer.append)")
        texts.append(expect(part.get("text"), "string", f"item.content[{i}].text"))
    text = "\n".join(t for t in texts if t.strip())
    if not text.strip():
        raise ClientError(INVALID_VALUE, "'item.content' holds no text", "item.content")
    return text
