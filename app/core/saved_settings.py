"""QSettings <-> EngineConfig, one key per config field: ``stt.device`` is ``stt/device``.

Values are stored as strings (enums by value, booleans as ``true``/``false``) and read back
through ``EngineConfig.with_overrides``, so stored settings are validated exactly like a
TOML file or a CLI flag. Settings of the window itself live under ``ui/``, apart from the
engine's.
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Any

from PySide6.QtCore import QSettings

from engine.config import EngineConfig, config_fields
from engine.errors import ConfigError

ORGANIZATION = "Parley"
APPLICATION = "Parley"
UI_GROUP = "ui"


def key_for(dotted: str) -> str:
    """The QSettings key of a config field: ``stt.device`` -> ``stt/device``."""
    return dotted.replace(".", "/")


def dotted_for(key: str) -> str:
    """The config field of a QSettings key: ``stt/device`` -> ``stt.device``."""
    return key.replace("/", ".")


def engine_keys() -> list[str]:
    """Every engine setting's QSettings key, in config order."""
    return [key_for(dotted) for dotted, _field, _type in config_fields()]


def open_settings(path: str | Path | None = None) -> QSettings:
    """The app's settings: an INI file at ``path``, or the user's native store."""
    if path is not None:
        return QSettings(str(path), QSettings.Format.IniFormat)
    return QSettings(QSettings.Format.IniFormat, QSettings.Scope.UserScope, ORGANIZATION, APPLICATION)


def to_text(value: Any) -> str:
    """A config value as the string QSettings keeps."""
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def save_config(settings: QSettings, config: EngineConfig) -> None:
    """Write every field of ``config`` (and only those) under its key; sync to disk."""
    for dotted, value in config.flat().items():
        settings.setValue(key_for(dotted), to_text(value))
    settings.sync()


def load_config(settings: QSettings, base: EngineConfig | None = None) -> tuple[EngineConfig, list[str]]:
    """The stored config on top of ``base`` (defaults), and a message per unusable value.

    A stored value that does not validate (an edited file, a setting from another version)
    is skipped with a message naming the key; the rest still applies.
    """
    config = base or EngineConfig()
    problems: list[str] = []
    for dotted, _field, _type in config_fields():
        key = key_for(dotted)
        if not settings.contains(key):
            continue
        raw = settings.value(key)
        try:
            config = config.with_overrides({dotted: _from_stored(raw)})
        except ConfigError as exc:
            problems.append(f"setting {key} ignored: {exc}")
    return config, problems


def _from_stored(raw: Any) -> Any:
    # INI values come back as strings; a list means the file held a comma-separated value.
    if isinstance(raw, list):
        return ", ".join(str(x) for x in raw)
    return raw


def ui_value(settings: QSettings, name: str, default: Any) -> Any:
    """A window setting (``ui/<name>``), typed like ``default``."""
    raw = settings.value(f"{UI_GROUP}/{name}", default)
    if isinstance(default, bool):
        return raw if isinstance(raw, bool) else str(raw).lower() in ("true", "1", "yes", "on")
    if isinstance(default, int):
        try:
            return int(raw) if isinstance(raw, str | int | float) else default
        except ValueError:
            return default
    return raw


def set_ui_value(settings: QSettings, name: str, value: Any) -> None:
    """Store a window setting (``ui/<name>``)."""
    settings.setValue(f"{UI_GROUP}/{name}", value)
