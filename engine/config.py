"""EngineConfig: frozen per-stage settings, loaded from TOML and validated.

Every setting is declared once, as a dataclass field. The TOML loader, the CLI's flags
(``--stt-device`` is ``stt.device``) and the GUI's QSettings keys (``stt/device``) are all
derived from these fields, so an option is never spelled out twice.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import tomllib
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import ConfigError
from engine.config_mcp import mcp_servers_text

_AUTO = "auto"


class EndOfTurn(enum.Enum):
    """What ends the user's turn."""

    AUTO = "auto"  # learned where its model is installed, else silence (and a note says so)
    LEARNED = "learned"  # after a short silence, an audio model and the LLM judge; grace caps it
    SILENCE = "silence"  # min_silence_ms of silence, then the reopen grace
    MANUAL = "manual"  # only an explicit commit (a Realtime client with turn_detection null)


class TextSignal(enum.Enum):
    """Which model gives the learned end of turn its text signal (``engine/stages/end_of_turn/``)."""

    AUTO = "auto"  # the reply LLM where it gives one, else the bundled small model on the CPU
    REPLY = "reply"  # the reply LLM only (none from mlx-lm or a remote server)
    BUNDLED = "bundled"  # the bundled small model (SmolLM2-135M) on the CPU, whatever the reply LLM
    OFF = "off"  # none: learned end of turn then never commits before the grace ends


class EchoCancellation(enum.Enum):
    """Whether captured audio is cleaned of the reply's own sound (``engine/audio/echo.py``)."""

    AUTO = "auto"  # on where livekit is installed and the reply plays on a speaker
    ON = "on"  # always (a missing livekit is an error that gives the pip command)
    OFF = "off"


class SttWindow(enum.Enum):
    """How much audio Whisper encodes per call (``engine/backends/stt/whisper_window.py``)."""

    FULL = "full"  # every call padded to Whisper's 30 s window (faster-whisper's own path)
    FIT = "fit"  # the audio's own length, at least stt.min_window_s; 30 s when it loops


class BargeIn(enum.Enum):
    """What happens when the user speaks while the assistant is talking."""

    FULL_DUPLEX = "full-duplex"  # headphones: listen always, cut the reply off
    MUTE_WHILE_SPEAKING = "mute-while-speaking"  # speakers: ignore the mic while talking
    OFF = "off"  # never cut off (file input processed as fast as possible)


def _range(lo: float | None = None, hi: float | None = None, help: str = "",
           runtime: bool = False, parse: Any = None) -> dict:
    """Field metadata: bounds, help text, whether changing it needs no model reload, and
    for a structured setting kept as text, ``parse(dotted, raw) -> canonical text``."""
    return {"min": lo, "max": hi, "help": help, "runtime": runtime, "parse": parse}


@dataclass(frozen=True)
class VadConfig:
    """Voice activity detection: where speech starts and ends."""

    backend: str = field(default="silero", metadata=_range(help="VAD backend"))
    model: str = field(default=_AUTO, metadata=_range(help="VAD model file, or auto (bundled)"))
    device: str = field(default=_AUTO, metadata=_range(help="device for the VAD"))
    threshold: float = field(default=0.5,
        metadata=_range(0.01, 0.99, "speech probability threshold", runtime=True))
    min_speech_ms: int = field(default=200,
        metadata=_range(0, 5000, "shortest speech that starts a turn", runtime=True))
    min_silence_ms: int = field(default=300,
        metadata=_range(32, 10000, "silence that ends a speech segment", runtime=True))
    pad_ms: int = field(default=300,
        metadata=_range(0, 2000, "audio kept before and after speech", runtime=True))


