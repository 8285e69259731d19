"""What a backend of each stage provides. Models are shared; streams and sessions are not.

A loaded backend object is the shared model (one per registry key, handed to every
pipeline unit). Anything with per-conversation state (the VAD's recurrent state, the
LLM's KV cache) lives in an object the model makes per pipeline unit.

Every backend reports ``actual_device``: where its weights really live, read back from
the library (a torch parameter's device, a CTranslate2 model's device, an ONNX session's
providers), not the device it was asked for.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from engine.runtime.devices import Device

#: progress(fraction 0..1 or None when unknown, text) — for long loads and conversions.
Progress = Callable[[float | None, str], None]


def no_progress(fraction: float | None, text: str) -> None:
    """A Progress that ignores everything."""


@dataclass(frozen=True, slots=True)
class LoadRequest:
    """What the registry hands a backend's ``load`` function."""

    model: str  # resolved model id, folder or file (never "auto")
    device: Device
    dtype: str  # "auto" or an explicit dtype
    options: object  # the stage's config section (VadConfig, SttConfig, ...)


class VadStream(Protocol):
    """Per-unit VAD state over one audio stream."""

    def speech_probability(self, frame: np.ndarray) -> float:
        """Probability that ``frame`` (``frame_samples`` float32 at 16 kHz) is speech."""

    def reset(self) -> None:
        """Forget the stream's state (new recording, after a long silence)."""


class VadModel(Protocol):
    sample_rate: int  # 16000
    frame_samples: int  # e.g. 512 for Silero at 16 kHz
    actual_device: str

    def new_stream(self) -> VadStream: ...


@dataclass(frozen=True, slots=True)
class SttResult:
    """A transcription with its own cost."""

    text: str
    audio_seconds: float
    compute_seconds: float

    @property
    def real_time_factor(self) -> float:
        return self.compute_seconds / self.audio_seconds if self.audio_seconds else 0.0


class SttModel(Protocol):
    sample_rate: int  # 16000
    actual_device: str

    def transcribe(self, audio: np.ndarray, language: str | None = None,
                   beam_size: int = 1) -> SttResult:
        """Transcribe 16 kHz mono float32 audio. Thread-safe (locks inside if needed).

        The decoding options travel with each call, so units sharing the model may differ.
        """

    def check_language(self, language: str | None) -> None:
        """ConfigError unless the model can transcribe ``language`` (None: detect)."""


@dataclass(frozen=True, slots=True)
class GenerationOptions:
    """How one reply is generated; sent with every call, never stored on the model."""

    max_new_tokens: int = 60
    temperature: float = 0.0
    repetition_penalty: float = 1.0
    no_repeat_ngram_size: int = 0
    #: Also report how likely the user's message ends where it does (learned end of
    #: turn): the probability of the end-of-message token right after the user's text.
    score_end_of_turn: bool = False

    @classmethod
    def from_config(cls, config) -> GenerationOptions:
        """The options of an ``LlmConfig``."""
        return cls(config.max_new_tokens, config.temperature, config.repetition_penalty,
                   config.no_repeat_ngram_size)


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
    #: On the first step, when asked for and the backend can tell: P(end of message) after
    #: the user's text, read from the prefill's logits at no extra forward pass.
    end_of_turn_probability: float | None = None


class LlmSession(Protocol):
    """One conversation's decoding state (KV cache) on a shared model."""

    def generate(self, messages: list[dict[str, str]], options: GenerationOptions,
                 should_stop: Callable[[], bool]) -> Iterator[LlmStep]:
        """Stream the reply to ``messages`` (chat format, system first).

        Checks ``should_stop`` before every token and ends early when it is true.
        Must be iterated in the thread that owns the session.
        """


class LlmModel(Protocol):
    actual_device: str

    def new_session(self) -> LlmSession: ...


@dataclass(frozen=True, slots=True)
class TtsChunk:
    audio: np.ndarray = field(repr=False)  # float32 mono
    sample_rate: int


class TtsModel(Protocol):
    sample_rate: int
    actual_device: str

    def synthesize(self, text: str, should_stop: Callable[[], bool], voice: str = "auto",
                   speed: float = 1.0) -> Iterator[TtsChunk]:
        """Speak ``text`` (already made speakable); yields audio as it is made, stops
        early when asked. ``voice`` and ``speed`` travel with each call."""

    def check_voice(self, voice: str) -> None:
        """ConfigError unless ``voice`` (or ``auto``) is a voice of this model."""
