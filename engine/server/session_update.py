"""``session.update`` read field by field: honoured, mapped, ignored or refused on its own.

A field that cannot be honoured never discards the rest of the update. What a client
gets for each field (the README's realtime section has the table):

- honoured: ``instructions``, ``max_output_tokens``, ``output_modalities``, ``tools``,
  ``tool_choice``, the audio formats (PCM16 at 24 kHz), ``server_vad``'s fields (its
  ``idle_timeout_ms`` too: the server prompts an idle user, ``engine.server.app``), the
  voice's ``speed``, the transcription ``language``;
- mapped: ``semantic_vad`` -> Parley's learned end of turn (``eagerness`` -> its
  threshold; silence where the model is missing), OpenAI voice names -> the loaded TTS's
  voices (``engine.backends.voices.OPENAI_VOICE_MATCHES``), any transcription ``model``
  -> the loaded STT; the beta API's top-level fields (``voice``, ``turn_detection``,
  ``input_audio_format``, ``modalities``...) -> their GA places;
- ignored with a log line and a note in ``session.updated``'s ``parley.ignored``:
  ``tracing``, ``include``, ``prompt``, ``truncation``, ``noise_reduction``,
  ``semantic_vad``'s ``idle_timeout_ms`` (OpenAI has it for ``server_vad`` only), the
  transcription ``prompt``, and any field Parley does not know;
- refused, each alone, as an ``error`` event naming the field: a value of the wrong
  type or out of range, and audio formats Parley cannot decode (G.711).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from engine.backends.base import ToolSpec
from engine.config import EngineConfig
from engine.errors import ConfigError
from engine.server.validation import INVALID_VALUE, UNSUPPORTED, ClientError, check_format, expect

log = logging.getLogger("parley.server")

#: semantic_vad's eagerness -> ``turns.end_of_turn_threshold`` (a lower threshold commits
#: sooner); "auto" and "medium" keep the server's own threshold.
EAGERNESS_THRESHOLDS = {"low": 0.5, "high": 0.15}
EAGERNESS = ("auto", "low", "medium", "high")
#: ``idle_timeout_ms`` Parley takes: a prompt sooner than a second after the last reply
#: would talk over the user's first breath; later than an hour is what --idle-timeout-s is for.
IDLE_TIMEOUT_MS_RANGE = (1000, 3_600_000)
_IGNORED = {"tracing": "Parley keeps no traces", "include": "Parley sends no extra fields",
            "prompt": "Parley has no stored prompts: send instructions",
            "truncation": "Parley keeps the last llm.history_turns turns",
            "model": "Parley serves the models it loaded", "object": "", "id": "",
            "expires_at": "", "client_secret": ""}
_KNOWN = {"type", "instructions", "max_output_tokens", "output_modalities", "tools",
          "tool_choice", "audio", "temperature", *_IGNORED}


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What this server's models can do, for mapping a session: the learned end-of-turn
    model is loaded, whether the LLM calls tools (None) or why not."""

    learned_end_of_turn: bool = False
    tool_support: str | None = "this language model backend cannot call tools"


@dataclass(frozen=True, slots=True)
class IdleTimeout:
    """A ``session.update``'s ``idle_timeout_ms``: ``ms``, or None for none."""

    ms: int | None


@dataclass
class SessionChange:
    """What one ``session.update`` asks for, once read.

    ``overrides``: Parley settings (``{"section.key": value}``) with the client's field
    path of each in ``params``; ``voice``: the voice name the client gave (mapped later,
    against the TTS model); ``tools``/``tool_choice``/``speak``: None when not given;
    ``errors``: the fields refused; ``ignored`` and ``notes``: said in ``session.updated``;
    ``idle_timeout``: the turn detection's ``idle_timeout_ms`` when the update set turn
    detection (a new object without it, or no server_vad, turns it off), else None.
    """

    overrides: dict[str, Any] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)
    voice: str | None = None
    tools: tuple[ToolSpec, ...] | None = None
    tool_choice: str | None = None
    speak: bool | None = None
    errors: list[ClientError] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    idle_timeout: IdleTimeout | None = None

    def set(self, key: str, value: Any, param: str) -> None:
        self.overrides[key] = value
        self.params[key] = param

    def ignore(self, param: str, why: str) -> None:
        line = f"{param}: {why}" if why else param
        log.info("session.update: ignored %s", line)
        self.ignored.append(line)

    def apply_to(self, config: EngineConfig) -> EngineConfig:
        """``config`` with every override Parley accepts; each refused one is recorded in
        ``errors`` and left out (the others still apply)."""
        for key, value in self.overrides.items():
            try:
                config = config.with_overrides({key: value})
            except ConfigError as exc:
                self.errors.append(ClientError(INVALID_VALUE, str(exc), self.params[key]))
        return config