@dataclass(frozen=True)
class RemoteFields:
    """How a remote stage (backend 'openai', device 'remote') reaches its OpenAI-compatible server.

    Declared once; SttConfig, LlmConfig and TtsConfig inherit it, and their keys stay flat
    (``llm.base_url``, ``--llm-base-url``, QSettings ``llm/base_url``). Each of them inherits
    ``(RemoteFields, _XxxCore)``: a dataclass lists the fields of its last base first, so a
    stage's own fields come before these ones and the keys keep the order they always had.
    """

    base_url: str = field(default="", metadata=_range(
        help="OpenAI-compatible server for the remote backend, e.g. http://gpu-box:8000/v1"))
    api_key_env: str = field(default="", metadata=_range(
        help="environment variable holding that server's API key (empty: send none)"))
    timeout_s: float = field(default=30.0,
        metadata=_range(0.5, 600.0, "seconds a remote request may wait for the server"))
    retries: int = field(default=1,
        metadata=_range(0, 5, "retries of a failed remote request (never after its first output)"))


#: Whisper's language codes (faster-whisper's ``_LANGUAGE_CODES``, OpenAI Whisper's
#: ``LANGUAGES``): what ``stt.language`` and ``stt.languages`` may name.
WHISPER_LANGUAGES = (
    "af am ar as az ba be bg bn bo br bs ca cs cy da de el en es et eu fa fi fo fr gl gu ha "
    "haw he hi hr ht hu hy id is it ja jw ka kk km kn ko la lb ln lo lt lv mg mi mk ml mn mr "
    "ms mt my ne nl nn no oc pa pl ps pt ro ru sa sd si sk sl sn so sq sr su sv sw ta te tg "
    "th tk tl tr tt uk ur uz vi yi yo zh yue").split()
#: ``stt.language``: detect the language of each turn.
AUTO_LANGUAGE = "auto"


def _language_text(dotted: str, raw: Any, *, allow_auto: bool) -> str:
    """``raw`` as one Whisper language code (lower case), or ``auto`` where allowed (an
    empty value, as older settings wrote it, is ``auto``)."""
    if not isinstance(raw, str):
        raise ConfigError(f"'{dotted}' must be a string; got {raw!r}")
    code = raw.strip().lower()
    if allow_auto and code in ("", AUTO_LANGUAGE):
        return AUTO_LANGUAGE
    if code not in WHISPER_LANGUAGES:
        allowed = ("auto or " if allow_auto else "") + "a Whisper language code: "
        raise ConfigError(f"'{dotted}' = {raw!r} is not a language Whisper knows; it must be "
                          f"{allowed}{', '.join(WHISPER_LANGUAGES)}")
    return code


def _spoken_language_text(dotted: str, raw: Any) -> str:
    """``stt.language``: a Whisper language code or auto."""
    return _language_text(dotted, raw, allow_auto=True)


def _languages_text(dotted: str, raw: Any) -> str:
    """``raw`` (comma-separated codes, or a TOML list) as ``fr,de,es``; empty: any."""
    if isinstance(raw, list | tuple):
        raw = ",".join(str(item) for item in raw)
    if not isinstance(raw, str):
        raise ConfigError(f"'{dotted}' must be comma-separated language codes; got {raw!r}")
    codes = [_language_text(dotted, part.strip(), allow_auto=False) for part in raw.split(",")
             if part.strip()]
    return ",".join(dict.fromkeys(codes))


@dataclass(frozen=True)
class _SttCore:
    """SttConfig's fields listed before its remote ones."""

    backend: str = field(default=_AUTO, metadata=_range(help="STT backend"))
    model: str = field(default=_AUTO, metadata=_range(help="model id, folder, or auto"))
    device: str = field(default=_AUTO, metadata=_range(help="device for STT"))
    dtype: str = field(default=_AUTO,
        metadata=_range(help="compute type (auto, float32, float16, int8)"))
    language: str = field(default="en", metadata=_range(
        help="spoken language: a Whisper language code (en, fr, de...) or auto (detected per "
             "turn, held across the conversation; needs a multilingual model, not a .en one)",
        runtime=True, parse=_spoken_language_text))
    languages: str = field(default="", metadata=_range(
        help="language auto: the comma-separated languages it may detect (e.g. en,fr,de); "
             "empty: any the model knows", runtime=True, parse=_languages_text))
    beam_size: int = field(default=1, metadata=_range(1, 10, "beam width", runtime=True))
    # fit with 10 s (tiny.en, 2 cores): STT ~3x faster than full on the spoken test set
    # and jfk, WER within 0.7 point of full's; 3-5 s windows gained little time and lost
    # more words (bench --quality and its probes, 2026-12-02).
    window: SttWindow = field(default=SttWindow.FIT, metadata=_range(
        help="audio Whisper encodes per call: fit (the audio's own length) or full (30 s, "
             "slower); backends that cannot fit encode 30 s", runtime=True))
    min_window_s: float = field(default=10.0, metadata=_range(
        1.0, 30.0, "window fit: the shortest window encoded (shorter audio is padded)",
        runtime=True))
    continue_turn: bool = field(default=True, metadata=_range(
        help="a turn that paused and went on: transcribe only the audio after the pause, "
             "with the text heard before it as Whisper's earlier text (window fit, "
             "faster-whisper; others transcribe the whole turn)", runtime=True))


