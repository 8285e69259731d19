"""What the echo canceller measures: how much echo it removes, and whether there is any.

- ``EchoMeter``: ERLE (dB), live, while a reply plays.
- ``EchoDetector``: does the microphone hear the reply at all (on headphones it does not)?
- ``EchoStats``: both, as the app's meter and the tests read them.

Both are fed 10 ms frames by ``engine.audio.echo.EchoCanceller`` on the VAD stage's thread.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from dataclasses import dataclass

import numpy as np

from engine.audio.base import PIPELINE_RATE
from engine.audio.pcm import power, rms

RATE = PIPELINE_RATE
FRAME = RATE // 100  # AEC3 works on 10 ms frames


@dataclass(frozen=True, slots=True)
class EchoStats:
    """What the canceller did: for the app's meter and the tests."""

    active: bool  # cleaning now
    erle_db: float | None  # echo removed over the last seconds of reply (median), dB
    erle_total_db: float | None  # over everything measured so far
    measured_s: float  # seconds of capture measured (a reply was audible)
    processed_s: float  # seconds of capture run through the canceller
    echo_heard: bool | None = None  # does the microphone hear the reply (None: not known yet)


class EchoMeter:
    """ERLE (echo return loss enhancement): captured over cleaned power, in dB, over the
    10 ms frames in which the reply (or its room tail) was audible.

    The live figure is the median over the last ``WINDOW_S`` of such frames: speaking
    over the reply (your voice is in both) or the first second of a new room (the
    canceller still learning) pull single frames down, not the figure, while they are a
    minority. ``erle_total_db`` is the plain power ratio over everything measured.
    """

    TAIL_FRAMES = 30  # the reference counts as audible this long after it stops (300 ms)
    REF_FLOOR = 10 ** (-55 / 10)  # reference power (full scale 1.0) that counts as playing
    MIC_FLOOR = 10 ** (-75 / 10)  # captured power below which there is nothing to measure
    WINDOW_S = 5.0
    MIN_S = 0.5  # measured this long before a live figure is given

    def __init__(self) -> None:
        self._since_ref = self.TAIL_FRAMES + 1
        self._lock = threading.Lock()  # the app reads while the VAD thread adds
        self._recent: deque[float] = deque(maxlen=round(self.WINDOW_S * RATE / FRAME))
        self._in_total = self._out_total = 0.0
        self._frames = 0

    def add(self, near: np.ndarray, far: np.ndarray, out: np.ndarray) -> None:
        self._since_ref = 0 if power(far) > self.REF_FLOOR else self._since_ref + 1
        if self._since_ref > self.TAIL_FRAMES:
            return
        p_in = power(near)
        if p_in < self.MIC_FLOOR:
            return
        p_out = power(out)
        with self._lock:
            self._recent.append(_ratio_db(p_in, p_out))
            self._in_total += p_in
            self._out_total += p_out
            self._frames += 1

    @property
    def measured_s(self) -> float:
        return self._frames * FRAME / RATE

    @property
    def erle_db(self) -> float | None:
        with self._lock:
            recent = list(self._recent)
        if len(recent) * FRAME / RATE < self.MIN_S:
            return None
        return float(np.median(recent))

    @property
    def erle_total_db(self) -> float | None:
        return _ratio_db(self._in_total, self._out_total) if self._frames else None


def _ratio_db(num: float, den: float) -> float:
    return 10.0 * math.log10(max(num, 1e-20) / max(den, 1e-20))


class EchoDetector:
    """Does the microphone hear the reply at all? (On headphones it does not.)

    AEC3 does not know at first, and until it has learnt that there is no echo (5 to 10 s
    of reply, measured) it suppresses whatever the microphone hears while a reply plays:
    on headphones, the user's own barge-in (2.5 s late in the pipeline test). So this
    looks for a linear path from the reference to the microphone itself: every ``EVERY_S``
    the phase-transform cross-correlation (GCC-PHAT, 150 Hz to 5 kHz) of the last
    ``WINDOW_S`` of both, at lags 0 to ``MAX_LAG_S``. An echo makes one sharp peak
    (``PRESENT`` times the rms of the correlation or more: 12 to 25 measured with the
    reply alone, 7 to 19 with a voice over it); unrelated sound makes none (3 to 6).
    ``heard`` is None until the first window that holds a second of reply; True at a
    peak; False without one, but only in a window where the microphone is
    ``QUIET_DB`` below the reply (nobody talking over it, which also flattens the peak);
    otherwise it keeps its last answer. While it is not False, the canceller cleans.
    """

    WINDOW_S = 2.0
    EVERY_S = 0.5
    MAX_LAG_S = 0.4  # the echo may lag its reference this much (lead, room, clocks)
    MIN_ACTIVE_S = 1.0  # audible reply a window needs for an answer
    PRESENT, ABSENT = 9.0, 6.5
    QUIET_DB = 15.0
    BAND_HZ = (150.0, 5000.0)

    def __init__(self) -> None:
        self._size = round(self.WINDOW_S * RATE)
        self._ref = np.zeros(self._size, np.float32)
        self._mic = np.zeros(self._size, np.float32)
        self._at = 0  # where the next frame is written (a ring)
        self._active = np.zeros(self._size // FRAME, bool)
        self._frames = 0
        self._every = round(self.EVERY_S * RATE / FRAME)
        freqs = np.fft.rfftfreq(2 * self._size, 1 / RATE)
        self._band = (freqs >= self.BAND_HZ[0]) & (freqs <= self.BAND_HZ[1])
        self.heard: bool | None = None
        self.peak: float | None = None  # the last statistic computed
        self.lag_s: float | None = None  # where the last peak was

    def add(self, near: np.ndarray, far: np.ndarray) -> None:
        at = self._at
        self._ref[at:at + FRAME] = far
        self._mic[at:at + FRAME] = near
        self._active[at // FRAME] = power(far) > EchoMeter.REF_FLOOR
        self._at = (at + FRAME) % self._size
        self._frames += 1
        if self._frames % self._every == 0:
            self._decide()

    def _decide(self) -> None:
        if np.count_nonzero(self._active) * FRAME / RATE < self.MIN_ACTIVE_S:
            return
        ref = np.roll(self._ref, -self._at).astype(np.float64)
        mic = np.roll(self._mic, -self._at).astype(np.float64)
        cross = np.fft.rfft(mic, 2 * self._size) * np.conj(np.fft.rfft(ref, 2 * self._size))
        cross[~self._band] = 0.0
        cross /= np.abs(cross) + 1e-20
        corr = np.abs(np.fft.irfft(cross))
        max_lag = round(self.MAX_LAG_S * RATE)
        ahead, behind = corr[:max_lag], corr[-max_lag:]  # the echo lags; "behind" is chance
        floor = rms(np.concatenate([ahead, behind]))
        if floor <= 0.0:
            return
        lag = int(np.argmax(ahead))
        self.peak, self.lag_s = float(ahead[lag]) / floor, lag / RATE
        quiet = _ratio_db(power(ref), power(mic)) >= self.QUIET_DB
        if self.peak >= self.PRESENT:
            self.heard = True
        elif self.peak <= self.ABSENT and quiet:
            self.heard = False
