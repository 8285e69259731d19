"""Live meters: MLX lock, memory per device, queue depth per stage, the last turn's figures
(the microphone level meter is shared: ``app.core.widgets``).

Each meter takes the pieces of an EngineSnapshot it shows; ``MetersPanel.update_snapshot``
hands them out. Painting is cheap (a few rectangles), so 10 Hz updates cost nothing.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QGridLayout, QGroupBox, QLabel, QVBoxLayout, QWidget

from app.core.display import fmt_bytes, fmt_ms
from app.core.widgets import BarMeter
from engine.measures import Figure, UnitOfMeasure


def _detail(text: str = "") -> QLabel:
    label = QLabel(text)
    label.setObjectName("meterDetail")
    label.setWordWrap(True)
    return label


class LockMeter(QGroupBox):
    """The MLX lock: share of time held over the recent window, holder, waits, contention."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("MLX lock", parent)
        grid = QGridLayout(self)
        grid.setContentsMargins(12, 8, 12, 10)
        grid.setColumnStretch(1, 1)
        grid.setVerticalSpacing(4)
        self.caption = QLabel("held")
        self.caption.setObjectName("meterTitle")
        self.bar = BarMeter("stage:llm")
        self.value = QLabel("—")
        self.value.setObjectName("meterValue")
        self.detail = _detail("no MLX stage in use")
        self.stages = _detail("")
        grid.addWidget(self.caption, 0, 0)
        grid.addWidget(self.bar, 0, 1)
        grid.addWidget(self.value, 0, 2)
        grid.addWidget(self.detail, 1, 0, 1, 3)
        grid.addWidget(self.stages, 2, 0, 1, 3)
        self.in_use = False
        self.update_lock(None)

    def update_lock(self, lock) -> None:
        """Show an ``engine.runtime.mlx_lock.MlxLockSnapshot``; None means no stage runs on MLX."""
        self.in_use = lock is not None
        for w in (self.caption, self.bar, self.value, self.stages):
            w.setVisible(self.in_use)
        if lock is None:
            self.detail.setText("no MLX stage in use")
            return
        self.bar.set_value(lock.utilization)
        self.value.setText(f"{lock.utilization * 100:.0f} %")
        self.caption.setText(f"held, last {lock.window_s:g} s")
        holder = lock.holder.describe(lock.t) if lock.holder else "free"
        timeouts = f"  ·  {lock.timeouts} timed out" if lock.timeouts else ""
        self.detail.setText(
            f"holder: {holder}<br>wait p95 {fmt_ms(lock.wait_p95)} (max {fmt_ms(lock.wait_max)})  ·  "
            f"contended {lock.contended} of {lock.acquisitions}{timeouts}<br>"
            f"hold p50 {fmt_ms(lock.hold_p50)}  ·  p95 {fmt_ms(lock.hold_p95)}")
        self.stages.setText("<br>".join(
            f"{s.stage}: {s.acquisitions} holds, {fmt_ms(s.hold_total)} held, {s.contended} waited"
            for s in lock.stages))


