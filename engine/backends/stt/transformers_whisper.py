"""Whisper on transformers/torch: ``WhisperForConditionalGeneration`` + its processor.

Runs on cpu, cuda:N and mps. A model is a local folder (``save_pretrained`` layout) or a
hub id; hub ids are looked up only in the local cache when ``HF_HUB_OFFLINE=1``.
Calls are serialized with a lock: transformers does not promise that ``generate`` on one
model is safe from several threads at once.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from engine.backends.base import LoadRequest, Progress, SttModel, SttResult
from engine.backends.stt.languages import check_whisper_language
from engine.config import WHISPER_LANGUAGES
from engine.runtime.devices import Device
from engine.errors import AudioInputError, ConfigError, DeviceError, ModelError
from engine.backends.torch_load import TRANSFORMERS_LOAD_LOCK
from engine.runtime.hub import offline as hub_offline
from engine.runtime.memory import torch_weights_bytes
from engine.runtime.mlx_lock import MlxLock, model_lock

SAMPLE_RATE = 16000
WINDOW_SECONDS = 30  # Whisper's fixed input window
_WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                 "pytorch_model.bin.index.json")
_DTYPES = ("float32", "float16", "bfloat16")


def _resolve_model(model: str) -> tuple[str, bool]:
    """``(reference, local_only)``: a checked local folder, or a hub id."""
    path = Path(model).expanduser()
    if path.exists():
        if not path.is_dir():
            raise ModelError(f"STT model {path} is a file; transformers needs a model folder "
                             "(config.json, model.safetensors, preprocessor/tokenizer files)")
        if not (path / "config.json").is_file():
            raise ModelError(f"STT model folder {path} has no config.json")
        if not any((path / name).is_file() for name in _WEIGHT_FILES):
            raise ModelError(f"STT model folder {path} has no weights "
                             f"(expected one of {', '.join(_WEIGHT_FILES)})")
        return str(path), True
    if path.is_absolute() or model.startswith((".", "~")) or model.count("/") > 1:
        raise ModelError(f"STT model folder {model} does not exist")
    return model, hub_offline()


def _torch_device(device: Device):
    import torch

    if device.kind == "cpu":
        return torch.device("cpu")
    if device.kind == "cuda":
        if not torch.cuda.is_available():
            raise DeviceError(f"stt stage: {device} requested but this torch has no usable CUDA")
        if (device.index or 0) >= torch.cuda.device_count():
            raise DeviceError(f"stt stage: {device} requested but only "
                              f"{torch.cuda.device_count()} CUDA device(s) exist")
        return torch.device("cuda", device.index or 0)
    if device.kind == "mps":
        if not torch.backends.mps.is_available():
            raise DeviceError("stt stage: mps requested but this torch has no MPS support")
        return torch.device("mps")
    raise DeviceError(f"stt stage: transformers Whisper runs on cpu, cuda or mps, not {device}")


def _torch_dtype(dtype: str, device_kind: str):
    """``auto``: float16 on cuda/mps, float32 on cpu (half precision is slow on CPUs)."""
    import torch

    if dtype == "auto":
        return torch.float32 if device_kind == "cpu" else torch.float16
    if dtype not in _DTYPES:
        raise ConfigError(f"'stt.dtype' = {dtype!r} is not a torch dtype for transformers "
                          f"Whisper; choices: auto, {', '.join(_DTYPES)}")
    return getattr(torch, dtype)


def _is_multilingual(model) -> bool:
    flag = getattr(model.generation_config, "is_multilingual", None)
    if flag is not None:
        return bool(flag)
    # English-only Whisper vocabularies have 51864 tokens; multilingual ones 51865+.
    return model.config.vocab_size > 51864


def _load_error(ref: str, local_only: bool, exc: Exception) -> ModelError:
    """A ModelError naming the folder or hub id that from_pretrained could not load."""
    if Path(ref).is_dir():
        return ModelError(f"cannot load STT model folder {ref} as a Whisper model: "
                          f"{exc.__class__.__name__}: {exc}")
    if local_only:
        return ModelError(f"STT model {ref!r} is not in the local hub cache and "
                          "HF_HUB_OFFLINE=1 forbids downloading it; download it while online "
                          "or give a local folder")
    return ModelError(f"cannot load STT model {ref!r} from the model hub: "
                      f"{exc.__class__.__name__}: {exc}")


class TransformersWhisperStt(SttModel):
    """A loaded transformers Whisper model and processor, shared by every pipeline unit."""

    sample_rate = SAMPLE_RATE

    def __init__(self, model, processor, name: str) -> None:
        self._model = model
        self._processor = processor
        # generate() keeps state on the model: one call at a time.
        self.lock: MlxLock = model_lock("stt model lock")
        self.name = name
        self.multilingual = _is_multilingual(model)
        self.dtype = next(model.parameters()).dtype
        self.actual_device = str(next(model.parameters()).device)
        self.weights_bytes = torch_weights_bytes(model)
        # The decoder context is max_target_positions tokens; like openai-whisper, let a
        # window generate at most half of it (no 30 s of speech needs more).
        self.max_new_tokens = max(1, model.config.max_target_positions // 2)

    def check_language(self, language: str | None) -> None:
        """ConfigError if an English-only model is asked for another language or ``auto``."""
        check_whisper_language(language, model=self.name, multilingual=self.multilingual,
                               known=WHISPER_LANGUAGES)

    def transcribe(self, audio: np.ndarray, language: str | None = None,
                   beam_size: int = 1, fit_window_s: float | None = None) -> SttResult:
        """Transcribe 16 kHz mono float32 ``audio`` 30 s window by window (greedy when
        ``beam_size`` is 1).

        ``language`` (None: detect) is forced only on multilingual models; English-only
        models take no language token. ``fit_window_s`` is ignored: transformers' Whisper
        encoder takes exactly 3000 frames, so every window is 30 s (``stt.window`` fit is
        faster-whisper's).
        """
        import torch

        audio = np.ascontiguousarray(audio, dtype=np.float32)
        if audio.ndim != 1:
            raise AudioInputError(f"STT takes mono (1-D) 16 kHz audio; got shape {audio.shape}")
        self.check_language(language)
        kwargs: dict[str, int | str] = {"max_new_tokens": self.max_new_tokens, "num_beams": beam_size}
        if self.multilingual:
            kwargs["task"] = "transcribe"
            if language:
                kwargs["language"] = language
        window = WINDOW_SECONDS * SAMPLE_RATE
        start = time.perf_counter()
        texts = []
        with self.lock.hold("stt"), torch.inference_mode():
            for offset in range(0, audio.size, window):
                features = self._processor.feature_extractor(
                    audio[offset:offset + window], sampling_rate=SAMPLE_RATE,
                    return_tensors="pt").input_features
                features = features.to(self._model.device, dtype=self.dtype)
                tokens = self._model.generate(features, **kwargs)
                texts.append(self._processor.batch_decode(tokens, skip_special_tokens=True)[0])
        text = " ".join(t.strip() for t in texts if t.strip())
        # The language asked for; a detected one is not reported by this path.
        return SttResult(text, audio.size / SAMPLE_RATE, time.perf_counter() - start,
                         language=language if self.multilingual else "en")

    def warmup(self) -> SttResult:
        """Transcribe 1 s of silence: the first call pays one-off setup costs."""
        return self.transcribe(np.zeros(SAMPLE_RATE, dtype=np.float32))


def load(request: LoadRequest, progress: Progress) -> TransformersWhisperStt:
    """Load ``request.model`` (folder or hub id) on ``request.device`` in ``request.dtype``.

    Language and beam size are per call (``transcribe``).
    """
    from transformers import AutoProcessor, WhisperForConditionalGeneration

    device = _torch_device(request.device)
    dtype = _torch_dtype(request.dtype, request.device.kind)
    ref, local_only = _resolve_model(request.model)
    progress(None, f"loading Whisper {ref} ({str(dtype).removeprefix('torch.')}) on {device}")
    with TRANSFORMERS_LOAD_LOCK:
        try:
            processor = AutoProcessor.from_pretrained(ref, local_files_only=local_only)
            model = WhisperForConditionalGeneration.from_pretrained(
                ref, dtype=dtype, local_files_only=local_only)
        except Exception as exc:  # noqa: BLE001 - hub misses, unreadable or foreign files: many types
            raise _load_error(ref, local_only, exc) from None
        if not (hasattr(processor, "feature_extractor") and hasattr(processor, "batch_decode")):
            raise ModelError(f"STT model {ref} has no Whisper processor (feature extractor and "
                             "tokenizer files)")
        try:
            # transformers wraps Module.to with functools.wraps, which pyright reads as unbound.
            model = model.to(device).eval()  # pyright: ignore[reportArgumentType]
        except (RuntimeError, AssertionError) as exc:
            raise DeviceError(f"stt stage: cannot move Whisper to {device}: {exc}") from None
    stt = TransformersWhisperStt(model, processor, ref)
    progress(1.0, f"Whisper ready on {stt.actual_device} ({str(stt.dtype).removeprefix('torch.')})")
    return stt
