"""What applying a new EngineConfig to a running engine costs, setting by setting.

Every setting has one ``Effect``, read from its declaration in ``engine/config.py``:
a field with ``runtime=True`` goes to the running pipeline at once; any other field of a
stage section (backend, model, device, dtype) reloads that stage's model; the top-level
``device`` reloads the stages that follow it; ``audio.*`` reopens a sound device; and
``units`` rebuilds the pipeline. The settings panel shows ``describe`` next to each
change before Apply; ``Engine.apply`` uses ``diff_configs`` to do only what is needed.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from engine.config import STAGES, EngineConfig, config_fields

_STAGE_NAMES = {"vad": "VAD", "stt": "STT", "llm": "LLM", "tts": "TTS"}


class Effect(enum.Enum):
    """What a changed setting costs when applied."""

    RUNTIME = "runtime"  # applies to the running pipeline at once, nothing reloads
    RELOAD = "reload"  # reloads one stage's model; the conversation is kept
    AUDIO = "audio"  # reopens the microphone or the speaker
    RESTART = "restart"  # rebuilds the pipeline units (the conversation starts over)


def effect_of(dotted: str) -> Effect:
    """The effect of changing the setting ``dotted`` (e.g. ``llm.temperature``)."""
    for name, field, _tp in config_fields():
        if name == dotted:
            if field.metadata.get("runtime"):
                return Effect.RUNTIME
            section = dotted.partition(".")[0]
            if section in STAGES or dotted == "device":
                return Effect.RELOAD
            if section == "audio":
                return Effect.AUDIO
            return Effect.RESTART
    raise KeyError(dotted)


def describe(dotted: str) -> str:
    """What applying a change of ``dotted`` will do, in the panel's words."""
    effect = effect_of(dotted)
    if effect is Effect.RUNTIME:
        return "applies now"
    if effect is Effect.RELOAD:
        section = dotted.partition(".")[0]
        if section in STAGES:
            return f"reloads the {_STAGE_NAMES[section]} model"
        return "reloads the models that use the default device"
    if effect is Effect.AUDIO:
        return "reopens the microphone" if dotted != "audio.output_device" else "reopens the speaker"
    return "restarts the pipeline (the conversation starts over)"


@dataclass(frozen=True, slots=True)
class Change:
    """One setting that differs between two configs."""

    key: str
    old: Any
    new: Any
    effect: Effect

    @property
    def description(self) -> str:
        return describe(self.key)


@dataclass(frozen=True, slots=True)
class ConfigDiff:
    """The settings that differ between two configs, oldest config first.

    ``reload_stages`` lists the stages whose model may change. ``Engine.apply`` narrows it
    to the stages whose resolved model really changes (a new top-level device may leave
    an explicitly placed stage where it is).
    """

    changes: tuple[Change, ...]
    reload_stages: tuple[str, ...]

    @property
    def empty(self) -> bool:
        return not self.changes

    def keys(self, effect: Effect | None = None) -> tuple[str, ...]:
        """The changed settings, all of them or those of one effect."""
        return tuple(c.key for c in self.changes if effect is None or c.effect is effect)

    def summary(self) -> str:
        """One line for a status bar: what applied now, what reloaded."""
        if self.empty:
            return "no settings changed"
        parts = []
        runtime = self.keys(Effect.RUNTIME)
        if runtime:
            parts.append(f"{', '.join(runtime)} applied now")
        if self.reload_stages:
            names = ", ".join(_STAGE_NAMES[s] for s in self.reload_stages)
            parts.append(f"reloaded the {names} model{'s' if len(self.reload_stages) > 1 else ''}")
        for effect in (Effect.AUDIO, Effect.RESTART):
            keys = self.keys(effect)
            if keys:
                parts.append(f"{', '.join(keys)}: {describe(keys[0])}")
        return "; ".join(parts)


def diff_configs(old: EngineConfig, new: EngineConfig) -> ConfigDiff:
    """Every setting that differs, with its effect, and the stages that may reload."""
    before, after = old.flat(), new.flat()
    changes = tuple(Change(k, before[k], after[k], effect_of(k)) for k in after if before[k] != after[k])
    stages: list[str] = []
    for change in changes:
        if change.effect is not Effect.RELOAD:
            continue
        section = change.key.partition(".")[0]
        targets = STAGES if change.key == "device" else (section,)
        stages += [s for s in targets if s not in stages]
    return ConfigDiff(changes, tuple(s for s in STAGES if s in stages))
