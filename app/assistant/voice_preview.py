"""Voice preview playback: a sound played on a sink of its own, off the GUI thread.

The voice preview (and the thinking chime, whose player the window hands over) never
goes through the pipeline: each sound opens its own sink (by default a ``SpeakerSink`` on
the configured speaker; tests give a recording sink) and closes it once the audio was
heard or the sound was cut off. Playback runs on a latest-wins lane (``app.core.background``): a new
sound cuts off the one playing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
from PySide6.QtCore import QObject

from app.core.background import Command, JobKind, LatestLane, Outcome, Task

if TYPE_CHECKING:
    from engine.audio.base import AudioSink

log = logging.getLogger("parley.app.preview")

PREVIEW_TURN = -1  # the sink's turn id for preview audio (never a real turn's)


class _Playback(Command):
    """Open a sink, play ``audio``, wait until it was heard (or cut off), close the sink."""

    what = JobKind.PLAY

    def __init__(self, sink_factory: Callable[[], AudioSink], audio: np.ndarray, rate: int,
                 failed: Callable[[str], None]) -> None:
        self.sink_factory, self.audio, self.rate, self.failed = sink_factory, audio, rate, failed

    def work(self, task: Task) -> None:
        sink = None
        try:
            sink = self.sink_factory()
            sink.open()
            sink.play(self.audio, self.rate, PREVIEW_TURN)
            waited, limit = 0.0, self.audio.size / self.rate + 2.0  # never past the audio and a margin
            while not task.cancelled and not sink.wait_idle(0.1) and waited < limit:
                waited += 0.1
            if task.cancelled:
                sink.flush()
        finally:
            if sink is not None:
                try:
                    sink.close()
                except Exception:  # closing a broken device must not hide the report (logged)
                    log.exception("closing the preview sink")

    def commit(self, outcome: Outcome) -> None:
        if outcome.failure is not None:  # a missing speaker is reported, not raised (logged)
            self.failed(f"The preview could not play: {outcome.failure.error}")


class PreviewPlayer:
    """Plays preview audio on a sink of its own, in the background: open, play, wait until
    heard, close. A new preview cuts off the one playing; ``stop`` joins. ``failed(text)``
    is called on the GUI thread when a sound could not play."""

    def __init__(self, sink_factory: Callable[[], AudioSink], failed: Callable[[str], None],
                 parent: QObject | None = None) -> None:
        self.sink_factory = sink_factory
        self._failed = failed
        self._lane = LatestLane(parent, "parley-voice-preview")

    @property
    def playing(self) -> bool:
        """True while a sound plays (or waits to)."""
        return self._lane.running

    def play(self, audio: np.ndarray, rate: int) -> None:
        """Play ``audio`` (float32 mono at ``rate``), cutting off any sound playing."""
        self._lane.submit(_Playback(self.sink_factory, audio, rate, self._failed))

    def stop(self, timeout: float = 2.0) -> bool:
        """Cut off the sound and join its thread; True if it ended."""
        self._lane.drop()
        return self._lane.join(timeout)


def speaker_factory(controller) -> Callable[[], AudioSink]:
    """New SpeakerSinks on the speaker the controller's applied config names."""
    def make() -> AudioSink:
        from engine.audio.speaker import SpeakerSink

        return SpeakerSink(controller.config.audio.output_device)
    return make