def _typed(change: SessionChange, key: str, value: Any, kind: str, param: str) -> None:
    """Set ``key`` to ``value`` if it is of ``kind`` (``expect``'s kinds)."""
    change.set(key, expect(value, kind, param), param)


def _voice(change: SessionChange, value: Any, param: str) -> None:
    value = value.get("id") if isinstance(value, dict) else value
    change.voice = expect(value, "string", param)


def _field(change: SessionChange, read, *args) -> None:
    """Run one field's reader; a ClientError refuses that field only."""
    try:
        read(*args)
    except ClientError as exc:
        change.errors.append(exc)


def session_change(session: Any, base: EngineConfig, capabilities: Capabilities) -> SessionChange:
    """Read a ``session.update``'s ``session``. ``base`` holds the server's defaults, which
    a turn-detection object starts from (it replaces the previous one). Only a
    ``session`` that is not an object, or of a type Parley does not serve, raises."""
    session = _beta_to_ga(dict(expect(session, "object", "session")))
    change = SessionChange()
    kind = session.get("type", "realtime")
    if kind != "realtime":
        raise ClientError(UNSUPPORTED, f"'session.type': Parley serves realtime sessions only; "
                          f"got {kind!r}", "session.type")
    for name in sorted(set(session) - _KNOWN):
        change.ignore(f"session.{name}", "not a field Parley knows")
    for name, why in _IGNORED.items():
        if session.get(name) is not None and why:
            change.ignore(f"session.{name}", why)
    if "instructions" in session:
        _field(change, _typed, change, "llm.system_prompt", session["instructions"], "string",
               "session.instructions")
    if session.get("max_output_tokens") is not None:
        _field(change, _max_tokens, session["max_output_tokens"], base, change)
    if session.get("temperature") is not None:
        _field(change, _typed, change, "llm.temperature", session["temperature"], "number",
               "session.temperature")
    if session.get("output_modalities") is not None:
        _field(change, _modalities, session["output_modalities"], change)
    if session.get("tools") is not None:
        _field(change, _tools, session["tools"], capabilities, change)
    if session.get("tool_choice") is not None:
        _field(change, _tool_choice, session["tool_choice"], "session.tool_choice", change)
    if session.get("audio") is not None:
        try:
            audio = expect(session["audio"], "object", "session.audio")
        except ClientError as exc:
            change.errors.append(exc)
            return change
        if audio.get("input") is not None:
            _field(change, _input, audio["input"], base, capabilities, change)
        if audio.get("output") is not None:
            _field(change, _output, audio["output"], change)
    return change


def _beta_to_ga(session: dict) -> dict:
    """The beta API's top-level fields moved to where the GA API has them."""
    audio = dict(session.get("audio") or {}) if isinstance(session.get("audio"), dict | None) else None
    if audio is None:
        return session
    moves = {"input_audio_format": ("input", "format"), "output_audio_format": ("output", "format"),
             "turn_detection": ("input", "turn_detection"),
             "input_audio_transcription": ("input", "transcription"),
             "input_audio_noise_reduction": ("input", "noise_reduction"),
             "voice": ("output", "voice"), "speed": ("output", "speed")}
    for old, (side, name) in moves.items():
        if old in session:
            value = session.pop(old)
            if isinstance(value, str) and name == "format":
                value = {"type": "audio/pcm" if value == "pcm16" else value}
            part = dict(audio.get(side) or {})
            part.setdefault(name, value)
            audio[side] = part
    if "modalities" in session:
        modes = session.pop("modalities")
        session.setdefault("output_modalities",
                           ["audio"] if isinstance(modes, list) and "audio" in modes else modes)
    if "max_response_output_tokens" in session:
        session.setdefault("max_output_tokens", session.pop("max_response_output_tokens"))
    if audio:
        session["audio"] = audio
    return session