@dataclass(frozen=True)
class SttConfig(RemoteFields, _SttCore):
    """Speech to text."""

    stream: bool = field(default=True,
        metadata=_range(help="ask a remote server to stream the transcript (where it can)"))

    @property
    def detects_language(self) -> bool:
        """Whether each turn's language is detected (``language`` auto; empty, as a
        directly built SttConfig may hold it, is auto too, as the parser reads it)."""
        return self.language in ("", AUTO_LANGUAGE)

    @property
    def spoken_language(self) -> str | None:
        """The language ``SttModel.transcribe`` is asked for: None (detect) with auto."""
        return None if self.detects_language else self.language

    @property
    def allowed_languages(self) -> tuple[str, ...]:
        """``languages`` as a tuple; empty: any language the model knows."""
        return tuple(code for code in self.languages.split(",") if code)

    @property
    def fit_window_s(self) -> float | None:
        """What ``SttModel.transcribe`` takes: the shortest window when ``window`` is fit,
        None (Whisper's 30 s) when it is full."""
        return self.min_window_s if self.window is SttWindow.FIT else None


#: What a remote chat-completions request of Parley's always carries, set from other
#: settings (``llm.extra_body`` may not name them).
LLM_REQUEST_FIELDS = ("model", "messages", "stream", "stream_options", "max_tokens",
                      "temperature", "tools", "tool_choice")


def extra_body_text(dotted: str, raw: Any) -> str:
    """The canonical JSON text of ``llm.extra_body`` (a TOML table or JSON object text;
    empty: none), checked: string keys that are not fields Parley sets, JSON values."""
    value = raw
    if isinstance(raw, str):
        if not raw.strip():
            return ""
        try:
            value = json.loads(raw)
        except ValueError as exc:
            raise ConfigError(f"'{dotted}' must be a table of fields (JSON object text here); "
                              f"{raw!r} is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ConfigError(f"'{dotted}' must be a table of fields ([{dotted}] in the config "
                          f"file, or a JSON object); got {value!r}")
    for key in value:
        if key in LLM_REQUEST_FIELDS:
            raise ConfigError(f"'{dotted}' may not set {key!r}: Parley sets it (from "
                              "llm.model, llm.max_new_tokens, llm.temperature, the tools...)")
        if not isinstance(key, str) or not key.strip():
            raise ConfigError(f"'{dotted}' has a field named {key!r}; names are non-empty text")
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False) if value else ""
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"'{dotted}' holds a value JSON cannot carry ({exc}); use text, "
                          "numbers, booleans, arrays and tables") from None


