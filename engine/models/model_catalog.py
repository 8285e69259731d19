"""Known models: precision, size, and the speed class to expect on a device.

Generating a token reads every weight once, so the time per token follows the bytes of
weights over the device's memory bandwidth. A speed class is that expectation in three
words (``fast``, ``moderate``, ``slow``) from the weights' size and the device kind; it is
not a measurement of this machine. On Apple Silicon the difference is large: in
huggingface/speech-to-speech's own Mac report (issue 516) the same Qwen3-4B took 21-34 s
from the end of speech to the first audio in bf16 and 1.5-3 s in 4-bit.

``KNOWN`` lists the hub defaults of every backend and the MLX builds worth choosing, with
their download size. Any other model is profiled from its name (``-4bit``, ``-bf16``,
``-q4``, ``-7B``...) and, when it is on disk, from its ``config.json`` (mlx-lm and
mlx-whisper write ``quantization``; transformers writes ``torch_dtype``) and the size of
its weight files. ``placement_notes`` says what ``auto`` picked on Apple Silicon and warns
about a full-precision LLM there. Only file reads here: no hub request, no heavy import.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

FAST, MODERATE, SLOW = "fast", "moderate", "slow"
FULL_PRECISION = ("bf16", "fp16", "fp32")
APPLE_KINDS = ("mlx", "mps")  # where the speed of an LLM decides whether Parley is usable
GB = 1_000_000_000

#: Weight bytes up to which a device kind is expected fast, then moderate; slow above.
_LIMITS = {"mlx": (3 * GB, 6 * GB), "mps": (3 * GB, 6 * GB), "cuda": (16 * GB, 40 * GB),
           "cpu": (GB // 2, 2 * GB)}
_DEVICE_NAMES = {"mlx": "MLX", "mps": "mps", "cuda": "CUDA", "cpu": "CPU"}
_WEIGHT_SUFFIXES = (".safetensors", ".npz", ".bin", ".gguf", ".pth", ".pt", ".onnx")
_SPEECH_REPORT = ("huggingface/speech-to-speech measured 21-34 s from speech to first audio "
                  "with Qwen3-4B in bf16 on a Mac, 1.5-3 s with the 4-bit build")


@dataclass(frozen=True, slots=True)
class KnownModel:
    """A model of the table: hub id, stage, precision, download size, the device kinds
    its speed class is given for, and what it is in a few words."""

    repo: str
    stage: str
    precision: str
    size_bytes: int
    devices: tuple[str, ...]
    about: str


KNOWN: tuple[KnownModel, ...] = (
    # MLX (Apple Silicon). The first of each stage is the registry's hub default.
    KnownModel("mlx-community/Qwen3-4B-Instruct-2507-4bit", "llm", "4-bit", 2_260_000_000,
               ("mlx",), "Qwen3-4B Instruct 2507 in 4-bit, about a quarter of the bytes per token "
               "of its bf16 build (8.1 GB)"),
    KnownModel("mlx-community/Qwen3-4B-Instruct-2507-8bit", "llm", "8-bit", 4_270_000_000,
               ("mlx",), "Qwen3-4B Instruct 2507, 8-bit"),
    KnownModel("mlx-community/Qwen3-4B-Instruct-2507-bf16", "llm", "bf16", 8_050_000_000,
               ("mlx",), "Qwen3-4B Instruct 2507, full precision"),
    KnownModel("mlx-community/Qwen3-8B-4bit", "llm", "4-bit", 4_620_000_000, ("mlx",),
               "Qwen3-8B, 4-bit"),
    KnownModel("mlx-community/whisper-large-v3-turbo", "stt", "fp16", 1_610_000_000, ("mlx",),
               "Whisper large-v3 turbo (4 decoder layers instead of 32)"),
    KnownModel("mlx-community/whisper-large-v3-turbo-q4", "stt", "4-bit", 500_000_000, ("mlx",),
               "Whisper large-v3 turbo, 4-bit (size about 0.5 GB)"),
    KnownModel("mlx-community/whisper-large-v3-mlx", "stt", "fp16", 3_080_000_000, ("mlx",),
               "Whisper large-v3 (32 decoder layers)"),
    # The other backends' hub defaults.
    KnownModel("mobiuslabsgmbh/faster-whisper-large-v3-turbo", "stt", "fp16", 1_620_000_000,
               ("cuda", "cpu"), "Whisper large-v3 turbo for CTranslate2"),
    KnownModel("openai/whisper-large-v3-turbo", "stt", "fp16", 1_620_000_000,
               ("cuda", "mps", "cpu"), "Whisper large-v3 turbo for transformers"),
    KnownModel("Qwen/Qwen3-4B-Instruct-2507", "llm", "bf16", 8_050_000_000,
               ("cuda", "mps", "cpu"), "Qwen3-4B Instruct 2507, full precision"),
    KnownModel("HuggingFaceTB/SmolLM2-360M-Instruct", "llm", "bf16", 724_000_000, ("cpu",),
               "SmolLM2-360M Instruct"),
    KnownModel("hexgrad/Kokoro-82M", "tts", "fp32", 327_000_000, ("cuda", "mps", "cpu"),
               "Kokoro-82M"),
    KnownModel("rhasspy/piper-voices", "tts", "fp32", 63_000_000, ("cpu",),
               "a Piper voice (medium quality)"),
)
_BY_REPO = {m.repo: m for m in KNOWN}


def speed_class(size_bytes: int | None, device_kind: str) -> str | None:
    """``fast``/``moderate``/``slow`` for weights of ``size_bytes`` on ``device_kind``;
    None when the size is unknown or the kind has no class (``remote``)."""
    limits = _LIMITS.get(device_kind)
    if size_bytes is None or limits is None:
        return None
    return FAST if size_bytes <= limits[0] else MODERATE if size_bytes <= limits[1] else SLOW


def human_size(size_bytes: int) -> str:
    """Decimal units, as download sites show them: ``2.3 GB``, ``327 MB``."""
    if size_bytes >= GB:
        return f"{size_bytes / GB:.1f} GB"
    return f"{size_bytes / 1e6:.0f} MB"


@dataclass(frozen=True, slots=True)
class ModelProfile:
    """What is known or estimated of one model: ``precision`` ("4-bit", "bf16"...; ""
    unknown), weight ``size_bytes`` (None unknown), the device kinds its speed class is
    for, and whether it came from the table (``known``) or was estimated."""

    name: str
    precision: str
    size_bytes: int | None
    devices: tuple[str, ...]
    about: str = ""
    known: bool = False

    @property
    def full_precision(self) -> bool:
        return self.precision in FULL_PRECISION

    def speed(self, device_kind: str) -> str | None:
        """The expected speed class on ``device_kind``, or None."""
        return speed_class(self.size_bytes, device_kind)

    def speed_text(self) -> str:
        """``fast on MLX`` or ``fast on CUDA · slow on CPU``; ``unknown`` without a size
        or a device."""
        parts = [f"{speed} on {_DEVICE_NAMES.get(kind, kind)}" for kind in self.devices
                 if (speed := self.speed(kind)) is not None]
        return " · ".join(parts) or "unknown"

    def summary(self, device_kind: str) -> str:
        """``4-bit, 2.3 GB, expected fast on MLX`` (the parts that are known)."""
        parts = [self.precision] if self.precision else []
        if self.size_bytes:
            parts.append(human_size(self.size_bytes))
        speed = self.speed(device_kind)
        if speed:
            parts.append(f"expected {speed} on {_DEVICE_NAMES.get(device_kind, device_kind)}")
        return ", ".join(parts)


# ----------------------------------------------------------------------------- reading
def _tokens(name: str) -> list[str]:
    # A dot splits too, except inside a number ("0.5B", "qwen2.5"): "8B.Q4_1.gguf".
    return [t for t in re.split(r"[^a-z0-9.]+|(?<!\d)\.|\.(?!\d)", name.lower()) if t]


def precision_from_name(name: str) -> str:
    """The precision a model's name states (the last such part wins): ``4-bit`` for
    ``-4bit``, ``-q4``, ``-int4``, ``-mxfp4``; ``bf16``, ``fp16``, ``fp32``; else ""."""
    found = ""
    for token in _tokens(Path(name.split(":", 1)[0]).name or name):
        if token in ("bf16", "bfloat16"):
            found = "bf16"
        elif token in ("fp16", "f16", "float16", "half"):
            found = "fp16"
        elif token in ("fp32", "f32", "float32"):
            found = "fp32"
        elif match := re.fullmatch(r"(?:(\d)bit|(?:q|int|mxfp|nvfp)(\d)(?:_\w+)?)", token):
            found = f"{match.group(1) or match.group(2)}-bit"
    return found


def parameters_from_name(name: str) -> float | None:
    """The parameter count a name states (``4B``, ``0.5B``, ``135M``), or None."""
    for token in _tokens(Path(name.split(":", 1)[0]).name or name):
        if match := re.fullmatch(r"(\d+(?:\.\d+)?)([bm])", token):
            return float(match.group(1)) * (1e9 if match.group(2) == "b" else 1e6)
    return None


def precision_from_config(config: dict) -> str:
    """The precision a ``config.json`` records: mlx ``quantization`` bits, a transformers
    ``quantization_config``'s bits, else its ``torch_dtype``/``dtype``; "" if none."""
    for key in ("quantization", "quantization_config"):
        quant = config.get(key)
        if isinstance(quant, dict) and isinstance(quant.get("bits"), int):
            return f"{quant['bits']}-bit"
    dtype = str(config.get("torch_dtype") or config.get("dtype") or "")
    return {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}.get(dtype, "")


