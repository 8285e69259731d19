"""What a backend of each stage provides. Models are shared; streams and sessions are not.

A loaded backend object is the shared model (one per registry key, handed to every
pipeline unit). Anything with per-conversation state (the VAD's recurrent state, the
LLM's KV cache) lives in an object the model makes per pipeline unit.

Every backend reports ``actual_device``: where its weights really live, read back from
the library (a torch parameter's device, a CTranslate2 model's device, an ONNX session's
providers), not the device it was asked for.

The contracts are Protocols that each backend class names as its base (``class
SileroVad(VadModel)``). A member with a body is an optional capability with its default
("none"): a backend overrides what it has, and callers use the member, never ``getattr``.
A member without a body (``...``) is one the backend must write; pyright reports a backend
class that lacks one where it is instantiated.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar, overload

import numpy as np

from engine.measures import Figure
from engine.runtime.devices import Device

if TYPE_CHECKING:
    from engine.backends.voices import VoiceList
    from engine.runtime.mlx_lock import MlxLock

#: Per-turn figures a backend adds to the stage's own (``figures`` below): none.
NO_FIGURES: Mapping[Figure, float] = MappingProxyType({})

#: progress(fraction 0..1 or None when unknown, text) — for long loads and conversions.
Progress = Callable[[float | None, str], None]


def no_progress(fraction: float | None, text: str) -> None:
    """A Progress that ignores everything."""


_Section = TypeVar("_Section")


@dataclass(frozen=True, slots=True)
class LoadRequest:
    """What the registry hands a backend's ``load`` function."""

    model: str  # resolved model id, folder or file (never "auto")
    device: Device
    dtype: str  # "auto" or an explicit dtype
    options: object  # the stage's config section (VadConfig, SttConfig, ...)

    def options_as(self, section: type[_Section]) -> _Section:
        """``options`` as the config section a backend reads settings from (``TtsConfig``);
        a TypeError for anything else (the registry always passes the stage's section)."""
        if not isinstance(self.options, section):
            raise TypeError(f"a {section.__name__} was expected as the load options, not "
                            f"{type(self.options).__name__}")
        return self.options


class Backend(Protocol):
    """What every loaded model has, whatever its stage (the shared model, not a stream)."""

    actual_device: str
    #: Bytes of the model's own weights where the backend knows them (a file's size, the
    #: parameters' storage); None: unknown (``memory_bytes`` may still measure).
    weights_bytes: int | None = None
    #: The measured lock its compute runs under (``engine.runtime.mlx_lock``), if it has one.
    lock: MlxLock | None = None

    def warmup(self) -> object:
        """Run once right after loading, so the first turn pays no one-off setup cost.
        By default there is nothing to warm up."""
        return None

    def memory_bytes(self) -> int | None:
        """The device memory its compute holds now (a GPU's peak allocation); None: unknown."""
        return None

    def close(self) -> None:
        """Free what the model holds beyond its weights (threads, connections). The
        registry calls it once, when the last reference goes; by default nothing."""


class VadStream(Protocol):
    """Per-unit VAD state over one audio stream."""

    def speech_probability(self, frame: np.ndarray) -> float:
        """Probability that ``frame`` (``frame_samples`` float32 at 16 kHz) is speech."""
        ...

    def reset(self) -> None:
        """Forget the stream's state (new recording, after a long silence)."""
        ...


class VadModel(Backend, Protocol):
    """A voice activity detector: per-unit streams over one shared model."""

    sample_rate: int  # 16000
    frame_samples: int  # e.g. 512 for Silero at 16 kHz

    def new_stream(self) -> VadStream: ...


@dataclass(frozen=True, slots=True)
class SttResult:
    """A transcription with its own cost.

    ``figures`` are per-turn figures the STT stage records beside its own (a remote
    model's network share of the time, ``Figure.STT_NETWORK_S``); none for a local model.
    """

    text: str
    audio_seconds: float
    compute_seconds: float
    figures: Mapping[Figure, float] = field(default_factory=dict)
    #: Other words the model heard in the same audio, where it was unsure (faster-whisper:
    #: the fitted window's decode that was set aside for its doubt, when the 30 s window
    #: heard something else). The learned end of turn scores every reading.
    other_readings: tuple[str, ...] = ()
    #: The language of ``text`` (a Whisper code), where the model says: the one asked for,
    #: or the one it detected; None where unknown (a remote server's).
    language: str | None = None
    #: Where the language was detected: each language's probability in this audio, the
    #: most likely first (Whisper's language detection); empty where it was asked for.
    language_probabilities: tuple[tuple[str, float], ...] = ()

    @property
    def language_probability(self) -> float | None:
        """The detected probability of ``language``; None where it was not detected."""
        return dict(self.language_probabilities).get(self.language) if self.language else None

    @property
    def real_time_factor(self) -> float:
        return self.compute_seconds / self.audio_seconds if self.audio_seconds else 0.0


