"""Smart Turn v3.2: the probability that the user finished their turn, from the audio.

The model (8.7 MB ONNX, BSD-2-Clause, by Daily) ships inside the ``pipecat-ai`` wheel,
which Parley installs without its dependencies: the file and its numpy feature extractor
are located with ``find_spec`` and loaded by path, so pipecat itself (and loguru, which
its package imports) is never imported. Input: the last 8 s at 16 kHz (zero-padded in
front) as 80 x 800 Whisper log-mel features; output: one probability.
"""

from __future__ import annotations

import importlib.util
import threading
import time
from pathlib import Path

import numpy as np

from engine.errors import MissingDependencyError, ModelError
from engine.runtime.compute_gate import threads_per_call

SAMPLE_RATE = 16000
WINDOW_S = 8
_PACKAGE = "pipecat"
_RELATIVE = Path("audio", "turn", "smart_turn")
MODEL_FILE = "smart-turn-v3.2-cpu.onnx"


def model_files() -> tuple[Path, Path]:
    """The ONNX model and the feature extractor inside the installed pipecat-ai wheel.

    MissingDependencyError (with the pip command) when the wheel is not installed.
    """
    try:
        spec = importlib.util.find_spec(_PACKAGE)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        # Only the model file is wanted: pipecat's own dependencies are large and unused.
        raise MissingDependencyError("learned end-of-turn detection (Smart Turn)", "pipecat-ai",
                                     "", "pip install --no-deps 'pipecat-ai==1.14.0'")
    folder = Path(next(iter(spec.submodule_search_locations))) / _RELATIVE
    return folder / "data" / MODEL_FILE, folder / "_whisper_features.py"


def _load_features(path: Path):
    """The numpy log-mel function, loaded from its file without importing pipecat."""
    spec = importlib.util.spec_from_file_location("parley_smart_turn_features", path)
    if spec is None or spec.loader is None:
        raise ModelError(f"Smart Turn feature extractor {path} cannot be loaded")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.compute_whisper_log_mel_features


class SmartTurn:
    """The loaded model; ``probability(audio)`` is thread-safe (onnxruntime's run is)."""

    def __init__(self, model_path: Path | None = None, features_path: Path | None = None,
                 threads: int | None = None) -> None:
        import onnxruntime

        if model_path is None:
            model_path, default_features = model_files()
            features_path = features_path or default_features
        elif features_path is None:
            features_path = model_files()[1]
        if not model_path.is_file():
            raise ModelError(f"Smart Turn model not found: {model_path}")
        try:
            self._features = _load_features(features_path)
        except (OSError, SyntaxError, AttributeError) as exc:
            raise ModelError(f"Smart Turn feature extractor {features_path} cannot be loaded: "
                             f"{exc}") from None
        options = onnxruntime.SessionOptions()
        # Its call has the CPU to itself (engine.runtime.compute_gate): all of it.
        options.intra_op_num_threads = threads_per_call() if threads is None else threads
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        try:
            self._session = onnxruntime.InferenceSession(str(model_path), sess_options=options,
                                                         providers=["CPUExecutionProvider"])
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own untyped errors
            raise ModelError(f"Smart Turn model {model_path} cannot be loaded: {exc}") from None
        self.path = model_path
        self._lock = threading.Lock()
        self.last_seconds = 0.0

    def probability(self, audio: np.ndarray) -> float:
        """P(the turn is complete) for 16 kHz mono float32 speech ending now."""
        window = WINDOW_S * SAMPLE_RATE
        audio = np.asarray(audio, dtype=np.float32)[-window:]
        if audio.size < window:
            audio = np.pad(audio, (window - audio.size, 0))
        started = time.perf_counter()
        features = self._features(audio, do_normalize=True)[np.newaxis].astype(np.float32)
        (out,) = self._session.run(None, {"input_features": features})[:1]
        self.last_seconds = time.perf_counter() - started
        return float(np.asarray(out).reshape(-1)[0])