@dataclass(frozen=True)
class _LlmCore:
    """LlmConfig's fields listed before its remote ones."""

    backend: str = field(default=_AUTO, metadata=_range(help="LLM backend"))
    model: str = field(default=_AUTO, metadata=_range(help="model id, folder, or auto"))
    device: str = field(default=_AUTO, metadata=_range(help="device for the LLM"))
    dtype: str = field(default=_AUTO,
        metadata=_range(help="weights dtype (auto, float32, float16, bfloat16)"))
    system_prompt: str = field(
        default="You are a helpful voice assistant. Keep answers short.",
        metadata=_range(help="system prompt", runtime=True),
    )
    max_new_tokens: int = field(default=60,
        metadata=_range(1, 4096, "token cap per reply", runtime=True))
    max_sentences: int = field(default=3,
        metadata=_range(1, 50, "sentence cap per spoken reply", runtime=True))
    history_turns: int = field(default=6,
        metadata=_range(0, 100, "past turns kept in the prompt", runtime=True))
    temperature: float = field(default=0.0,
        metadata=_range(0.0, 2.0, "0 is greedy", runtime=True))
    # The anti-repetition defaults were tuned on the bundled SmolLM2-135M: a model that
    # small loops without them. At their default values they are the model family's to
    # decide (engine/backends/llm/family.py): the small model gets them, an instruct model
    # its generation_config.json's (usually none). Any other value is the user's and wins.
    repetition_penalty: float = field(default=1.3, metadata=_range(
        1.0, 3.0, "penalty on repeated tokens; at the default, only models under 250M "
                  "parameters get it (an instruct model: its generation_config.json's)",
        runtime=True))
    no_repeat_ngram_size: int = field(default=4, metadata=_range(
        0, 20, "forbid repeating n-grams (0 off); at the default, only models under 250M "
               "parameters get it (an instruct model: its generation_config.json's)",
        runtime=True))
    summarize_history: bool = field(default=True, metadata=_range(
        help="summarise the turns the prompt no longer keeps (between turns, in the "
             "background), so a long conversation keeps its start", runtime=True))


@dataclass(frozen=True)
class LlmConfig(RemoteFields, _LlmCore):
    """The language model that writes the replies."""

    extra_body: str = field(default="", metadata=_range(
        help="remote LLM: fields sent beyond the standard OpenAI chat-completions ones, as a "
             "[llm.extra_body] table in the config file (or a JSON object), e.g. "
             "repetition_penalty = 1.1 for a server that takes it", parse=extra_body_text))

    def extra_fields(self) -> dict[str, Any]:
        """``extra_body`` as a dict (empty when unset)."""
        return json.loads(self.extra_body) if self.extra_body else {}



#: ``tts.voices``: the voice of a language is picked from what is installed or downloadable.
AUTO_VOICES = "auto"
#: A ``tts.voices`` voice that keeps a language's replies as text.
NO_VOICE = "none"


def _voices_text(dotted: str, raw: Any) -> str:
    """``tts.voices`` (``fr=VOICE, de=VOICE`` text, or a TOML table) as canonical text;
    empty or ``auto``: ``auto`` (every language picks its voice)."""
    if isinstance(raw, Mapping):
        pairs = [(str(k), v) for k, v in raw.items()]
    elif isinstance(raw, str):
        if raw.strip().lower() in ("", AUTO_VOICES):
            return AUTO_VOICES
        pairs = []
        for part in raw.split(","):
            if not part.strip():
                continue
            language, equals, voice = part.partition("=")
            if not equals:
                raise ConfigError(f"'{dotted}': {part.strip()!r} is not LANGUAGE=VOICE; write "
                                  "e.g. 'fr=ff_siwis, de=/voices/de_DE-thorsten-medium.onnx', "
                                  "or auto")
            pairs.append((language, voice))
    else:
        raise ConfigError(f"'{dotted}' must be LANGUAGE=VOICE pairs (a table in the config "
                          f"file, 'fr=VOICE, de=VOICE' elsewhere) or auto; got {raw!r}")
    voices: dict[str, str] = {}
    for language, voice in pairs:
        code = _language_text(dotted, language, allow_auto=False)
        if not isinstance(voice, str) or not voice.strip() or "," in voice:
            raise ConfigError(f"'{dotted}': the voice of {code!r} must be a voice name, a voice "
                              f"file, auto or {NO_VOICE} (no comma); got {voice!r}")
        voices[code] = voice.strip()
    return ", ".join(f"{code}={voice}" for code, voice in voices.items()) or AUTO_VOICES


