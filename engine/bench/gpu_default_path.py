"""``make gpu-check``'s default-path phase: the stages as ``auto`` loads them on CUDA, timed.

The layouts run Whisper through transformers, but on a CUDA machine ``auto`` loads it
through faster-whisper on CTranslate2, which brings its own cuBLAS and cuDNN (the usual
failure point of a CUDA install), and the LLM through the transformers backend. This
phase converts the random Whisper of the build phase to CTranslate2, loads it through
Parley's faster-whisper backend on the device (float16 on CUDA, int8 on a CPU, as
``auto`` does) and times its decode of the input (at most ``STT_AUDIO_S``) encoded at the
fitted 10 s window and at the 30 s one, each with the token budget the backend gives
that much audio (a random decoder never stops, so it spends it all; the random Whisper
has 64 decoder positions, enough for 6 s); then loads the default LLM of the device kind (the random build of
``gpu_models.stack_names``: Qwen3-4B-Instruct-2507 on CUDA) through the transformers
backend and times its first token and tokens per second over a voice turn's prompt.
Each model is given back before the next loads. Random weights: the timings are the
architecture's, the words are meaningless.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from engine.bench.gpu_models import CT2_COMPUTE, build_ct2_whisper, release, stack_names

STT_AUDIO_S = 6.0  # the audio decoded: its token budget fits the random Whisper's 64 positions
#: The prompt of a voice turn (as ``engine.bench.llm_runtimes`` times the CPU runtimes).
PROMPT = [{"role": "system", "content": "You are a helpful voice assistant. Keep answers short."},
          {"role": "user", "content": "What is a good name for a small grey cat?"}]


def plan(device_kind: str) -> str:
    """What the phase runs, in words (part of the no-CUDA message)."""
    llm = stack_names(device_kind)["llm"].split("/")[-1]
    where = "cuda:0" if device_kind == "cuda" else "the CPU"
    return (f"times the default path on {where}: faster-whisper on CTranslate2 "
            f"({CT2_COMPUTE[device_kind]}, the random Whisper converted) at the fitted 10 s "
            f"and the full 30 s window, and {llm} on the transformers backend (first token, "
            "tokens per second)")


def _seconds(values: list[float]) -> list[float]:
    return [round(v, 4) for v in values]


def time_stt(source: Path, device: str, audio: np.ndarray, runs: int, layers: int | None) -> dict:
    """faster-whisper on the CTranslate2 conversion of the random Whisper in ``source``."""
    from engine.backends import BackendRegistry
    from engine.backends.base import LoadRequest, no_progress
    from engine.config import SttConfig
    from engine.runtime.devices import parse_device

    started = time.perf_counter()
    folder = build_ct2_whisper(source, layers)
    convert_s = time.perf_counter() - started
    target = parse_device(device, "device")
    assert target is not None  # "cpu" or "cuda:N": never auto
    module = BackendRegistry().get("stt", "faster-whisper").import_module()
    started = time.perf_counter()
    stt = module.load(LoadRequest(str(folder), target, "auto", SttConfig()), no_progress)
    load_s = time.perf_counter() - started
    audio = audio[: int(STT_AUDIO_S * 16000)]
    # The backend's own decode at a window (not ``transcribe``: random words always look
    # unsure, and its 30 s fallback would decode past the random model's 64 positions).
    times: dict[float, list[float]] = {10.0: [], 30.0: []}
    for window, seconds in times.items():
        stt.fitted.decode(audio, "en", 1, window)  # warm-up: this window's shapes
        for _ in range(runs):
            t0 = time.perf_counter()
            stt.fitted.decode(audio, "en", 1, window)
            seconds.append(time.perf_counter() - t0)
    fitted, full = times[10.0], times[30.0]
    doc = {"backend": "faster-whisper", "model": str(folder), "compute_type": stt.compute_type,
           "actual_device": stt.actual_device, "convert_s": round(convert_s, 3),
           "load_s": round(load_s, 3), "audio_s": round(audio.size / 16000, 3),
           "fit_10s_s": _seconds(fitted), "full_30s_s": _seconds(full)}
    del stt
    release(device)
    return doc


def time_llm(folder: Path, device: str, runs: int, max_new_tokens: int) -> dict:
    """The device kind's default LLM (random, in ``folder``) on the transformers backend."""
    from engine.backends import BackendRegistry
    from engine.backends.base import GenerationOptions, LoadRequest, no_progress
    from engine.config import LlmConfig
    from engine.runtime.devices import parse_device

    target = parse_device(device, "device")
    assert target is not None
    module = BackendRegistry().get("llm", "transformers").import_module()
    started = time.perf_counter()
    llm = module.load(LoadRequest(str(folder), target, "auto", LlmConfig()), no_progress)
    load_s = time.perf_counter() - started
    llm.warmup()
    options = GenerationOptions(max_new_tokens=max_new_tokens)
    first_token, rates = [], []
    for _ in range(runs):
        t0 = time.perf_counter()
        first, last = None, None
        for step in llm.new_session().generate(PROMPT, options, lambda: False):
            first = first or time.perf_counter() - t0
            last = step
        first_token.append(first or 0.0)
        rates.append(last.tokens_per_second if last is not None else 0.0)
    doc = {"backend": "transformers", "model": str(folder), "actual_device": str(llm.actual_device),
           "load_s": round(load_s, 3), "first_token_s": _seconds(first_token),
           "tokens_per_s": [round(r, 2) for r in rates]}
    del llm
    release(device)
    return doc


def time_default_path(folders: dict[str, Path], device: str, audio: np.ndarray, runs: int,
                      max_new_tokens: int, layers: int | None) -> dict:
    """Both stages' figures (see the module doc)."""
    return {"stt": time_stt(folders["stt"], device, audio, runs, layers),
            "llm": time_llm(folders["llm"], device, runs, max_new_tokens)}


def checks(doc: dict, device: str) -> list[dict]:
    """Each default-path model ran on the device asked for."""
    return [{"name": f"default-path {stage} ({doc[stage]['backend']}) on {device}",
             "ok": doc[stage]["actual_device"] == device,
             "detail": f"ran on {doc[stage]['actual_device']}"} for stage in ("stt", "llm")]
