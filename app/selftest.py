"""``parley --self-test``: one real turn through the bundled models, no window, JSON out.

It checks what a double-clicked app needs: the models and data files that ship inside
the app load, the pipeline runs, and the bundled recording ("one two three") is heard,
answered and spoken. Nothing here touches Qt, so it needs no display; the hub is never
asked (``HubStatus(offline=True)``, ``HF_HUB_OFFLINE=1``), so it never waits on a network.

Progress goes to stderr; stdout carries one JSON document: placements with the devices
the weights really sit on, transcript, reply, the turn's timeline, seconds from process
launch to the first reply audio, and total seconds. Exit status 0 when every check
passed; otherwise ``"ok": false`` with the reason in ``"error"``.

    python -m app.selftest [--config FILE] [--output FILE]
"""

from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
import time
import traceback
from pathlib import Path

# The one word normalizer (bench --quality scores with it too); light: re only.
from engine.bench.words import normalize_words

SAMPLE = "one_two_three_44k.wav"
EXPECTED_WORDS = "one two three"
_MIN_REPLY_AUDIO_S = 0.3


def launch_epoch() -> float:
    """When this process started (seconds since the epoch), from the OS.

    For a frozen app this includes the bootloader unpacking and Python starting, which is
    what a user waits for after a double click.
    """
    import psutil

    return psutil.Process().create_time()


def _progress(stage: str, fraction: float | None, text: str) -> None:
    pct = "" if fraction is None else f" {fraction * 100:3.0f}%"
    print(f"[self-test {stage}{pct}] {text}", file=sys.stderr, flush=True)


class LaunchTimeline:
    """Seconds from process launch to each step: the engine imported, each stage's model
    ready (stages load at once, so they overlap), the first reply audio. The self-test
    opens no window, so there is no "window shown" step here."""

    def __init__(self, launch_epoch: float) -> None:
        self._launch = launch_epoch
        self.steps: dict[str, float] = {}

    def mark(self, step: str) -> None:
        self.steps.setdefault(step, round(time.time() - self._launch, 3))

    def progress(self, stage: str, fraction: float | None, text: str) -> None:
        """A load progress callback: marks ``<stage>_ready`` when a stage is ready."""
        if fraction == 1.0 and text.startswith(f"{stage} ready"):
            self.mark(f"{stage}_ready")
        _progress(stage, fraction, text)


def _show_error(event) -> None:
    """Stage errors on stderr as they happen (they are in the JSON's ``errors`` too)."""
    from engine.pipeline.events import EngineError

    if isinstance(event, EngineError):
        print(f"error in {event.stage}: {event.message}", file=sys.stderr, flush=True)


def _reply_audio(path: Path) -> dict:
    """Length and loudness of the reply the sink wrote (empty when nothing was played)."""
    import soundfile as sf

    from engine.audio.pcm import rms as rms_of

    if not path.is_file():
        return {"seconds": 0.0, "rms": 0.0, "sample_rate": None}
    data, rate = sf.read(str(path), dtype="float32", always_2d=False)
    rms = rms_of(data)
    return {"seconds": round(data.size / rate, 3), "rms": round(rms, 5), "sample_rate": rate}


def _llm_conversion(backend: str, llm_model: str) -> dict | None:
    """Where the GGUF LLM's conversion for ``backend`` is, and whether it existed before
    this start (onnx-genai loads an ONNX folder, transformers a safetensors one).

    ``carried_by_app`` is true when the conversion is the one a built app carries, so
    nothing was (or will be) converted into the user's cache.
    """
    if not llm_model.lower().endswith(".gguf"):
        return None
    if backend == "onnx-genai":
        from engine.backends.llm.conversion_cache import cache_folder
        from engine.backends.llm.onnx_convert import conversion_name, existing_conversion

        found, cache = existing_conversion(llm_model), cache_folder(conversion_name(llm_model))
    else:
        from engine.backends.llm import gguf_convert

        found = gguf_convert.existing_conversion(llm_model)
        cache = gguf_convert.cached_folder_path(llm_model)
    return {"backend": backend, "folder": str(found or cache), "converted_before": found is not None,
            "carried_by_app": found is not None and found != cache}


def _config(path: str | None):
    from engine.config import EngineConfig, load_config

    config = load_config(path) if path else EngineConfig(device="cpu")
    # The recording is fed as fast as it is read: with barge-in on, the reply would be
    # cut off by the trailing audio of the same recording.
    return config.with_overrides({"turns.barge_in": "off"})