class SttModel(Backend, Protocol):
    """A speech-to-text model, shared by every pipeline unit."""

    sample_rate: int  # 16000

    def transcribe(self, audio: np.ndarray, language: str | None = None,
                   beam_size: int = 1, fit_window_s: float | None = None) -> SttResult:
        """Transcribe 16 kHz mono float32 audio. Thread-safe (locks inside if needed).

        The decoding options travel with each call, so units sharing the model may differ.
        ``fit_window_s`` (``SttConfig.fit_window_s``): None encodes Whisper's 30 s window;
        a number asks for the audio's own length, padded to at least that many seconds.
        A backend that cannot encode less than 30 s says so in its docstring and ignores it.
        """
        ...

    def transcribe_live(self, audio: np.ndarray, language: str | None = None,
                        beam_size: int = 1, fit_window_s: float | None = None) -> SttResult:
        """A live transcript of speech still going on (``turns.live_transcription``): the
        next one or the final transcript replaces it within a second, so a backend may
        skip the work ``transcribe`` spends on doubtful words. By default ``transcribe``."""
        return self.transcribe(audio, language, beam_size, fit_window_s)

    def check_language(self, language: str | None) -> None:
        """ConfigError unless the model can transcribe ``language`` (None: detect where
        the model can, else its one language; ``auto``, ``stt.language``'s value: detect,
        an error for a model that cannot, naming a multilingual one)."""
        ...

    def continues_transcripts(self) -> bool:
        """Whether ``continue_transcript`` can decode audio after text already heard. By
        default it cannot, and a turn that paused is transcribed whole."""
        return False

    def continue_transcript(self, audio: np.ndarray, previous: str, language: str | None = None,
                            beam_size: int = 1, fit_window_s: float | None = None) -> SttResult:
        """Transcribe ``audio`` that follows the words ``previous`` (the same speaker, just
        before it): the model reads them as context, and the result is the new words only.
        Where ``continues_transcripts()`` is true; options as ``transcribe``."""
        from engine.errors import ModelError

        raise ModelError("this speech-to-text backend cannot continue a transcript")


#: One chat message in the OpenAI chat format: ``{"role": "user", "content": "..."}``;
#: an assistant message may carry ``tool_calls`` (``[{"id", "type": "function",
#: "function": {"name", "arguments": "<JSON text>"}}]``) and a ``tool`` message answers
#: one (``{"role": "tool", "tool_call_id", "content"}``). Backends convert from this.
ChatMessage = dict[str, Any]


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A function the model may call: its name, what it does, its JSON-schema parameters."""

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})

    def as_openai(self) -> dict[str, Any]:
        """The ``tools`` entry of an OpenAI chat request (also what chat templates take)."""
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": dict(self.parameters)}}


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A call the model made: ``arguments`` is the JSON object it wrote, checked (an offered
    function, an object) and kept as compact JSON text; ``call_id`` is the server's id, or
    a fresh ``call_<hex>`` for a local model."""

    call_id: str
    name: str
    arguments: str


#: ``tool_choice``: "auto" (the model decides), "none" (no tools offered), "required"
#: (it must call one), or the name of the one function it must call. A remote server
#: enforces it; a local model is offered only the named function and asked for a call in
#: a last system message (``engine.backends.llm.tool_calls.choice_hint``), no guarantee.
ToolChoice = str


@dataclass(frozen=True, slots=True)
class GenerationOptions:
    """How one reply is generated; sent with every call, never stored on the model."""

    max_new_tokens: int = 60
    temperature: float = 0.0
    #: None: the model family's own (``engine.backends.llm.family``); a value: the user's.
    repetition_penalty: float | None = 1.0
    no_repeat_ngram_size: int | None = 0
    #: Functions offered to the model for this reply (none: a plain reply).
    tools: tuple[ToolSpec, ...] = ()
    tool_choice: ToolChoice = "auto"

    @classmethod
    def from_config(cls, config) -> GenerationOptions:
        """The options of an ``LlmConfig``: an anti-repetition setting at its default
        value is None, left to the model's family."""
        defaults = type(config)()
        return cls(config.max_new_tokens, config.temperature,
                   _unless_default(config.repetition_penalty, defaults.repetition_penalty),
                   _unless_default(config.no_repeat_ngram_size, defaults.no_repeat_ngram_size))


