"""The Assistant panel's engine work (its voices, a voice preview), run with the
controller's current engine on its serial lane (``EngineController.run_with_engine``),
so never during a load or an Apply."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.core.background import JobKind


def list_voices(controller, done: Callable[[Any], None], failed: Callable[[str], None]) -> None:
    """``done(VoiceList)`` of the controller's current engine, or ``failed(message)``."""
    controller.run_with_engine(JobKind.VOICES, lambda engine: engine.voices(), done,
                               lambda failure: failed(failure.message))


def preview_voice(controller, text: str, voice: str, speed: float,
                  done: Callable[[Any], None], failed: Callable[[str], None]) -> None:
    """``done((audio, rate))``: ``text`` spoken as ``voice`` at ``speed`` by the current
    engine's TTS model, apart from the pipeline; or ``failed(message)``."""
    controller.run_with_engine(JobKind.PREVIEW, lambda engine: engine.preview_voice(text, voice, speed),
                               done, lambda failure: failed(failure.message))