def _max_tokens(value: Any, base: EngineConfig, change: SessionChange) -> None:
    tokens = base.llm.max_new_tokens if value == "inf" else expect(
        value, "integer", "session.max_output_tokens")
    change.set("llm.max_new_tokens", tokens, "session.max_output_tokens")


def modalities(value: Any, param: str) -> bool:
    """``output_modalities`` -> speak the reply? ``["audio"]`` (with its transcript) or
    ``["text"]`` (text only, no TTS)."""
    modes = expect(value, "array", param)
    if modes in (["audio"], ["text", "audio"], ["audio", "text"]):
        return True
    if modes == ["text"]:
        return False
    raise ClientError(INVALID_VALUE, f"'{param}' must be [\"audio\"] or [\"text\"]; got {modes!r}",
                      param)


def _modalities(value: Any, change: SessionChange) -> None:
    change.speak = modalities(value, "session.output_modalities")


def parse_tools(value: Any, param: str) -> tuple[ToolSpec, ...]:
    """Function tools (``{"type": "function", "name", "description", "parameters"}``;
    the chat API's nested ``function`` form is taken too)."""
    tools = []
    for i, tool in enumerate(expect(value, "array", param)):
        where = f"{param}[{i}]"
        tool = expect(tool, "object", where)
        if tool.get("type", "function") != "function":
            raise ClientError(UNSUPPORTED, f"'{where}.type': Parley calls function tools only; "
                              f"got {tool.get('type')!r}", f"{where}.type")
        spec = tool.get("function") if isinstance(tool.get("function"), dict) else tool
        name = expect(spec.get("name"), "string", f"{where}.name")
        if not name or len(name) > 64 or not all(c.isalnum() or c in "_-" for c in name):
            raise ClientError(INVALID_VALUE, f"'{where}.name' must be 1-64 letters, digits, _ "
                              f"or -; got {name!r}", f"{where}.name")
        description = spec.get("description") or ""
        expect(description, "string", f"{where}.description")
        parameters = spec.get("parameters")
        parameters = {"type": "object", "properties": {}} if parameters is None else expect(
            parameters, "object", f"{where}.parameters")
        tools.append(ToolSpec(name, description, parameters))
    names = [t.name for t in tools]
    if len(set(names)) != len(names):
        raise ClientError(INVALID_VALUE, f"'{param}' names a function twice", param)
    return tuple(tools)


def _tools(value: Any, capabilities: Capabilities, change: SessionChange) -> None:
    tools = parse_tools(value, "session.tools")
    if tools and capabilities.tool_support is not None:
        for tool in tools:
            change.ignore(f"session.tools: {tool.name}", f"refused: {capabilities.tool_support}")
        change.notes.append(f"tools are off: {capabilities.tool_support}")
        change.tools = ()
        return
    change.tools = tools


def tool_choice(value: Any, param: str) -> str:
    """``tool_choice``: auto, none, required, or ``{"type": "function", "name": ...}``."""
    if isinstance(value, str):
        if value not in ("auto", "none", "required"):
            raise ClientError(INVALID_VALUE, f"'{param}' must be auto, none, required or a "
                              f"function; got {value!r}", param)
        return value
    choice = expect(value, "object", param)
    name = choice.get("name") or (choice.get("function") or {}).get("name")
    return expect(name, "string", f"{param}.name")


def _tool_choice(value: Any, param: str, change: SessionChange) -> None:
    change.tool_choice = tool_choice(value, param)


def _input(section: Any, base: EngineConfig, capabilities: Capabilities,
           change: SessionChange) -> None:
    prefix = "session.audio.input"
    section = expect(section, "object", prefix)
    if section.get("format") is not None:
        _field(change, check_format, section["format"], f"{prefix}.format")
    if section.get("noise_reduction") is not None:
        change.ignore(f"{prefix}.noise_reduction", "Parley cleans the input with its own echo "
                      "cancellation (aec settings); the client's choice is not applied")
    if section.get("transcription") is not None:
        _field(change, _transcription, section["transcription"], f"{prefix}.transcription", change)
    if "turn_detection" in section:
        _field(change, _turn_detection, section["turn_detection"], f"{prefix}.turn_detection",
               base, capabilities, change)