def _unless_default(value, default):
    return None if value == default else value


@dataclass(frozen=True, slots=True)
class LlmStep:
    """One generated token's text plus the running performance figures of the reply."""

    text: str  # the new text this token added (may be empty mid-character)
    tokens: int  # tokens generated so far in this reply
    prompt_tokens: int  # tokens prefilled for this reply (after KV-cache reuse)
    prefill_seconds: float
    tokens_per_second: float  # decode rate so far
    peak_memory_bytes: int | None = None
    finished: bool = False  # True on the last step (EOS or token cap)
    #: On the last step: the functions the model called instead of (or after) its text.
    #: Text that belongs to a call is never in ``text``: it is not spoken.
    tool_calls: tuple[ToolCall, ...] = ()


class LlmSession(Protocol):
    """One conversation's decoding state (KV cache) on a shared model."""

    #: Per-turn figures of the last reply that the LLM stage records beside its own (a
    #: remote model's network share, ``Figure.LLM_NETWORK_S``); none for a local model.
    figures: Mapping[Figure, float] = NO_FIGURES

    def generate(self, messages: list[ChatMessage], options: GenerationOptions,
                 should_stop: Callable[[], bool]) -> Iterator[LlmStep]:
        """Stream the reply to ``messages`` (chat format, system first).

        Checks ``should_stop`` before every token and ends early when it is true.
        Must be iterated in the thread that owns the session.
        """
        ...

    def reset(self) -> None:
        """Forget the conversation (a new one starts): empty the KV cache, if it keeps one."""
        ...

    def sentence_end_probability(self, text: str) -> float:
        """How likely a sentence ends right after ``text`` (the user's words so far, their
        own final punctuation dropped), by the language model alone: no chat template, no
        conversation. The text signal of the learned end of turn, where the model's
        ``end_of_turn_signal()`` is true; it replaces what this session's KV cache holds,
        so it needs a session of its own. Iterate-thread rules as ``generate``."""
        from engine.errors import ModelError

        raise ModelError("this language model backend gives no end-of-turn text signal")


class LlmModel(Backend, Protocol):
    """A language model; each pipeline unit talks to it through its own session."""

    def new_session(self) -> LlmSession: ...

    def tool_support(self) -> str | None:
        """None when the model can call tools (``GenerationOptions.tools``); otherwise why
        it cannot, in words for the user (``session.updated``, the Tools settings)."""
        return "this language model backend cannot call tools"

    def end_of_turn_signal(self) -> bool:
        """Whether its sessions give ``sentence_end_probability`` (the text signal of the
        learned end of turn). By default they do not."""
        return False


@dataclass(frozen=True, slots=True)
class TtsChunk:
    """Reply audio as the TTS model made it.

    ``figures`` (on the reply's first chunk) are per-turn figures the TTS stage records
    beside its own (a remote model's network share, ``Figure.TTS_NETWORK_S``).
    """

    audio: np.ndarray = field(repr=False)  # float32 mono
    sample_rate: int
    figures: Mapping[Figure, float] = field(default_factory=dict)


class TtsModel(Backend, Protocol):
    """A text-to-speech model, shared by every pipeline unit."""

    sample_rate: int

    def synthesize(self, text: str, should_stop: Callable[[], bool], voice: str = "auto",
                   speed: float = 1.0) -> Iterator[TtsChunk]:
        """Speak ``text`` (already made speakable); yields audio as it is made, stops
        early when asked. ``voice`` and ``speed`` travel with each call."""
        ...

    def check_voice(self, voice: str) -> None:
        """ConfigError unless ``voice`` (or ``auto``) is a voice of this model."""
        ...

    def voices(self) -> VoiceList:
        """The values ``tts.voice`` may take with this model, for the voice picker."""
        ...


#: The loaded model of each stage, by stage name (``Engine.models``).
StageModels = Mapping[str, Backend]


@overload
def model_of(models: StageModels, stage: Literal["vad"]) -> VadModel: ...
@overload
def model_of(models: StageModels, stage: Literal["stt"]) -> SttModel: ...
@overload
def model_of(models: StageModels, stage: Literal["llm"]) -> LlmModel: ...
@overload
def model_of(models: StageModels, stage: Literal["tts"]) -> TtsModel: ...
def model_of(models: StageModels, stage: str) -> Backend:
    """The model of ``stage``, typed as that stage's contract.

    The one place where a stage's name becomes its model's type: the registry loads each
    stage's model with a backend of that stage (``BackendRegistry`` is keyed by stage), so
    the model under ``"stt"`` is an ``SttModel``.
    """
    return models[stage]
