"""Turn-taking from per-frame speech probabilities: start, partials, end, reopen, commit.

Pure logic, no threads: the VAD stage feeds it frames and turns its events into messages.
A speech segment ends after ``min_silence_ms`` of silence; the turn is committed only
after a further ``reopen_grace_ms`` without speech. Speech that resumes inside the grace
reopens the same turn with the combined audio. With ``speculative`` on, the segment is
sent early, after ``speculative_start_ms`` of silence (at most ``min_silence_ms``), so STT
and LLM overlap the rest of the silence and the grace; any sound before the segment ends,
or speech inside the grace, drops that work (``Reopened``). Without it, the segment is
sent at the commit. Nothing commits before the segment ends, except on a confident
end-of-turn decision (``commit_now``) once the speculative segment went out.
"""

from __future__ import annotations

import enum
import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from engine.config import EndOfTurn, TurnConfig, VadConfig

_HYSTERESIS = 0.15  # below threshold - this counts as silence (as Silero's own iterator)


class TurnState(enum.Enum):
    IDLE = "idle"
    SPEECH = "speech"
    GRACE = "grace"  # segment ended; waiting to see whether the user resumes


@dataclass(frozen=True, slots=True)
class Started:
    t_start: float
    resumed: bool  # speech came back inside the grace: the same turn goes on


@dataclass(frozen=True, slots=True)
class Partial:
    audio: np.ndarray = field(repr=False)
    t_speech_start: float


@dataclass(frozen=True, slots=True)
class SegmentEnded:
    """Speculative start: the speech stopped; the turn may still reopen. ``voiced_samples``:
    the samples of ``audio`` up to the end of its last voiced frame (the rest is padding)."""

    audio: np.ndarray = field(repr=False)
    t_speech_start: float
    t_speech_end: float
    voiced_samples: int = 0


@dataclass(frozen=True, slots=True)
class Reopened:
    """Speech resumed after a speculative SegmentEnded: its work must be dropped."""


@dataclass(frozen=True, slots=True)
class Committed:
    """The turn is over. ``audio`` is the whole turn (also sent when speculative)."""

    audio: np.ndarray = field(repr=False)
    t_speech_start: float
    t_speech_end: float
    speculated: bool  # a SegmentEnded with this same audio was already sent
    voiced_samples: int = 0  # as SegmentEnded's


TurnEvent = Started | Partial | SegmentEnded | Reopened | Committed


