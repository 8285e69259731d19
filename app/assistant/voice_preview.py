"""Voice preview playback: preview audio on a sink of its own, off the GUI thread.

The preview never goes through the pipeline: it opens its own sink (by default a
``SpeakerSink`` on the configured speaker; tests give a recording sink) and closes it
once the audio was heard or the preview was cut off.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import numpy as np

log = logging.getLogger("parley.app.preview")

PREVIEW_TURN = -1  # the sink's turn id for preview audio (never a real turn's)


class PreviewPlayer:
    """Plays preview audio on a sink of its own, in a background thread: open, play,
    wait until heard, close. A new preview stops the one playing; ``stop`` joins."""

    def __init__(self, sink_factory: Callable[[], object],
                 failed: Callable[[str], None]) -> None:
        self.sink_factory = sink_factory
        self._failed = failed
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    @property
    def playing(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def play(self, audio: np.ndarray, rate: int) -> None:
        """Play ``audio`` (float32 mono at ``rate``), cutting off any preview playing."""
        self.stop()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(audio, rate, self._stop),
                                        name="parley-voice-preview", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> bool:
        """Cut off the preview and join its thread; True if it ended."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout)
            return not thread.is_alive()
        return True

    def _run(self, audio: np.ndarray, rate: int, stop: threading.Event) -> None:
        sink = None
        try:
            sink = self.sink_factory()
            sink.open()
            sink.play(audio, rate, PREVIEW_TURN)
            waited, limit = 0.0, audio.size / rate + 2.0  # never past the audio and a margin
            while not stop.is_set() and not sink.wait_idle(0.1) and waited < limit:
                waited += 0.1
            if stop.is_set():
                sink.flush()
        except Exception as exc:  # a missing speaker is reported, not raised (logged)
            log.warning("voice preview could not play", exc_info=True)
            self._failed(f"The preview could not play: {exc}")
        finally:
            if sink is not None:
                try:
                    sink.close()
                except Exception:  # closing a broken device must not hide the report (logged)
                    log.exception("closing the preview sink")


def speaker_factory(controller) -> Callable[[], object]:
    """New SpeakerSinks on the speaker the controller's applied config names."""
    def make():
        from engine.audio.speaker import SpeakerSink

        return SpeakerSink(controller.config.audio.output_device)
    return make
