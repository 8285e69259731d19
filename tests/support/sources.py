"""Audio sources for tests: one that never speaks, one that speaks once a reply plays."""

from __future__ import annotations

import threading
import time

import numpy as np

from engine.audio.base import AudioBlock, AudioSource
from engine.audio.file_sink import FileSink
from engine.audio.file_source import FileSource


class Quiet(AudioSource):
    """A source that stays open and silent until closed (a user or client that only types)."""

    sample_rate = 16000
    overflow_count = 0
    level = 0.0

    def __init__(self) -> None:
        self._closed = threading.Event()

    def open(self) -> None:
        pass

    def close(self) -> None:
        self._closed.set()

    def read(self, timeout):
        self._closed.wait(timeout)
        return None

    @property
    def finished(self) -> bool:
        return self._closed.is_set()


class SpeakWhenReplyPlays(AudioSource):
    """A paced source: ``first``, then silence until the sink has played ``after_s`` of a
    reply, then ``then`` — so the interruption surely lands during playback."""

    sample_rate = 16000

    def __init__(self, first: np.ndarray, then: np.ndarray, sink: FileSink, after_s: float = 0.4):
        self._first = FileSource(first, realtime=True, trailing_silence_s=0.0)
        self._then = FileSource(then, realtime=True, trailing_silence_s=2.0)
        self._sink, self._after_s = sink, after_s
        self._phase = "first"
        self._t_next = 0.0

    def open(self):
        self._first.open()

    def close(self):
        self._first.close()
        self._then.close()

    def read(self, timeout):
        if self._phase == "first":
            block = self._first.read(timeout)
            if self._first.finished:
                self._phase, self._t_next = "wait", time.perf_counter()
            return block
        if self._phase == "wait":
            if self._sink.seconds_played >= self._after_s and self._sink.is_playing:
                self._phase = "then"
                self._then.open()
                return None
            self._t_next += 0.032  # silence at the microphone's pace
            time.sleep(max(0.0, self._t_next - time.perf_counter()))
            return AudioBlock(np.zeros(512, np.float32), self._t_next - 0.032)
        return self._then.read(timeout)

    @property
    def finished(self):
        return self._phase == "then" and self._then.finished

    overflow_count = 0
    level = 0.0