class MemoryMeter(QGroupBox):
    """One row per device in use: what this process uses, and the device's total."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Memory", parent)
        self._grid = QGridLayout(self)
        self._grid.setContentsMargins(12, 8, 12, 10)
        self._grid.setColumnStretch(1, 1)
        self._grid.setVerticalSpacing(4)
        self._rows: dict[str, tuple[QLabel, BarMeter, QLabel, QLabel]] = {}
        self.readings: dict[str, object] = {}
        self._empty = _detail("no models loaded yet")
        self._grid.addWidget(self._empty, 100, 0, 1, 3)

    def update_memory(self, readings) -> None:
        """Show a tuple of MemoryReading."""
        self.readings = {r.device: r for r in readings}
        self._empty.setVisible(not readings)
        for reading in readings:
            row = self._rows.get(reading.device)
            if row is None:
                row = self._add_row(reading.device, len(self._rows))
            _name, bar, value, detail = row
            used, secondary, summary, extra = _memory_text(reading)
            bar.set_value(used, secondary)
            value.setText(summary)
            detail.setText(extra)
        for device, row in self._rows.items():
            for w in row:
                w.setVisible(device in self.readings)

    def _add_row(self, device: str, index: int):
        color = f"series:{index}"
        name = QLabel(device)
        name.setObjectName("meterTitle")
        bar = BarMeter(color)
        value = QLabel()
        value.setObjectName("meterValue")
        detail = _detail()
        self._grid.addWidget(name, 2 * index, 0)
        self._grid.addWidget(bar, 2 * index, 1)
        self._grid.addWidget(value, 2 * index, 2)
        self._grid.addWidget(detail, 2 * index + 1, 0, 1, 3)
        self._rows[device] = (name, bar, value, detail)
        return self._rows[device]


def _memory_text(r) -> tuple[float, float | None, str, str]:
    """(bar fraction, secondary fraction, value text, detail line) of one reading."""
    extra = r.extra or {}
    if r.device == "cpu":
        frac = r.used_bytes / r.total_bytes if r.total_bytes else 0.0
        return frac, None, fmt_bytes(r.used_bytes), \
            f"process RSS  ·  system {fmt_bytes(r.available_bytes)} available of {fmt_bytes(r.total_bytes)}"
    if r.device.startswith("cuda"):
        device_used = extra.get("device_used")
        frac = r.used_bytes / r.total_bytes if r.total_bytes else 0.0
        sec = device_used / r.total_bytes if r.total_bytes and device_used is not None else None
        return frac, sec, fmt_bytes(r.used_bytes), \
            (f"this process allocated (reserved {fmt_bytes(extra.get('reserved'))})  ·  "
             f"device {fmt_bytes(device_used)} used of {fmt_bytes(r.total_bytes)}")
    if r.device == "mps":
        frac = r.used_bytes / r.total_bytes if r.total_bytes else 0.0
        return frac, None, fmt_bytes(r.used_bytes), \
            f"allocated  ·  driver {fmt_bytes(extra.get('driver'))}  ·  max {fmt_bytes(r.total_bytes)}"
    if r.device == "mlx":
        peak = extra.get("peak") or 0
        frac = r.used_bytes / peak if peak else 0.0
        return frac, None, fmt_bytes(r.used_bytes), (
            f"active (bar: share of peak)  ·  peak {fmt_bytes(peak)}  ·  "
            f"cache {fmt_bytes(extra.get('cache'))}")
    frac = r.used_bytes / r.total_bytes if r.total_bytes else 0.0
    return frac, None, fmt_bytes(r.used_bytes), f"of {fmt_bytes(r.total_bytes)}"


class QueueMeter(QGroupBox):
    """Queue depth per stage (messages waiting / capacity) with its compute p50."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Queues", parent)
        self._grid = QGridLayout(self)
        self._grid.setContentsMargins(12, 8, 12, 10)
        self._grid.setColumnStretch(1, 1)
        self._grid.setVerticalSpacing(6)
        self._rows: dict[str, tuple[BarMeter, QLabel]] = {}
        self.depths: dict[str, tuple[int, int]] = {}
        self._empty = _detail("the pipeline is not running")
        self._grid.addWidget(self._empty, 0, 0, 1, 3)

    def update_stages(self, stages) -> None:
        """Show a tuple of StageStats."""
        self.depths = {s.name: (s.queue_depth, s.queue_capacity) for s in stages}
        self._empty.setVisible(not any(cap for _d, cap in self.depths.values()))
        for s in stages:
            row = self._rows.get(s.name)
            if row is None:
                row = self._add_row(s.name)
            bar, value = row
            bar.set_value(s.queue_depth / s.queue_capacity if s.queue_capacity else 0.0)
            p50 = f"  ·  p50 {fmt_ms(s.p50_s)}" if s.p50_s is not None else ""
            value.setText(f"{s.queue_depth}/{s.queue_capacity or '—'}{p50}")

    def _add_row(self, name: str):
        index = len(self._rows) + 1
        title = QLabel(name)
        title.setObjectName("meterTitle")
        bar = BarMeter(f"stage:{name}")
        value = QLabel()
        value.setObjectName("meterValue")
        self._grid.addWidget(title, index, 0)
        self._grid.addWidget(bar, index, 1)
        self._grid.addWidget(value, index, 2)
        self._rows[name] = (bar, value)
        return self._rows[name]