def _transcription(value: Any, param: str, change: SessionChange) -> None:
    value = expect(value, "object", param)
    if value.get("model") is not None:
        change.notes.append(f"transcription model {expect(value['model'], 'string', f'{param}.model')!r}: "
                            "Parley transcribes with the STT it loaded")
    if value.get("language") is not None:
        change.set("stt.language", expect(value["language"], "string", f"{param}.language"),
                   f"{param}.language")
    if value.get("prompt"):
        change.ignore(f"{param}.prompt", "Parley's STT takes no prompt")


def _turn_detection(detection: Any, param: str, base: EngineConfig, capabilities: Capabilities,
                    change: SessionChange) -> None:
    change.idle_timeout = IdleTimeout(None)  # the new detection says; off unless it is set
    if detection is None:  # the client commits each turn itself
        change.set("turns.end_of_turn", "manual", param)
        change.set("turns.barge_in", "off", param)
        return
    detection = expect(detection, "object", param)
    kind = detection.get("type", "server_vad")
    if kind not in ("server_vad", "semantic_vad"):
        raise ClientError(INVALID_VALUE, f"'{param}.type' must be server_vad or semantic_vad; "
                          f"got {kind!r}", f"{param}.type")
    # A new object replaces the previous one: what it leaves out is the server's default.
    fields = {"threshold": ("vad.threshold", "number", base.vad.threshold),
              "silence_duration_ms": ("vad.min_silence_ms", "integer", base.vad.min_silence_ms),
              "prefix_padding_ms": ("vad.pad_ms", "integer", base.vad.pad_ms)}
    for name, (key, expected, default) in fields.items():
        value = detection.get(name)
        if kind == "semantic_vad" and value is not None:
            change.ignore(f"{param}.{name}", "a server_vad field; semantic_vad has none")
            value = None
        if value is None:
            change.set(key, default, f"{param}.{name}")
        else:
            _field(change, _typed, change, key, value, expected, f"{param}.{name}")
    if kind == "semantic_vad":
        _semantic(detection, param, base, capabilities, change)
    else:
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
        raise ClientError(UNSUPPORTED, f"'{param}.create_response': Parley answers every "
                          "committed turn; a turn cannot wait for response.create",
                          f"{param}.create_response")
    if detection.get("idle_timeout_ms") is not None:
        if kind == "server_vad":
            _field(change, _idle_timeout, detection["idle_timeout_ms"],
                   f"{param}.idle_timeout_ms", change)
        else:
            change.ignore(f"{param}.idle_timeout_ms", "only server_vad has an idle timeout")


def _idle_timeout(value: Any, param: str, change: SessionChange) -> None:
    low, high = IDLE_TIMEOUT_MS_RANGE
    value = expect(value, "integer", param)
    if not low <= value <= high:
        raise ClientError(INVALID_VALUE, f"'{param}' must be from {low} to {high} ms; got "
                          f"{value}", param)
    change.idle_timeout = IdleTimeout(value)


def _semantic(detection: dict, param: str, base: EngineConfig, capabilities: Capabilities,
              change: SessionChange) -> None:
    eagerness = detection.get("eagerness") or "auto"
    if eagerness not in EAGERNESS:
        raise ClientError(INVALID_VALUE, f"'{param}.eagerness' must be one of "
                          f"{', '.join(EAGERNESS)}; got {eagerness!r}", f"{param}.eagerness")
    if not capabilities.learned_end_of_turn:
        change.set("turns.end_of_turn", "silence", param)
        change.notes.append("semantic_vad: the end-of-turn model is not installed here, so "
                            "turns end after silence (server_vad)")
        return
    change.set("turns.end_of_turn", "learned", param)
    threshold = EAGERNESS_THRESHOLDS.get(eagerness, base.turns.end_of_turn_threshold)
    change.set("turns.end_of_turn_threshold", threshold, f"{param}.eagerness")
    change.notes.append(f"semantic_vad: Parley's learned end of turn (Smart Turn), eagerness "
                        f"{eagerness} -> threshold {threshold:g}")


def _output(section: Any, change: SessionChange) -> None:
    prefix = "session.audio.output"
    section = expect(section, "object", prefix)
    if section.get("format") is not None:
        _field(change, check_format, section["format"], f"{prefix}.format")
    if section.get("voice") is not None:
        _field(change, _voice, change, section["voice"], f"{prefix}.voice")
    if section.get("speed") is not None:
        _field(change, _typed, change, "tts.speed", section["speed"], "number", f"{prefix}.speed")
