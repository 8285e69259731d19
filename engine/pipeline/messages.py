"""The frozen messages that flow between stages.

Every message carries the ``turn_id`` it belongs to and the ``generation`` it was made
under. A stage drops any message whose generation is older than the pipeline's current
one: that is how barge-in and reopened turns cancel work in flight (see ``control.py``).
Times are ``time.perf_counter()`` seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True, slots=True)
class Message:
    """Base of all pipeline messages."""

    turn_id: int
    generation: int


@dataclass(frozen=True, slots=True)
class SpeechSegment(Message):
    """Audio of the user's turn, 16 kHz mono float32.

    ``final`` is False for the growing partial segments sent while the user still
    speaks (progressive transcription) and True for the segment that ends the turn.
    ``t_speech_end`` is when the user stopped speaking (wall clock of the last voiced
    sample), the zero of voice-to-voice latency.
    """

    audio: np.ndarray = field(repr=False)
    sample_rate: int
    final: bool
    t_speech_start: float
    t_speech_end: float
    revision: int = 0


@dataclass(frozen=True, slots=True)
class Transcript(Message):
    """Text the STT heard; partial while the user speaks, final at the turn's end."""

    text: str
    final: bool
    t_speech_end: float
    revision: int = 0


@dataclass(frozen=True, slots=True)
class TextChunk(Message):
    """A clause or sentence of the assistant's reply, on its way to TTS.

    ``last`` marks the end of the reply (its text may be empty).
    """

    text: str
    last: bool


@dataclass(frozen=True, slots=True)
class AudioOut(Message):
    """Reply audio, float32 mono at ``sample_rate``. ``last`` ends the reply."""

    audio: np.ndarray = field(repr=False)
    sample_rate: int
    last: bool


@dataclass(frozen=True, slots=True)
class EndOfStream(Message):
    """The input ended; each stage passes it on after all earlier messages."""
