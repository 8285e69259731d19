"""The Assistant panel's engine jobs (voices, voice preview), run by the controller's
Worker off the GUI thread; kept apart so that app/core/controller.py stays short."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.core.worker import JobKind


def _no_engine(failed: Callable[[str], None], what: str) -> None:
    failed(f"{what}: no models are loaded yet; wait for loading to finish")


def submit_voices(controller, done: Callable[[Any], None],
                  failed: Callable[[str], None]) -> None:
    """``done(VoiceList)`` for the controller's current engine."""
    engine = controller.engine
    if engine is None:
        _no_engine(failed, "listing the voices")
        return
    controller.worker.submit(JobKind.VOICES, engine.voices, done, failed)


def submit_preview(controller, text: str, voice: str, speed: float,
                   done: Callable[[Any], None], failed: Callable[[str], None]) -> None:
    """``done((audio, rate))``: ``text`` spoken by the current engine's TTS model."""
    engine = controller.engine
    if engine is None:
        _no_engine(failed, "previewing the voice")
        return
    controller.worker.submit(JobKind.PREVIEW,
                             lambda: engine.preview_voice(text, voice, speed), done, failed)