@dataclass(frozen=True)
class _TtsCore:
    """TtsConfig's fields listed before its remote ones."""

    backend: str = field(default=_AUTO, metadata=_range(help="TTS backend"))
    model: str = field(default=_AUTO, metadata=_range(help="voice model id, file, or auto"))
    device: str = field(default=_AUTO, metadata=_range(help="device for TTS"))
    voice: str = field(default=_AUTO, metadata=_range(help="speaker or voice name", runtime=True))
    voices: str = field(default=AUTO_VOICES, metadata=_range(
        help="a voice per reply language: 'fr=VOICE, de=VOICE' (a voice of the TTS model, for "
             "Piper also a voice file or hub voice; none: that language is shown as text); "
             "a language not listed (or auto) gets one of its language from what is "
             "installed or downloadable", runtime=True, parse=_voices_text))
    speed: float = field(default=1.0, metadata=_range(0.25, 4.0, "speaking rate", runtime=True))
    first_clause_words: int = field(default=3, metadata=_range(0, 50,
        "the reply's first piece goes to TTS at the first break (comma, dash, 'but'...) after "
        "this many words, so speech starts sooner; 0: the first piece is a whole sentence",
        runtime=True))


@dataclass(frozen=True)
class TtsConfig(RemoteFields, _TtsCore):
    """Text to speech."""

    response_format: str = field(default="pcm",
        metadata=_range(help="audio a remote server sends: pcm (24 kHz 16-bit) or wav"))

    @property
    def voice_map(self) -> dict[str, str]:
        """``voices`` as {language: voice}; empty with auto."""
        if self.voices == AUTO_VOICES:
            return {}
        return dict(pair.split("=", 1) for pair in self.voices.split(", "))


@dataclass(frozen=True)
class AudioConfig:
    """Sound cards and buffers."""

    input_device: str = field(default="default", metadata=_range(help="microphone (name or index)"))
    output_device: str = field(default="default", metadata=_range(help="speaker (name or index)"))
    capture_buffer_s: float = field(default=2.0,
        metadata=_range(0.1, 60.0, "capture buffer before dropping"))
    echo_cancellation: EchoCancellation = field(default=EchoCancellation.AUTO, metadata=_range(
        help="remove the reply's own sound from the microphone: on, off, or auto (on where "
             "livekit is installed and the reply plays on a speaker)", runtime=True))


