"""A recording standing in for the microphone of Parley's MCP server (``--input FILE``).

A live microphone hears the user whenever they speak; a recording has no user behind it,
so it is played into the pipeline only when a tool listens: each ``listen`` (or the
listening half of ``ask``) starts it from the beginning, unless it is still playing.
Between plays the input is open and silent, so what the server speaks is never cut off by
a recording nobody asked for.
"""

from __future__ import annotations

import threading

import numpy as np

from engine.audio.base import AudioBlock, AudioSource
from engine.audio.file_source import FileSource


class RecordingMicrophone(AudioSource):
    """16 kHz mono ``audio`` played at real time on each ``play``, silent otherwise."""

    def __init__(self, audio: np.ndarray, trailing_silence_s: float) -> None:
        """``trailing_silence_s``: the silence after each play, so its last turn can end."""
        self._audio = audio
        self._trailing_silence_s = trailing_silence_s
        self._lock = threading.Lock()
        self._playing: FileSource | None = None
        self._cue = threading.Event()
        self._closed = threading.Event()

    def open(self) -> None:
        """Nothing to open: silent until the first ``play``."""

    def close(self) -> None:
        """Stop delivering audio. Idempotent."""
        self._closed.set()
        self._cue.set()

    def play(self) -> None:
        """Start the recording from its beginning, unless it is playing now."""
        with self._lock:
            if self._playing is not None and not self._playing.finished:
                return
            recording = FileSource(self._audio, realtime=True,
                                   trailing_silence_s=self._trailing_silence_s)
            recording.open()
            self._playing = recording
        self._cue.set()

    def read(self, timeout: float) -> AudioBlock | None:
        """The recording's next block while it plays; None (silence) otherwise."""
        with self._lock:
            playing = self._playing
        if self._closed.is_set():
            return None
        if playing is None or playing.finished:
            self._cue.clear()
            if self._playing is playing:  # no play() came in between
                self._cue.wait(timeout)
            return None
        return playing.read(timeout)

    @property
    def finished(self) -> bool:
        """Never, until closed: the next tool call may listen again."""
        return self._closed.is_set()

    @property
    def level(self) -> float:
        with self._lock:
            playing = self._playing
        return 0.0 if playing is None or playing.finished else playing.level
