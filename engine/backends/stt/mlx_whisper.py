"""Whisper on MLX through mlx-whisper (Apple Silicon GPU; MLX's CPU backend elsewhere).

A model is a folder of ``config.json`` (mlx-whisper's ModelDimensions) plus
``weights.safetensors`` or ``weights.npz``, or a hub id of such a folder (default
``mlx-community/whisper-large-v3-turbo``). No PyPI package ships one, so there is no
bundled model: offline, auto placement uses faster-whisper instead.

Every MLX call — loading, warm-up, each transcription — runs inside the process-wide
MLX lock as stage ``stt``, so one loaded model is shared by all pipeline units and
transcriptions from several threads take turns. Audio goes in as a float32 array, so
mlx-whisper never needs the ffmpeg binary.

mlx-whisper's ``transcribe`` reads its model from a process-wide cache
(``transcribe.ModelHolder``) keyed by path; we put our loaded model there, under the
lock, before each call, so it never loads a second copy and two Parley models never
see each other's.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from engine.backends import mlx_guard
from engine.backends.base import LoadRequest, Progress, SttModel, SttResult, no_progress
from engine.backends.stt.languages import check_whisper_language
from engine.errors import AudioInputError, ConfigError, DeviceError, ModelError
from engine.runtime.hub import offline as hub_offline
from engine.runtime.mlx_lock import MlxLock, get_mlx_lock

SAMPLE_RATE = 16000
STAGE = "stt"
HUB_DEFAULT = "mlx-community/whisper-large-v3-turbo"
_WEIGHTS = ("weights.safetensors", "weights.npz")
_HUB_FILES = ["config.json", "weights.safetensors", "weights.npz"]
_DTYPES = ("auto", "float16", "float32")


def bundled_model() -> str | None:
    """None: no PyPI package ships a Whisper in MLX format."""
    return None


def mlx_compute_device() -> str:
    """``gpu`` or ``cpu``: where MLX computes in this process (call inside the MLX lock)."""
    import mlx.core as mx

    return "gpu" if mx.default_device() == mx.gpu else "cpu"


def _check_folder(folder: Path) -> Path:
    if not folder.is_dir():
        raise ModelError(f"STT model {folder} is a file; mlx-whisper needs a model folder "
                         "(config.json + weights.safetensors)")
    if not (folder / "config.json").is_file():
        raise ModelError(f"STT model folder {folder} has no config.json; it is not an "
                         "mlx-whisper model")
    if not any((folder / name).is_file() for name in _WEIGHTS):
        hint = ""
        if (folder / "model.bin").is_file():
            hint = " (it holds a CTranslate2 model: use the faster-whisper backend)"
        elif any(folder.glob("model*.safetensors")):
            hint = " (it holds a transformers model: use the transformers-whisper backend)"
        raise ModelError(f"STT model folder {folder} has no weights.safetensors or "
                         f"weights.npz{hint}")
    return folder


def resolve_model_folder(model: str, progress: Progress = no_progress) -> Path:
    """The local folder of ``model``: a folder as is, a hub id from the hub or its cache."""
    path = Path(model).expanduser()
    if path.exists():
        return _check_folder(path)
    if path.is_absolute() or model.startswith((".", "~")) or model.count("/") != 1:
        raise ModelError(f"STT model folder {model} does not exist (give an mlx-whisper "
                         f"folder or a hub id such as {HUB_DEFAULT})")
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    offline = hub_offline()
    if not offline:
        progress(None, f"fetching {model} from the Hugging Face hub (first time only)")
    try:
        folder = Path(snapshot_download(model, allow_patterns=_HUB_FILES,
                                        local_files_only=offline))
    except LocalEntryNotFoundError:
        raise ModelError(f"STT model {model!r} is not in the Hugging Face cache and "
                         + ("HF_HUB_OFFLINE=1 forbids downloading it" if offline
                            else "the hub is unreachable")
                         + "; download it where the hub is reachable, or give a local folder"
                         ) from None
    except HFValidationError:
        raise ModelError(f"stt.model = {model!r} is neither a local folder nor a hub id") from None
    except OSError as exc:  # RepositoryNotFoundError and other hub errors
        raise ModelError(f"cannot fetch STT model {model!r}: {exc}") from None
    return _check_folder(folder)


class MlxWhisperStt(SttModel):
    """A loaded mlx-whisper model, shared by every pipeline unit (calls take the MLX lock)."""

    sample_rate = SAMPLE_RATE
    actual_device = "mlx"

    def __init__(self, model, folder: Path, fp16: bool, lock: MlxLock,
                 compute_device: str) -> None:
        self._model = model
        self.folder = folder
        self.name = str(folder)
        self.fp16 = fp16
        self.lock: MlxLock = lock
        self.compute_device = compute_device  # "gpu" or "cpu": MLX's own default device
        self.multilingual = bool(model.is_multilingual)

    @property
    def dtype(self) -> str:
        return "float16" if self.fp16 else "float32"

    def check_language(self, language: str | None) -> None:
        """ConfigError unless the model can transcribe ``language`` (None: detect on a
        multilingual model, English on a .en one; ``auto``: detect, multilingual only)."""
        from mlx_whisper.tokenizer import LANGUAGES

        check_whisper_language(language, model=self.name, multilingual=self.multilingual,
                               known=LANGUAGES)

    def transcribe(self, audio: np.ndarray, language: str | None = None, beam_size: int = 1,
                   fit_window_s: float | None = None, unit: int | None = None) -> SttResult:
        """Transcribe 16 kHz mono float32 ``audio``; thread-safe through the MLX lock.

        Greedy (or beam search) at temperature 0 without fallback, timestamps or
        conditioning on earlier text: the pipeline's VAD has already cut the segment.
        ``fit_window_s`` is ignored: mlx-whisper's ``transcribe`` pads every window to 30 s
        (``stt.window`` fit is faster-whisper's).
        ``compute_seconds`` includes waiting for the MLX lock. ``unit`` labels the lock
        hold (default: the unit of the calling stage thread).
        """
        audio = np.ascontiguousarray(audio, dtype=np.float32)
        if audio.ndim != 1:
            raise AudioInputError(f"STT takes mono (1-D) 16 kHz audio; got shape {audio.shape}")
        self.check_language(language)
        seconds = audio.size / SAMPLE_RATE
        if audio.size == 0:
            return SttResult("", 0.0, 0.0)
        options = {"language": language, "fp16": self.fp16, "without_timestamps": True}
        if beam_size > 1:
            options["beam_size"] = beam_size
        start = time.perf_counter()
        with self.lock.hold(STAGE, unit):  # None: the unit the caller works for
            import mlx_whisper
            from mlx_whisper.transcribe import ModelHolder

            ModelHolder.model, ModelHolder.model_path = self._model, self.name
            result = mlx_whisper.transcribe(
                audio, path_or_hf_repo=self.name, verbose=None, temperature=0.0,
                condition_on_previous_text=False, **options)
        text = str(result.get("text", "")).strip()
        # mlx-whisper names the language it decoded in (detected: no probabilities).
        return SttResult(text, seconds, time.perf_counter() - start,
                         language=str(result.get("language") or language or "en"))

    def warmup(self) -> SttResult:
        """Transcribe 1 s of silence: the first call pays MLX's one-off kernel set-up."""
        return self.transcribe(np.zeros(SAMPLE_RATE, dtype=np.float32))

    def close(self) -> None:
        """Drop the model (and mlx-whisper's cached reference to it)."""
        with self.lock.hold(STAGE):
            from mlx_whisper.transcribe import ModelHolder

            if ModelHolder.model is self._model:
                ModelHolder.model, ModelHolder.model_path = None, None
            self._model = None


def _fp16(dtype: str, compute_device: str) -> bool:
    if dtype not in _DTYPES:
        raise ConfigError(f"'stt.dtype' = {dtype!r} is not supported by mlx-whisper; "
                          f"choices: {', '.join(_DTYPES)}")
    if dtype == "auto":
        return compute_device == "gpu"  # MLX's CPU backend is faster in float32
    return dtype == "float16"


def load(request: LoadRequest, progress: Progress = no_progress, *,
         lock: MlxLock | None = None) -> MlxWhisperStt:
    """Load ``request.model`` (an mlx-whisper folder or hub id) on MLX.

    ``request.dtype``: auto (float16 on the GPU, float32 on MLX's CPU backend), float16
    or float32. Language and beam size are per call (``transcribe``).
    ``lock``: the MLX lock to use (default: the process-wide one).
    """
    if request.device.kind != "mlx":
        raise DeviceError(f"stt stage: mlx-whisper runs on mlx, not on {request.device}")
    mlx_guard.enable_from_env()
    lock = lock or get_mlx_lock()
    folder = resolve_model_folder(request.model, progress)
    progress(None, f"loading Whisper {folder.name} on MLX")
    started = time.perf_counter()
    with lock.hold(STAGE):
        import mlx.core as mx
        from mlx_whisper.load_models import load_model

        compute_device = mlx_compute_device()
        fp16 = _fp16(request.dtype, compute_device)
        try:
            model = load_model(str(folder), dtype=mx.float16 if fp16 else mx.float32)
        except (OSError, ValueError, TypeError, KeyError, RuntimeError) as exc:
            raise ModelError(f"mlx-whisper cannot load the STT model in {folder}: {exc}") from None
    stt = MlxWhisperStt(model, folder, fp16, lock, compute_device)
    progress(1.0, f"Whisper ready on MLX ({compute_device}, {stt.dtype}) in "
                  f"{time.perf_counter() - started:.1f} s")
    return stt