@dataclass(frozen=True)
class TurnConfig:
    """How turns are taken, reopened and interrupted."""

    reopen_grace_ms: int = field(default=900,
        metadata=_range(0, 5000, "wait after a segment before the turn ends", runtime=True))
    speculative: bool = field(default=True,
        metadata=_range(help="start STT/LLM during the reopen grace", runtime=True))
    live_transcription: bool = field(default=False,
        metadata=_range(help="transcribe while the user speaks", runtime=True))
    live_transcription_interval: float = field(default=0.5,
        metadata=_range(0.1, 10.0, "seconds between partials", runtime=True))
    barge_in: BargeIn = field(default=BargeIn.FULL_DUPLEX,
        metadata=_range(help="barge-in mode", runtime=True))
    # Auto (learned where Smart Turn is installed) by default. Learned (the text signal on
    # the user's words alone, the least sure of the STT's readings) cut no recording of
    # resources/audio inside a sentence (24 ends, 2 runs); with the 100 ms speculative
    # start and the CPU's compute gate its mean wait on finished turns was 0.67 s (p50
    # 0.46 s) against silence's 1.25 s (bench turn-taking, 2026-12-04). On a 2.1 GHz Xeon,
    # after the rounds in README's "Turn-taking" (the last: the text signal on the turn's
    # last 16 words), 0.519 s and 0.521 s mean, 20 of 24 early, 0 cut (2026-12-06).
    # SmolLM2-135M's text signal and Smart Turn cannot tell "Since the commencement of
    # the season." or "One, two, three." from jfk's first pause (1.06 s long), so those
    # two wait for the grace.
    end_of_turn: EndOfTurn = field(default=EndOfTurn.AUTO, metadata=_range(
        help="what ends a turn: silence, learned (Smart Turn audio model + LLM text signal), "
             "manual (an explicit commit), or auto (learned where installed)", runtime=True))
    end_of_turn_threshold: float = field(default=0.25, metadata=_range(0.01, 0.99,
        "learned end of turn: commit early when sqrt(audio p x text p) reaches this",
        runtime=True))
    # 100 ms: the speculative work starts 0.2 s before the segment ends at 300 ms, so the
    # learned decision has its signals sooner; a pause that ends between the two only
    # costs the dropped work. Against 200 ms: mean wait on finished turns 0.73 s vs 0.83 s,
    # no cut (bench turn-taking --runs 2), jfk.flac 626 ms vs 740 ms p50 (bench --runs 5),
    # 2026-12-04. Smart Turn scores a revision only once it heard 128 ms of silence
    # (decide.AUDIO_SCORE_SILENCE_S), however soon the STT starts: at 64 ms the early
    # commits came ~50 ms sooner, but the mean wait was within the runs' spread (0.69 s
    # vs 0.72 s, bench turn-taking --runs 2 on a 2.1 GHz Xeon, 2026-12-06) and each
    # pause of 64 ms inside speech costs a dropped STT call. 64 ms since Smart Turn
    # scores the newest audio once the STT is done and a decision may commit before the
    # segment ends: 0.603 s mean at 64 ms, 0.611 s at 32 (README, "Turn-taking").
    speculative_start_ms: int = field(default=64, metadata=_range(0, 10000,
        "silence before the speculative STT/LLM start (at most vad.min_silence_ms; "
        "sound before the segment ends drops the work)", runtime=True))
    # The text signal on a model of its own: mlx-lm and remote LLMs give none, and without
    # it the learned decision never commits early (mlx-lm: 0 of 12 ends early, mean wait
    # 1.25 s; README, "Turn-taking").
    text_signal: TextSignal = field(default=TextSignal.AUTO, metadata=_range(
        help="learned end of turn's text signal: auto (the reply LLM where it gives one, else "
             "the bundled small model on the CPU), reply, bundled, or off", runtime=True))
    # A remote LLM's requests are metered: each revision of a turn the user pauses in
    # would send one (about four per spoken turn before this cap).
    remote_speculation: int = field(default=1, metadata=_range(0, 100,
        "speculative requests a remote LLM gets per turn before the turn is committed "
        "(later revisions wait for the commit); local models speculate on every revision",
        runtime=True))


@dataclass(frozen=True)
class ToolsConfig:
    """Function tools the assistant may call when its LLM can (``engine/tools/``)."""

    enabled: bool = field(default=True, metadata=_range(
        help="offer tools (clock, timers, calculator, history search, your own) to an LLM "
             "that can call them", runtime=True))
    user_module: str = field(default="", metadata=_range(
        help="your own tools: a Python file or module name with a TOOLS list", runtime=True))
    timeout_s: float = field(default=10.0, metadata=_range(
        0.5, 300.0, "seconds one of your own tools, or an MCP server's, may run; a call "
                    "running longer is stopped and ends with an error (the built-in tools are "
                    "bounded by design)",
        runtime=True))
    trusted: str = field(default="", metadata=_range(
        help="comma-separated tools with side effects that run without asking first",
        runtime=True))
    mcp_servers: str = field(default="", metadata=_range(
        help="MCP servers whose tools the assistant may call: [[tools.mcp_servers]] tables in "
             "the config file (name, command/args/env/cwd or url/headers; secrets as "
             "${VARIABLE}), or the same list as JSON", runtime=True, parse=mcp_servers_text))


@dataclass(frozen=True)
class HistoryConfig:
    """Whether the conversations are stored in the history database (``engine/history/``)."""

    enabled: bool = field(default=True, metadata=_range(
        help="store every conversation in the history (off: nothing is stored; one "
             "conversation is left out with the app's Private conversation or "
             "parley-cli --private)", runtime=True))