def end_of_turn_text(record) -> str:
    """The learned end-of-turn decision of a turn, with the signals it weighed."""
    signals = "  ".join(f"{name} {record.value(figure):.2f}" for name, figure in (
        ("audio", Figure.EOT_AUDIO_P), ("text", Figure.EOT_TEXT_P))
        if record.value(figure) is not None)
    decision = "early" if record.value(Figure.EOT_EARLY) else "after the grace"
    return f"{decision}  ({signals})" if signals else decision


class LastTurnMeter(QGroupBox):
    """The figures of the latest finished turn: where its voice-to-voice time went."""

    ROWS = ((Figure.VOICE_TO_VOICE_S, "Voice-to-voice"), (Figure.SILENCE_WAIT_S, "Silence wait (VAD)"),
            (Figure.COMMIT_WAIT_S, "Wait for the commit"), (Figure.STT_COMPUTE_S, "STT compute"),
            (Figure.LLM_FIRST_CHUNK_COMPUTE_S, "LLM to first clause"),
            (Figure.TTS_FIRST_COMPUTE_S, "TTS first chunk"), (Figure.LLM_TOKENS_PER_S, "LLM decode"),
            (Figure.STT_RTF, "STT real-time factor"), (Figure.TTS_RTF, "TTS real-time factor"),
            (Figure.EOT_EARLY, "End of turn"))

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Last turn", parent)
        grid = QGridLayout(self)
        grid.setContentsMargins(12, 8, 12, 10)
        grid.setVerticalSpacing(3)
        grid.setColumnStretch(0, 1)
        self.values: dict[Figure, QLabel] = {}
        for i, (key, text) in enumerate(self.ROWS):
            label = QLabel(text)
            label.setObjectName("meterDetail")
            value = QLabel("—")
            value.setObjectName("meterValue")
            value.setAlignment(Qt.AlignmentFlag.AlignRight)
            grid.addWidget(label, i, 0)
            grid.addWidget(value, i, 1)
            self.values[key] = value
        self.record = None

    def update_turns(self, turns) -> None:
        """Show the newest finished, not cancelled, turn of a tuple of TurnRecord."""
        done = [t for t in turns if t.finished and not t.cancelled]
        if not done or done[-1] == self.record:
            return
        t = self.record = done[-1]
        self.setTitle(f"Last turn (#{t.turn_id})")
        for key, label in self.values.items():
            value = t.value(key)
            if value is None:
                label.setText("—")
            elif key is Figure.EOT_EARLY:
                label.setText(end_of_turn_text(t))
            elif key is Figure.LLM_TOKENS_PER_S:
                tokens = t.value(Figure.LLM_TOKENS) or 0
                label.setText(f"{value:.1f} tokens/s  ({tokens:.0f} tokens)")
            elif key.unit is UnitOfMeasure.RATIO:
                label.setText(f"{value:.2f}")
            else:
                label.setText(fmt_ms(value))


class MetersPanel(QWidget):
    """The MLX lock, memory and queue meters and the last turn's figures, stacked."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(10)
        self.lock = LockMeter()
        self.memory = MemoryMeter()
        self.queues = QueueMeter()
        self.last_turn = LastTurnMeter()
        for w in (self.lock, self.memory, self.queues, self.last_turn):
            layout.addWidget(w)
        layout.addStretch(1)

    def update_snapshot(self, snap) -> None:
        """Show an EngineSnapshot."""
        self.lock.update_lock(snap.mlx_lock)
        self.memory.update_memory(snap.memory)
        self.queues.update_stages(snap.stages)
        self.last_turn.update_turns(snap.turns)