def _run(config_path: str | None, summary: dict) -> list[str]:
    """The self-test proper; fills ``summary`` and returns the failed checks."""
    from engine.audio.decode import load_audio
    from engine.measures import Mark
    from engine.runtime.hub import HubStatus
    from engine.recording import load_engine, run_recording
    from engine.report import turn_dict

    from app.core.resources import resource_path

    timeline = LaunchTimeline(summary["_launch"])
    summary["launch_timeline"] = timeline.steps
    timeline.mark("engine_imported")
    config = _config(config_path)
    recording = resource_path("audio", SAMPLE)
    summary["recording"] = str(recording)
    audio = load_audio(recording)
    started = time.perf_counter()

    def resolved(engine) -> None:  # placements known, nothing loaded yet
        nonlocal started
        summary["notes"] = list(engine.notes)
        llm = engine.placements["llm"]
        summary["llm_cache"] = _llm_conversion(llm.backend, llm.model)
        started = time.perf_counter()

    engine = load_engine(config, progress=timeline.progress, hub=HubStatus(offline=True),
                         resolved=resolved)
    summary["load_s"] = round(time.perf_counter() - started, 3)
    summary["launch_to_ready_s"] = round(time.time() - summary["_launch"], 3)
    try:
        summary["placements"] = engine.placement_dicts()
        with tempfile.TemporaryDirectory(prefix="parley-self-test-") as tmp:
            out = Path(tmp) / "reply.wav"
            # run_recording stops the unit, which closes the sink: the file is written.
            turns, errors = run_recording(engine, audio, str(out), realtime=False, on_event=_show_error)
            summary["reply_audio"] = _reply_audio(out)
    finally:
        engine.close()
    summary["errors"] = errors
    summary["turns"] = len(turns)
    failed = [f"stage error: {e}" for e in errors]
    if not turns:
        return failed + [f"no turn was taken on {SAMPLE} (the VAD heard no speech)"]
    turn = turns[0]
    first_audio = turn.marks.get(Mark.AUDIO_OUT_FIRST, turn.marks.get(Mark.TTS_FIRST_AUDIO))
    summary.update(
        transcript=turn.transcript, reply=turn.reply, timeline=turn.timeline(),
        turn={k: v for k, v in turn_dict(turn).items()
              if k not in ("transcript", "reply", "timeline")},
        launch_to_first_reply_audio_s=(None if first_audio is None else round(
            first_audio - time.perf_counter() + time.time() - summary["_launch"], 3)),
    )
    if summary["launch_to_first_reply_audio_s"] is not None:
        timeline.steps["first_reply_audio"] = summary["launch_to_first_reply_audio_s"]
    if EXPECTED_WORDS not in normalize_words(turn.transcript):
        failed.append(f"transcript {turn.transcript!r} does not say {EXPECTED_WORDS!r}")
    if not turn.reply.strip():
        failed.append("the reply is empty")
    if first_audio is None:
        failed.append("no reply audio was produced (no tts_first_audio/audio_out_first mark)")
    heard = summary["reply_audio"]
    if heard["seconds"] < _MIN_REPLY_AUDIO_S or heard["rms"] < 1e-3:
        failed.append(f"the reply audio is {heard['seconds']} s long with RMS {heard['rms']}: "
                      f"expected at least {_MIN_REPLY_AUDIO_S} s of sound")
    return failed


def run_self_test(argv_config_path: str | None = None, output: str | None = None) -> int:
    """Run the self-test; print (or write to ``output``) the JSON summary; return the status.

    ``argv_config_path``: an engine TOML config (``--config``); without it every stage
    runs on the CPU with ``auto`` models, which offline means the bundled stack.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from engine.errors import ParleyError

    summary: dict = {"ok": False, "self_test": "parley", "frozen": bool(getattr(sys, "frozen", False)),
                     "platform": f"{platform.system()} {platform.machine()}",
                     "python": platform.python_version(), "config": argv_config_path,
                     "_launch": launch_epoch()}
    status = 1
    try:
        failed = _run(argv_config_path, summary)
        if failed:
            summary["error"] = "self-test checks failed: " + "; ".join(failed)
        else:
            summary["ok"], status = True, 0
    except ParleyError as exc:
        summary["error"] = str(exc)
        summary["error_type"] = type(exc).__name__
        status = exc.exit_code
    except Exception as exc:  # noqa: BLE001 - a packaging fault (missing module or data file): show all
        traceback.print_exc(file=sys.stderr)
        summary["error"] = f"{type(exc).__name__}: {exc}"
        summary["error_type"] = type(exc).__name__
    summary["total_s"] = round(time.time() - summary.pop("_launch"), 3)
    _emit(summary, output)
    return status


def _emit(summary: dict, output: str | None) -> None:
    text = json.dumps(summary, indent=2, ensure_ascii=False)
    if output is None and sys.stdout is None:
        # A windowed Windows build has no stdout: leave the report where it can be found.
        from engine.runtime.paths import cache_dir

        output = str(cache_dir() / "self-test.json")
    if output is None:
        print(text, flush=True)
        return
    path = Path(output)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n", encoding="utf-8")
    if sys.stderr is not None:
        print(f"self-test report written to {path}", file=sys.stderr)


def main(argv=None) -> int:
    """``parley --self-test [--config FILE] [--output FILE]``; returns the exit status.

    ``argv`` is a list of arguments (``--self-test`` itself is accepted and ignored), or
    the ``argparse.Namespace`` ``app.main`` already parsed (its ``config`` and, if it has
    one, ``output`` attributes are used).
    """
    import argparse

    if isinstance(argv, argparse.Namespace):
        return run_self_test(getattr(argv, "config", None), getattr(argv, "output", None))
    parser = argparse.ArgumentParser(prog="parley --self-test",
                                     description="run one turn of the bundled recording "
                                                 "through the bundled models; JSON on stdout")
    parser.add_argument("--self-test", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--config", metavar="FILE", help="engine TOML config (default: all on cpu)")
    parser.add_argument("--output", metavar="FILE", help="write the JSON here instead of stdout")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    return run_self_test(args.config, args.output)


if __name__ == "__main__":
    sys.exit(main())
