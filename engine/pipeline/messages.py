"""The frozen messages that flow between stages.

Every message carries the ``turn_id`` it belongs to and the ``generation`` it was made
under. A stage drops any message whose generation is older than the pipeline's current
one: that is how barge-in and reopened turns cancel work in flight (see ``control.py``).
Times are ``time.perf_counter()`` seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from engine.backends.base import ChatMessage, ToolChoice, ToolSpec


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
    sample), the zero of voice-to-voice latency. ``voiced_samples`` (a final segment):
    the samples of ``audio`` up to its last voiced frame, the rest being the padding after
    it; 0 where unknown.
    """

    audio: np.ndarray = field(repr=False)
    sample_rate: int
    final: bool
    t_speech_start: float
    t_speech_end: float
    revision: int = 0
    voiced_samples: int = 0


@dataclass(frozen=True, slots=True)
class ReplyRequest:
    """How to answer one turn where it differs from the unit's settings (a Realtime
    client's session defaults and its ``response.create``).

    ``instructions`` replaces ``llm.system_prompt`` for this reply; ``speak`` False gives
    a text-only reply (no TTS); ``record`` False is an out-of-band reply, kept out of the
    chat history; ``context`` (when not None) is the conversation to answer instead of
    the history; ``tools`` are offered to the model unless ``tool_choice`` is "none";
    ``max_new_tokens`` caps this reply instead of ``llm.max_new_tokens``; ``answer`` False
    makes no reply at all: the turn's words are only heard (transcribed, and the turn
    ends), as Parley's MCP ``listen`` wants them.
    """

    instructions: str | None = None
    speak: bool = True
    record: bool = True
    context: tuple[ChatMessage, ...] | None = None
    tools: tuple[ToolSpec, ...] = ()
    tool_choice: ToolChoice = "auto"
    max_new_tokens: int | None = None
    answer: bool = True


#: The unit's own settings, unchanged.
PLAIN_REPLY = ReplyRequest()


@dataclass(frozen=True, slots=True)
class Transcript(Message):
    """Text the STT heard; partial while the user speaks, final at the turn's end.

    A typed turn carries its ``request``; with one, an empty ``text`` still gets a reply
    (to the conversation as it stands: a greeting, or the answer after a tool's output).
    """

    text: str
    final: bool
    t_speech_end: float
    revision: int = 0
    request: ReplyRequest | None = None
    #: Other readings of the same speech where the STT was unsure of its words
    #: (``SttResult.other_readings``): the learned end of turn scores each.
    other_readings: tuple[str, ...] = ()
    #: The language of ``text`` (a Whisper code such as "fr"): the one ``stt.language``
    #: names, or with auto the turn's (``engine/stages/stt_language.py``); None where
    #: unknown (a typed turn, a remote STT). The reply is written and spoken in it.
    language: str | None = None
    #: Whisper's probability of ``language`` in this turn's speech, where it was detected.
    language_probability: float | None = None


@dataclass(frozen=True, slots=True)
class TextChunk(Message):
    """A clause or sentence of the assistant's reply, on its way to TTS.

    ``last`` marks the end of the reply (its text may be empty); ``speak`` False: the
    reply is text only, and TTS passes it on without audio. ``language`` (ISO 639-1, e.g.
    "fr") is the reply's language, the turn's: TTS speaks it with a voice of that
    language (``tts.voices``); None: the unit's one voice (``tts.voice``).
    """

    text: str
    last: bool
    speak: bool = True
    language: str | None = None


@dataclass(frozen=True, slots=True)
class AudioOut(Message):
    """Reply audio, float32 mono at ``sample_rate``. ``last`` ends the reply.

    ``text`` is the clause this chunk begins (empty on the chunks that go on with it), so
    playback knows which words were heard by when.
    """

    audio: np.ndarray = field(repr=False)
    sample_rate: int
    last: bool
    text: str = ""


@dataclass(frozen=True, slots=True)
class EndOfStream(Message):
    """The input ended; each stage passes it on after all earlier messages."""