def is_mlx_format(name: str, config: dict | None = None) -> bool:
    """An MLX build: from mlx-community, named ``-mlx``, or a config only mlx-lm or
    mlx-whisper writes (``quantization``; Whisper's ``n_audio_ctx``)."""
    repo = name.split(":", 1)[0]
    if repo.startswith("mlx-community/") or "mlx" in _tokens(Path(repo).name):
        return True
    return bool(config) and ("quantization" in config or "n_audio_ctx" in config)


def _bytes_per_weight(precision: str) -> float | None:
    if precision in ("bf16", "fp16"):
        return 2.0
    if precision == "fp32":
        return 4.0
    if match := re.fullmatch(r"(\d)-bit", precision):
        return (int(match.group(1)) + 0.5) / 8  # a 16-bit scale and bias per 64 weights
    return None


def snapshot_folder(repo_id: str, hub_cache: Path) -> Path | None:
    """The cached snapshot of ``repo_id`` (the one ``refs/main`` names, else any)."""
    repo = hub_cache / f"models--{repo_id.split(':', 1)[0].replace('/', '--')}"
    snapshots = repo / "snapshots"
    try:
        main = (repo / "refs" / "main").read_text(encoding="utf-8").strip()
        if (snapshots / main).is_dir():
            return snapshots / main
        return next((s for s in sorted(snapshots.iterdir()) if s.is_dir()), None)
    except OSError:
        return None


