"""Helpers for the GUI tests: a device list for the settings panel, real Metrics records
turned into EngineSnapshots, and an event-loop stall meter. (Isolated QSettings are the
``gui_settings`` fixture of tests/conftest.py.)"""

from __future__ import annotations

import time

from PySide6.QtCore import QElapsedTimer, QTimer

from engine.runtime.devices import Device, DeviceInfo
from engine.engine import EngineSnapshot, EngineState, StagePlacement
from engine.measures import Figure, Mark
from engine.runtime.memory import sample_memory
from engine.pipeline.metrics import Metrics

GIB = 2**30


def panel_devices() -> list[DeviceInfo]:
    """A device list as discovery reports it on a two-GPU Linux box with mlx installed:
    input for the settings panel's dropdowns (widget test data, not engine data)."""
    return [
        DeviceInfo(Device("cpu"), "AMD EPYC 9654", True, total_bytes=64 * GIB, free_bytes=40 * GIB),
        DeviceInfo(Device("cuda", 0), "NVIDIA H200", True, total_bytes=141 * GIB, free_bytes=120 * GIB),
        DeviceInfo(Device("cuda", 1), "NVIDIA L4", True, total_bytes=24 * GIB, free_bytes=3 * GIB),
        DeviceInfo(Device("mps"), "Apple GPU (Metal)", False, "MPS exists only on macOS"),
        DeviceInfo(Device("mlx"), "MLX (CPU)", True),
    ]


def recorded_metrics(turns: int = 2) -> Metrics:
    """A real Metrics recorder fed the way the stages feed it: marks, figures, stage times."""
    metrics = Metrics()
    for turn in range(1, turns + 1):
        end = time.perf_counter() + turn
        marks = {"speech_start": end - 2.0, "speech_end": end, "vad_end": end + 0.50,
                 "committed": end + 0.55, "stt_start": end + 0.55, "stt_done": end + 0.75,
                 "llm_start": end + 0.75, "llm_first_token": end + 0.95,
                 "tts_first_text": end + 1.05, "tts_first_audio": end + 1.10,
                 "audio_out_first": end + 1.12, "reply_done": end + 3.0}
        for name, t in marks.items():
            metrics.mark(0, turn, Mark(name), t)
        metrics.set_transcript(0, turn, "ask not what your country can do for you")
        metrics.add_reply(0, turn, "I will do my best.")
        for name, value in (("stt_compute_s", 0.2), ("llm_first_chunk_compute_s", 0.3),
                            ("tts_first_compute_s", 0.05), ("llm_tokens", 12),
                            ("llm_tokens_per_s", 18.5 + turn), ("stt_rtf", 0.1),
                            ("tts_compute_s", 0.3), ("tts_audio_s", 2.0)):
            metrics.figure(0, turn, Figure(name), value)
        metrics.set_finished(0, turn)
        for stage, seconds in (("vad", 0.002), ("stt", 0.2), ("llm", 0.3), ("tts", 0.05), ("sink", 0.001)):
            metrics.stage_time(stage, seconds * turn)
    return metrics


def snapshot_from(metrics: Metrics, depths: dict[str, tuple[int, int]] | None = None,
                  level: float = 0.05, mlx_lock: object | None = None) -> EngineSnapshot:
    """An EngineSnapshot built from a real Metrics recorder and a real memory sample."""
    depths = depths or {"vad": (0, 1), "stt": (1, 8), "llm": (2, 8), "tts": (0, 16), "sink": (3, 64)}
    placements = (
        StagePlacement("vad", "silero", "silero_vad.onnx", "cpu", "cpu", True),
        StagePlacement("stt", "faster-whisper", "/models/tiny.en", "cpu", "cpu", True),
        StagePlacement("llm", "transformers", "/models/SmolLM2-135M-Instruct.Q4_1.gguf", "cpu", "cpu", True),
        StagePlacement("tts", "piper", "/voices/en_US-joe-medium.onnx", "cpu", "cpu", True),
    )
    return EngineSnapshot(
        t=time.perf_counter(), state=EngineState.RUNNING, placements=placements,
        stages=metrics.stage_stats(depths), turns=metrics.turns(), memory=sample_memory({"cpu"}),
        notes=("stt: using the bundled offline model (the hub is offline)",), input_level=level,
        capture_overflows=0, mlx_lock=mlx_lock,
    )


class StallMeter:
    """Measures how long the GUI event loop goes without running a 5 ms timer.

    ``max_gap_ms`` is the longest time between two timer callbacks; ``max_stall_ms`` is
    that minus the 5 ms period: how long the loop was blocked at worst.
    """

    PERIOD_MS = 5

    def __init__(self) -> None:
        self._timer = QTimer()
        self._timer.setInterval(self.PERIOD_MS)
        self._timer.timeout.connect(self._tick)
        self._clock = QElapsedTimer()
        self._last: int | None = None
        self.gaps: list[float] = []

    def start(self) -> None:
        self.gaps.clear()
        self._clock.start()
        self._last = self._clock.nsecsElapsed()
        self._timer.start()

    def stop(self) -> None:
        self._timer.stop()

    def _tick(self) -> None:
        now = self._clock.nsecsElapsed()
        self.gaps.append((now - self._last) / 1e6)
        self._last = now

    @property
    def max_gap_ms(self) -> float:
        return max(self.gaps, default=0.0)

    @property
    def max_stall_ms(self) -> float:
        return max(0.0, self.max_gap_ms - self.PERIOD_MS)

    def p99_gap_ms(self) -> float:
        ordered = sorted(self.gaps)
        return ordered[int(0.99 * (len(ordered) - 1))] if ordered else 0.0