@dataclass(frozen=True)
class EngineConfig:
    """Everything the engine needs; the GUI's settings map one-to-one onto it."""

    device: str = field(default=_AUTO, metadata=_range(help="default device of every stage"))
    units: int = field(default=1, metadata=_range(
        1, 64, "pipeline units sharing the models (realtime mode: parley-cli serve)"))
    # 0.8 s: the goal for the first reply audio after the user stops speaking (DESIGN.md,
    # "Latency budget"); engine/models/stack_choice.py spends it.
    voice_budget_s: float = field(default=0.8, metadata=_range(
        0.1, 30.0, "voice-to-voice seconds on the median turn that auto sizes the models to "
                   "(the largest ladder models predicted to answer within it)"))
    vad: VadConfig = field(default_factory=VadConfig)
    stt: SttConfig = field(default_factory=SttConfig)
    llm: LlmConfig = field(default_factory=LlmConfig)
    tts: TtsConfig = field(default_factory=TtsConfig)
    audio: AudioConfig = field(default_factory=AudioConfig)
    turns: TurnConfig = field(default_factory=TurnConfig)
    tools: ToolsConfig = field(default_factory=ToolsConfig)
    history: HistoryConfig = field(default_factory=HistoryConfig)

    # ------------------------------------------------------------------ derived views
    def flat(self) -> dict[str, Any]:
        """Every setting as ``{"section.key": value}`` (top-level keys have no dot)."""
        out: dict[str, Any] = {}
        for name, value in _scalar_items(self):
            out[name] = value
        return out

    def with_overrides(self, overrides: dict[str, Any]) -> EngineConfig:
        """A copy with ``{"section.key": value}`` applied; values may be strings."""
        config: EngineConfig = self
        for dotted, raw in overrides.items():
            config = _replace_dotted(config, dotted, raw)
        return config

    def stage_config(self, stage: str) -> Any:
        """The section of one stage: ``vad``, ``stt``, ``llm`` or ``tts``."""
        return getattr(self, stage)


STAGES = ("vad", "stt", "llm", "tts")


def require_one_unit(config: EngineConfig) -> None:
    """ConfigError unless ``config`` asks for one pipeline unit: several run only in
    realtime mode, where each client has its own."""
    if config.units != 1:
        raise ConfigError(f"'units' = {config.units}: several pipeline units run only in "
                          f"realtime mode; start them with: parley-cli serve "
                          f"--num-pipelines {config.units}")


def config_fields() -> list[tuple[str, dataclasses.Field, type]]:
    """All settings as ``(dotted name, field, type)``, for the CLI and the GUI."""
    out = []
    hints = typing.get_type_hints(EngineConfig)
    for f in dataclasses.fields(EngineConfig):
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            sub_hints = typing.get_type_hints(tp)
            for sf in dataclasses.fields(tp):
                out.append((f"{f.name}.{sf.name}", sf, sub_hints[sf.name]))
        else:
            out.append((f.name, f, tp))
    return out


