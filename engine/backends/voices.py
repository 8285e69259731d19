"""The voices a loaded TTS model offers, as the voice picker shows them.

Each TTS backend's ``voices()`` returns a ``VoiceList``: the values ``tts.voice`` may take
with this model (each with a label for people), and whether the backend also takes names
it cannot list (a remote server decides its own voices).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from engine.backends.languages import base_language, language_name
from engine.config import AUTO_VOICES, NO_VOICE
from engine.errors import ConfigError

if TYPE_CHECKING:
    from engine.backends.base import TtsModel
    from engine.config import EngineConfig, TtsConfig


class Voice(NamedTuple):
    """One choice of ``tts.voice``: ``name`` is the setting's value, ``label`` the words,
    ``language`` the ISO 639-1 code of the language it speaks (None: not said)."""

    name: str
    label: str
    language: str | None = None


@dataclass(frozen=True, slots=True)
class VoiceList:
    """The voices of one loaded TTS model.

    ``voices`` are really available (``auto``, the model's default, first). ``any_name``
    is True when the backend passes any name on (a remote server): the list is then
    only a suggestion. ``note`` says in one line where the list comes from.
    ``elsewhere``: voices of other languages the model can load on first use (Piper's
    catalogue voices, from the hub or its cache), for ``tts.voices``, not ``tts.voice``.
    """

    voices: tuple[Voice, ...]
    any_name: bool = False
    note: str = ""
    elsewhere: tuple[Voice, ...] = ()

    def names(self) -> list[str]:
        """The ``tts.voice`` values, in order."""
        return [v.name for v in self.voices]


def preview(model: TtsModel, config: EngineConfig, text: str, voice: str,
            speed: float) -> tuple[np.ndarray, int]:
    """``text`` spoken by the TTS ``model`` as ``voice`` at ``speed``: (float32 mono, rate).

    ``voice`` and ``speed`` are validated as an Apply of ``config`` would (a ConfigError
    naming the setting), so a preview never plays what the setting could not keep.
    """
    options = config.with_overrides({"tts.voice": voice, "tts.speed": speed}).tts
    model.check_voice(options.voice)
    if not text.strip():
        raise ConfigError("the preview text is empty; type a sentence to hear")
    chunks = list(model.synthesize(text, lambda: False, options.voice, options.speed))
    rate = chunks[0].sample_rate if chunks else int(model.sample_rate)
    audio = (np.concatenate([c.audio for c in chunks]).astype(np.float32, copy=False)
             if chunks else np.zeros(0, np.float32))
    return audio, int(rate)


#: OpenAI's built-in voice names (clients send one by default) and the voice each stands
#: for with a model that has a close match: Kokoro's voices of the same name, else one of
#: the same kind (American/British, female/male). A model without the match uses its
#: default voice (``auto``). The README's realtime section shows this table.
OPENAI_VOICE_MATCHES: dict[str, tuple[str, ...]] = {
    "alloy": ("af_alloy",), "ash": ("am_adam",), "ballad": ("bm_george",),
    "coral": ("af_heart",), "echo": ("am_echo",), "fable": ("bm_fable",),
    "onyx": ("am_onyx",), "nova": ("af_nova",), "sage": ("af_sarah",),
    "shimmer": ("af_sky",), "verse": ("am_michael",), "marin": ("af_bella",),
    "cedar": ("am_liam",),
}
OPENAI_VOICES = frozenset(OPENAI_VOICE_MATCHES)


def openai_voice(name: str, voices: VoiceList) -> str | None:
    """The ``tts.voice`` that OpenAI's voice ``name`` stands for with a model offering
    ``voices``: its match where the model has it, else ``auto``; None when ``name`` is
    not one of OpenAI's (then it is a voice name of the model's own)."""
    matches = OPENAI_VOICE_MATCHES.get(name.lower())
    if matches is None:
        return None
    offered = set(voices.names())
    if name in offered:  # a server that speaks OpenAI's own voices
        return name
    return next((voice for voice in matches if voice in offered), "auto")


class LanguageVoice(NamedTuple):
    """The voice a reply language gets (``language_voice``): ``voice`` is a value for the
    model's ``synthesize``, or None with ``reason``, why that language is shown as text."""

    voice: str | None
    reason: str = ""


def language_voice(language: str | None, options: TtsConfig, voices: VoiceList,
                   model_name: str, extra: tuple[Voice, ...] = ()) -> LanguageVoice:
    """The voice that speaks ``language`` with this model and these settings.

    In order: the voice ``tts.voices`` names for it (``none``: no voice); ``tts.voice``
    when it speaks the language; the model's first voice of the language; a voice of it
    the model can load (``VoiceList.elsewhere``); one of the ``extra`` voice sources
    installed beside the model (Kokoro's Japanese voices). A model that does not say which
    languages its voices speak (a remote server, a voice without a language tag) is
    trusted with every language: ``tts.voice``. ``language`` None: ``tts.voice``.
    """
    if language is None:
        return LanguageVoice(options.voice)
    named = options.voice_map.get(language, AUTO_VOICES)
    if named == NO_VOICE:
        return LanguageVoice(None, f"tts.voices sets {language}={NO_VOICE}")
    if named != AUTO_VOICES:
        return LanguageVoice(named)
    tagged = [v for v in voices.voices if v.language is not None]
    if voices.any_name or not tagged:
        return LanguageVoice(options.voice)
    own = [v for v in (*voices.voices, *voices.elsewhere, *extra)
           if base_language(v.language) == language]
    current = next((v for v in voices.voices if v.name == options.voice), None)
    if current is not None and current in own:
        return LanguageVoice(options.voice)
    if own:
        return LanguageVoice(next((v for v in own if v.name != "auto"), own[0]).name)
    spoken = sorted({base_language(v.language) or "" for v in tagged} - {""})
    return LanguageVoice(None, f"no voice of {model_name} speaks {language_name(language)} "
                         f"(its voices speak {', '.join(spoken)}); add one with tts.voices "
                         f"'{language}=VOICE'")