class TurnDetector:
    """Feed ``push(frame, probability, t_frame_start)`` for consecutive frames."""

    def __init__(self, vad: VadConfig, turns: TurnConfig, frame_samples: int = 512,
                 sample_rate: int = 16000) -> None:
        self.frame_s = frame_samples / sample_rate
        self._preroll: deque[tuple[np.ndarray, float]] = deque()
        self.configure(vad, turns)
        self.reset()

    def configure(self, vad: VadConfig, turns: TurnConfig) -> None:
        """Take new thresholds and waits; safe between two frames, even mid-turn."""
        self.threshold = vad.threshold
        self.silence_threshold = max(vad.threshold - _HYSTERESIS, 0.01)
        self.start_frames = max(1, math.ceil(vad.min_speech_ms / 1000 / self.frame_s))
        self.end_frames = max(1, math.ceil(vad.min_silence_ms / 1000 / self.frame_s))
        self.start_spec_frames = min(self.end_frames, max(
            1, math.ceil(turns.speculative_start_ms / 1000 / self.frame_s)))
        self.grace_frames = math.ceil(turns.reopen_grace_ms / 1000 / self.frame_s)
        self.pad_frames = math.ceil(vad.pad_ms / 1000 / self.frame_s)
        self.speculative = turns.speculative
        self.manual = turns.end_of_turn is EndOfTurn.MANUAL  # silence never ends a turn
        self.live = turns.live_transcription
        self.live_interval = turns.live_transcription_interval
        self._preroll = deque(self._preroll, maxlen=self.pad_frames + self.start_frames)

    def reset(self) -> None:
        self.state = TurnState.IDLE
        self._frames: list[np.ndarray] = []  # the turn's audio, from its pre-roll on
        # Each frame's own capture time: a file read faster than real time has no
        # steady clock, so times are never extrapolated from the first frame.
        self._times: list[float] = []
        self._voiced_run = 0
        self._silent_run = 0
        self._last_voiced = 0  # index in _frames of the last voiced frame
        self._t_start = 0.0
        self._t_end = 0.0
        self._t_run_start = 0.0
        self._speculated = False
        self._next_partial_at = 0.0
        self._preroll.clear()

    @property
    def in_turn(self) -> bool:
        return self.state is not TurnState.IDLE

    def push(self, frame: np.ndarray, probability: float, t: float) -> list[TurnEvent]:
        """One frame of ``frame_samples`` samples whose first sample is at time ``t``."""
        voiced = probability >= self.threshold
        if self.state is TurnState.IDLE:
            return self._idle(frame, voiced, t)
        self._frames.append(frame)
        self._times.append(t)
        silent = probability < self.silence_threshold
        if self.state is TurnState.SPEECH:
            return self._speech(voiced, silent, t)
        return self._grace(voiced, silent, t)

    @property
    def in_grace(self) -> bool:
        """The segment ended and the turn waits to see whether the user resumes."""
        return self.state is TurnState.GRACE

    @property
    def silence_s(self) -> float:
        """Seconds of silence since the last voiced frame of the turn in progress."""
        return (len(self._frames) - 1 - self._last_voiced) * self.frame_s if self._frames else 0.0

    def audio_so_far(self, last_s: float) -> np.ndarray:
        """The last ``last_s`` seconds (whole frames) of the turn's audio up to now,
        trailing silence included (for an end-of-turn model)."""
        frames = min(len(self._frames), math.ceil(last_s / self.frame_s))
        return np.concatenate(self._frames[-frames:]) if frames else np.zeros(0, np.float32)

    @property
    def may_commit_now(self) -> bool:
        """``commit_now`` would commit: the turn is in its grace, or its speculative
        segment went out and only silence came since."""
        return self.state is TurnState.GRACE or (self.state is TurnState.SPEECH
                                                 and self._speculated)

    def commit_now(self) -> list[TurnEvent]:
        """End the turn at once on a confident end-of-turn decision (``may_commit_now``):
        the scores of the speculative segment may come before ``min_silence_ms`` has
        passed, and the segment they judged is the one committed."""
        if self.state is TurnState.SPEECH and self._speculated:
            self._t_end = self._t_frame_end(self._last_voiced)
            return [self._commit()]
        return [self._commit()] if self.state is TurnState.GRACE else []

    def flush(self) -> list[TurnEvent]:
        """The input ended: finish a turn in progress."""
        if self.state is TurnState.IDLE:
            return []
        if self.state is TurnState.SPEECH:
            self._t_end = self._t_frame_end(self._last_voiced)
        return [self._commit()]

    # --------------------------------------------------------------- states
    def _idle(self, frame: np.ndarray, voiced: bool, t: float) -> list[TurnEvent]:
        self._preroll.append((frame, t))
        if not voiced:
            self._voiced_run = 0
            return []
        if self._voiced_run == 0:
            self._t_run_start = t
        self._voiced_run += 1
        if self._voiced_run < self.start_frames:
            return []
        # Speech confirmed: the turn's audio starts pad_frames before the first voiced frame.
        preroll = list(self._preroll)
        keep = min(len(preroll), self._voiced_run + self.pad_frames)
        self._frames = [f for f, _t in preroll[len(preroll) - keep:]]
        self._times = [t_ for _f, t_ in preroll[len(preroll) - keep:]]
        self._t_start = self._t_run_start
        self._last_voiced = len(self._frames) - 1
        self._silent_run = 0
        self.state = TurnState.SPEECH
        self._next_partial_at = self.live_interval
        return [Started(self._t_start, resumed=False)]

    def _speech(self, voiced: bool, silent: bool, t: float) -> list[TurnEvent]:
        events: list[TurnEvent] = []
        if silent:
            self._silent_run += 1
        else:
            if self._speculated:  # sound after the early start: that segment goes on
                events.append(Reopened())
                self._speculated = False
            self._silent_run = 0
            self._last_voiced = len(self._frames) - 1
        if self.live and self._silent_run == 0:
            spoken = len(self._frames) * self.frame_s
            if spoken >= self._next_partial_at:
                events.append(Partial(self._audio(len(self._frames)), self._t_start))
                # Back off for long turns: each partial re-decodes the whole turn.
                self._next_partial_at = spoken + self.live_interval * max(1.0, spoken / 5.0)
        if self.manual:
            return events
        if (self.speculative and self.grace_frames > 0 and not self._speculated
                and self._silent_run >= self.start_spec_frames):
            self._speculated = True
            events.append(SegmentEnded(self._segment_audio(), self._t_start,
                                       self._t_frame_end(self._last_voiced),
                                       self._voiced_samples()))
        if self._silent_run >= self.end_frames:
            self._t_end = self._t_frame_end(self._last_voiced)
            self.state = TurnState.GRACE
            self._voiced_run = 0
            if self.grace_frames == 0:
                events.append(self._commit())
        return events

    def _grace(self, voiced: bool, silent: bool, t: float) -> list[TurnEvent]:
        self._silent_run = self._silent_run + 1 if silent else self._silent_run
        if voiced:
            self._voiced_run += 1
            if self._voiced_run >= self.start_frames:
                events: list[TurnEvent] = []
                if self._speculated:
                    events.append(Reopened())
                    self._speculated = False
                self.state = TurnState.SPEECH
                self._silent_run = 0
                self._last_voiced = len(self._frames) - 1
                events.append(Started(t, resumed=True))
                return events
            return []  # a possible resumption: never commit in the middle of it
        self._voiced_run = 0
        if len(self._frames) - 1 - self._last_voiced >= self.end_frames + self.grace_frames:
            return [self._commit()]
        return []

    # --------------------------------------------------------------- helpers
    def _t_frame_end(self, index: int) -> float:
        end = self._times[index] + self.frame_s
        # A file read faster than real time stamps frames closer together than their
        # length: the next frame's stamp is then the better end time.
        return min(end, self._times[index + 1]) if index + 1 < len(self._times) else end

    def _audio(self, frames: int) -> np.ndarray:
        return np.concatenate(self._frames[:frames]) if frames else np.zeros(0, np.float32)

    def _voiced_samples(self) -> int:
        """Samples from the turn's start to the end of its last voiced frame."""
        return sum(frame.size for frame in self._frames[:self._last_voiced + 1])

    def _segment_audio(self) -> np.ndarray:
        """The speech and ``pad_ms`` after it; silence not heard yet (an early speculative
        start) is zeros, so STT always gets the padding it was tuned with."""
        end = self._last_voiced + 1 + self.pad_frames
        audio = self._audio(min(len(self._frames), end))
        missing = end - len(self._frames)
        if missing > 0 and self._frames:
            audio = np.concatenate([audio, np.zeros(missing * self._frames[0].size, np.float32)])
        return audio

    def _commit(self) -> Committed:
        event = Committed(self._segment_audio(), self._t_start, self._t_end, self._speculated,
                          self._voiced_samples())
        self.reset()
        return event