def load_config(path: str | Path) -> EngineConfig:
    """Read an EngineConfig from a TOML file; every error names the file and key."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from None
    try:
        return config_from_dict(data)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def config_from_flags(args: object, defaults: Mapping[str, Any] | None = None) -> EngineConfig:
    """The config a command line asks for: its ``--config`` file (if given), then the
    command's own ``defaults``, then each setting flag given (argparse stores them under
    their dotted keys, ``args.__dict__["stt.window"]``; None: not given)."""
    values = vars(args)
    path = values.get("config")
    config = load_config(path) if path else EngineConfig()
    flags = {dotted: values[dotted] for dotted, _f, _t in config_fields()
             if values.get(dotted) is not None}
    return config.with_overrides({**(defaults or {}), **flags})


def config_from_dict(data: dict[str, Any]) -> EngineConfig:
    """Build an EngineConfig from nested dicts (TOML tables), checking every key."""
    overrides: dict[str, Any] = {}
    sections = {f.name for f in dataclasses.fields(EngineConfig) if _is_section(f.name)}
    for key, value in data.items():
        if key in sections:
            if not isinstance(value, dict):
                raise ConfigError(f"'{key}' must be a table ([{key}]), got {value!r}")
            for sub, sub_value in value.items():
                overrides[f"{key}.{sub}"] = sub_value
        elif isinstance(value, dict):
            names = ", ".join(f"[{s}]" for s in sorted(sections))
            raise ConfigError(f"unknown section [{key}]; sections are {names}")
        else:
            overrides[key] = value
    return EngineConfig().with_overrides(overrides)


# ---------------------------------------------------------------------- internals
def _is_section(name: str) -> bool:
    return dataclasses.is_dataclass(typing.get_type_hints(EngineConfig)[name])


def _scalar_items(config: EngineConfig):
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if dataclasses.is_dataclass(value):
            for sf in dataclasses.fields(value):
                yield f"{f.name}.{sf.name}", getattr(value, sf.name)
        else:
            yield f.name, value


def _known_keys(cls: type) -> str:
    return ", ".join(f.name for f in dataclasses.fields(cls))


def _replace_dotted(config: EngineConfig, dotted: str, raw: Any) -> EngineConfig:
    section, _, key = dotted.rpartition(".")
    if not section:
        return _replace_field(config, dotted, raw, dotted)
    if "." in section or not hasattr(config, section) or not _is_section(section):
        sections = ", ".join(f"[{s}]" for s in dataclasses.asdict(EngineConfig()) if _is_section(s))
        raise ConfigError(f"unknown section '{section}' (key '{dotted}'); sections are {sections}")
    sub = getattr(config, section)
    return dataclasses.replace(config, **{section: _replace_field(sub, key, raw, dotted)})


def _replace_field(obj: Any, key: str, raw: Any, dotted: str) -> Any:
    cls = type(obj)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    if key not in fields:
        where = f"[{dotted.rpartition('.')[0]}]" if "." in dotted else "the top level"
        known = _known_keys(cls) if "." in dotted else ", ".join(
            n for n in fields if not _is_section(n)
        )
        raise ConfigError(f"unknown key '{dotted}'; keys allowed in {where}: {known}")
    if "." not in dotted and _is_section(key):
        raise ConfigError(f"'{key}' is a section; set its keys as '{key}.<name>'")
    tp = typing.get_type_hints(cls)[key]
    value = coerce(dotted, raw, tp, fields[key].metadata)
    return dataclasses.replace(obj, **{key: value})


def coerce(dotted: str, raw: Any, tp: type, meta: Any = None) -> Any:
    """Convert ``raw`` (a TOML value or a CLI/QSettings string) to ``tp`` and check it."""
    meta = meta or {}
    if meta.get("parse") is not None:
        return meta["parse"](dotted, raw)
    try:
        if isinstance(tp, type) and issubclass(tp, enum.Enum):
            if isinstance(raw, tp):
                return raw
            allowed = [m.value for m in tp]
            if raw not in allowed:
                raise ConfigError(f"'{dotted}' must be one of {', '.join(allowed)}; got {raw!r}")
            return tp(raw)
        if tp is bool:
            if isinstance(raw, bool):
                return raw
            if isinstance(raw, str) and raw.lower() in ("true", "1", "yes", "on", "false", "0", "no", "off"):
                return raw.lower() in ("true", "1", "yes", "on")
            raise ConfigError(f"'{dotted}' must be true or false; got {raw!r}")
        if tp is int:
            if isinstance(raw, bool) or (isinstance(raw, float) and not raw.is_integer()):
                raise ValueError
            value = int(raw)
        elif tp is float:
            if isinstance(raw, bool):
                raise ValueError
            value = float(raw)
        elif tp is str:
            if not isinstance(raw, str):
                raise ConfigError(f"'{dotted}' must be a string; got {raw!r}")
            return raw
        else:  # pragma: no cover - every field type is listed above
            raise ConfigError(f"'{dotted}' has an unsupported type {tp}")
    except (TypeError, ValueError):
        kind = "an integer" if tp is int else "a number"
        raise ConfigError(f"'{dotted}' must be {kind}; got {raw!r}") from None
    lo, hi = meta.get("min"), meta.get("max")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise ConfigError(f"'{dotted}' must be between {lo} and {hi}; got {value}")
    return value