def model_folder(model: str, hub_cache: Path | None) -> Path | None:
    """Where ``model``'s files are on disk: a local path, or its hub cache snapshot."""
    path = Path(model).expanduser()
    if path.exists():
        return path
    if hub_cache is not None and model.split(":", 1)[0].count("/") == 1 and not path.is_absolute():
        return snapshot_folder(model, hub_cache)
    return None


def _read_config(folder: Path | None) -> dict:
    if folder is None or not folder.is_dir():
        return {}
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return config if isinstance(config, dict) else {}


def _weight_bytes(folder: Path | None) -> int | None:
    if folder is None:
        return None
    try:  # weights sit at a model folder's top level; never walk a tree that is not one
        files = [folder] if folder.is_file() else [p for p in folder.iterdir() if p.is_file()]
    except OSError:
        return None
    total = 0
    for file in files:
        if file.suffix in _WEIGHT_SUFFIXES:
            try:
                total += file.stat().st_size
            except OSError:
                continue
    return total or None


def profile(model: str, *, folder: Path | None = None, size_bytes: int | None = None,
            devices: tuple[str, ...] | None = None, hub_cache: Path | None = None) -> ModelProfile:
    """The profile of ``model`` (a hub id, ``repo:file`` or a path): the table's entry,
    else what its name, its ``config.json`` and its weight files say.

    ``folder``: its files (default: found by ``model_folder``); ``size_bytes``: its size
    when the caller knows it (the model manager's scan); ``devices``: the device kinds to
    give the speed class for (default: the table's, ``mlx`` for an MLX build, else none).
    """
    known = _BY_REPO.get(model.split(":", 1)[0])
    if known is not None:
        return ModelProfile(model, known.precision, known.size_bytes,
                            known.devices if devices is None else devices, known.about, True)
    folder = folder or model_folder(model, hub_cache)
    config = _read_config(folder)
    precision = precision_from_config(config) or precision_from_name(model)
    size = size_bytes or _weight_bytes(folder)
    if size is None:
        params, per_weight = parameters_from_name(model), _bytes_per_weight(precision)
        size = int(params * per_weight) if params and per_weight else None
    if devices is None:
        devices = ("mlx",) if is_mlx_format(model, config) else ()
    return ModelProfile(model, precision, size, devices)


