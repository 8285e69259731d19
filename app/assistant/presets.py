"""The Assistant panel's built-in system-prompt presets (the user's own are in QSettings)."""

from __future__ import annotations

import json
import logging

from app.core.saved_settings import set_ui_value, ui_value
from engine.config import EngineConfig

log = logging.getLogger("parley.app.assistant")

#: QSettings key (under ``ui/``) of the user's own presets: JSON, name -> prompt.
PRESETS_KEY = "assistant/presets"

#: Built-in presets (name -> system prompt); the user's own come after them.
PRESETS: dict[str, str] = {
    "Concise assistant": EngineConfig().llm.system_prompt,
    "Tutor": ("You are a patient tutor. Explain one idea at a time in plain words, check "
              "that the learner follows, and ask one short question back. Keep each answer "
              "to two or three spoken sentences."),
    "Language partner": ("You are a friendly conversation partner for someone practising "
                         "English. Speak simply and naturally, gently correct one mistake "
                         "at a time, and keep the conversation going with a question."),
    "Brainstorm buddy": ("You are an upbeat brainstorming partner. Offer one or two fresh "
                         "ideas per turn, build on what the user says, and keep it short."),
    "Storyteller": ("You are a storyteller. Continue a short story with the user, two or "
                    "three vivid sentences at a time, and let the user steer what happens."),
}


def user_presets(settings) -> dict[str, str]:
    """The user's own presets (name -> prompt); an unreadable stored value is ignored."""
    raw = ui_value(settings, PRESETS_KEY, "{}")
    try:
        stored = json.loads(raw) if isinstance(raw, str) else {}
    except ValueError:
        log.warning("ui/%s is not JSON; ignoring the stored presets", PRESETS_KEY)
        return {}
    return {str(k): str(v) for k, v in stored.items()} if isinstance(stored, dict) else {}


def save_user_presets(settings, presets: dict[str, str]) -> None:
    """Store the user's own presets (replacing the stored ones)."""
    set_ui_value(settings, PRESETS_KEY, json.dumps(presets))
