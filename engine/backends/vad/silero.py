"""Silero VAD run with onnxruntime directly, from the ONNX file shipped in ``silero-vad``.

One ``InferenceSession`` is the shared model (``run`` is thread-safe in onnxruntime);
each pipeline unit's ``new_stream()`` keeps its own recurrent state and audio context,
so several units can share the model without hearing each other.

The package is located with ``importlib.util.find_spec`` rather than imported: importing
``silero_vad`` imports torch and calls ``torch.set_num_threads(1)`` for the whole process,
which would slow every torch stage down.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

from engine.backends.base import LoadRequest, Progress, VadModel, VadStream
from engine.backends.onnx_device import onnx_actual_device, onnx_providers
from engine.runtime.devices import Device
from engine.errors import AudioInputError, DeviceError, ModelError
from engine.runtime.memory import file_bytes

SAMPLE_RATE = 16000
FRAME_SAMPLES = 512  # 32 ms: the only frame size the 16 kHz model accepts
CONTEXT_SAMPLES = 64  # the tail of the previous frame, prepended to every frame
_STATE_SHAPE = (2, 1, 128)
_MODEL_FILE = "silero_vad.onnx"


def model_path() -> Path:
    """The ONNX file inside the installed ``silero-vad`` package (without importing it)."""
    try:
        spec = importlib.util.find_spec("silero_vad")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise ModelError("the silero-vad package is not installed (pip install silero-vad)")
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / _MODEL_FILE
    if not path.is_file():
        raise ModelError(f"the silero-vad package has no {_MODEL_FILE}: {path} is missing")
    return path


def _providers(device: Device, available: list[str]) -> list:
    return onnx_providers("vad", "Silero VAD", device, available)


class SileroStream(VadStream):
    """One audio stream's VAD state: the recurrent state and the last 64 samples."""

    def __init__(self, model: SileroVad) -> None:
        self._model = model
        self.reset()

    def reset(self) -> None:
        """Forget everything heard so far (new recording, or after a long silence)."""
        self._state = np.zeros(_STATE_SHAPE, dtype=np.float32)
        self._context = np.zeros((1, CONTEXT_SAMPLES), dtype=np.float32)

    def speech_probability(self, frame: np.ndarray) -> float:
        """Probability (0..1) that ``frame``, 512 float32 samples at 16 kHz, is speech.

        Frames must be fed in order: each call advances this stream's state.
        """
        frame = np.asarray(frame, dtype=np.float32)
        if frame.shape != (FRAME_SAMPLES,):
            raise AudioInputError(
                f"Silero VAD takes frames of {FRAME_SAMPLES} samples at {SAMPLE_RATE} Hz "
                f"(mono, 1-D); got shape {frame.shape}"
            )
        x = np.concatenate([self._context, frame[None, :]], axis=1)
        prob, self._state = self._model._run(x, self._state)
        self._context = x[:, -CONTEXT_SAMPLES:]
        return prob


class SileroVad(VadModel):
    """The shared Silero model: one ONNX session, many independent streams."""

    sample_rate = SAMPLE_RATE
    frame_samples = FRAME_SAMPLES

    def __init__(self, session, path: Path) -> None:
        self._session = session
        self._sr = np.array(SAMPLE_RATE, dtype=np.int64)
        self.path = path
        self.actual_device = onnx_actual_device(session)
        self.weights_bytes = file_bytes(path)

    def new_stream(self) -> SileroStream:
        """A fresh stream with its own state (one per pipeline unit or recording)."""
        return SileroStream(self)

    def _run(self, x: np.ndarray, state: np.ndarray) -> tuple[float, np.ndarray]:
        out, new_state = self._session.run(None, {"input": x, "state": state, "sr": self._sr})
        return float(out[0, 0]), new_state


def load(request: LoadRequest, progress: Progress) -> SileroVad:
    """Load the bundled Silero VAD on ``request.device`` (cpu, or cuda with onnxruntime-gpu).

    The session uses one intra-op thread: the VAD runs every 32 ms next to other stages
    on few cores, and a 512-sample frame gains nothing from more threads.
    ``request.model`` and ``request.dtype`` are ignored: there is one bundled model.
    """
    import onnxruntime as ort

    path = model_path()
    progress(None, f"loading Silero VAD from {path.name}")
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3  # warnings about unused initializers are noise
    providers = _providers(request.device, ort.get_available_providers())
    try:
        session = ort.InferenceSession(str(path), sess_options=options, providers=providers)
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own untyped errors
        raise ModelError(f"cannot load Silero VAD from {path}: {exc}") from None
    model = SileroVad(session, path)
    if request.device.kind == "cuda" and not model.actual_device.startswith("cuda"):
        raise DeviceError(
            f"vad stage: onnxruntime did not place Silero VAD on {request.device} "
            f"(it runs on {model.actual_device}); check the CUDA libraries of onnxruntime-gpu"
        )
    progress(1.0, f"Silero VAD ready on {model.actual_device}")
    return model


def bundled_model() -> str | None:
    """The ONNX model inside the installed ``silero-vad`` package, or None if absent."""
    try:
        return str(model_path())
    except ModelError:
        return None