def backend_profile(backend: str, model: str, device_kind: str,
                    hub_cache: Path | None = None) -> ModelProfile:
    """The profile of ``model`` as ``backend`` runs it on ``device_kind``: mlx-lm turns a
    GGUF into float32 safetensors, so there it is full precision whatever the file holds."""
    found = profile(model, devices=(device_kind,), hub_cache=hub_cache)
    if backend == "mlx-lm" and model.lower().endswith(".gguf"):
        params = parameters_from_name(model)
        size = int(params * 4) if params else None
        if size is None and found.size_bytes and (per_weight := _bytes_per_weight(found.precision)):
            size = int(found.size_bytes / per_weight * 4)
        return ModelProfile(model, "fp32", size, (device_kind,),
                            "converted from GGUF to float32 for mlx-lm")
    return found


# ----------------------------------------------------------------------------- placement
def fast_mlx_llm() -> str:
    """The registry's 4-bit MLX LLM (what ``llm.model = auto`` picks on MLX)."""
    from engine.backends import BackendRegistry

    return BackendRegistry().get("llm", "mlx-lm").hub_model("mlx") or KNOWN[0].repo


def full_precision_warning(stage: str, backend: str, device_kind: str, model: str,
                           hub_cache: Path | None = None) -> str | None:
    """A warning for a full-precision (bf16/fp16/fp32) LLM on Apple Silicon that is not
    expected fast there, with what to choose instead; None otherwise."""
    if stage != "llm" or device_kind not in APPLE_KINDS:
        return None
    found = backend_profile(backend, model, device_kind, hub_cache)
    speed = found.speed(device_kind)
    if not found.full_precision or speed == FAST:
        return None
    size = f" ({human_size(found.size_bytes)})" if found.size_bytes else ""
    expected = f"expected {speed}" if speed else "its size is unknown: expect it slow unless small"
    if device_kind == "mlx":
        fix = f"choose a 4-bit build such as {fast_mlx_llm()} (llm.model = auto picks it)"
    else:
        fix = ("install MLX (pip install 'parley[mlx]') so that llm = auto runs the 4-bit "
               f"{fast_mlx_llm()} on MLX")
    where = _DEVICE_NAMES[device_kind]
    how = f", {found.about}" if found.about and not found.known else ""  # a converted GGUF
    return (f"{stage}: warning: {model} is {found.precision}{size}{how} on {where}, {expected}: "
            f"each token reads every weight ({_SPEECH_REPORT}); {fix}")


def placement_notes(stage: str, backend: str, device_kind: str, model: str, *, auto: bool,
                    bundled: bool, hub_cache: Path | None = None) -> list[str]:
    """The notes of an Apple Silicon placement: what ``auto`` picked on MLX and why it is
    fast, and the full-precision warning; none elsewhere or for a bundled model."""
    if device_kind not in APPLE_KINDS or bundled:
        return []
    notes = []
    found = backend_profile(backend, model, device_kind, hub_cache)
    if auto and device_kind == "mlx" and found.known:
        notes.append(f"{stage}: auto picked {model} for MLX: {found.about}; "
                     f"{found.summary(device_kind)}")
    warning = full_precision_warning(stage, backend, device_kind, model, hub_cache)
    if warning:
        notes.append(warning)
    return notes
