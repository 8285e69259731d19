"""Live meters: microphone level, MLX lock, memory per device, queue depth per stage.

Each meter takes the pieces of an EngineSnapshot it shows; ``MetersPanel.update_snapshot``
hands them out. Painting is cheap (a few rectangles), so 10 Hz updates cost nothing.
"""

from __future__ import annotations

import math

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QColor, QPainter
from PySide6.QtWidgets import QGridLayout, QGroupBox, QLabel, QVBoxLayout, QWidget

from app.core import theme
from engine.pipeline.metrics import Figure, UnitOfMeasure


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


class BarMeter(QWidget):
    """A rounded horizontal bar: ``value`` (0..1) over a track, optionally a lighter
    ``secondary`` value behind it (e.g. a whole GPU's use behind this process's)."""

    def __init__(self, color: str = "accent", parent: QWidget | None = None, height: int = 10) -> None:
        super().__init__(parent)
        self.value = 0.0
        self.secondary: float | None = None
        # A palette reference ("good", "stage:llm", "series:2") or "#rrggbb", resolved at
        # paint time so a theme switch repaints in the new colours.
        self.color_ref = color
        self._height = height
        self.setMinimumWidth(60)
        self.setFixedHeight(height)

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt's name
        """Wide enough to read, as tall as asked."""
        return QSize(160, self._height)

    def set_value(self, value: float, secondary: float | None = None, color: str | None = None) -> None:
        """Show ``value`` (clamped to 0..1)."""
        value = min(max(value, 0.0), 1.0) if math.isfinite(value) else 0.0
        if color is not None and color != self.color_ref:
            self.color_ref = color
        else:
            color = None
        if value != self.value or secondary != self.secondary or color is not None:
            self.value, self.secondary = value, secondary
            self.update()

    def paintEvent(self, _event) -> None:  # noqa: N802 - Qt's name
        """The track, the secondary value, the value."""
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        p.setPen(Qt.PenStyle.NoPen)
        r = QRectF(self.rect())
        radius = r.height() / 2
        p.setBrush(theme.color("track"))
        bar = theme.color(self.color_ref)
        p.drawRoundedRect(r, radius, radius)
        if self.secondary:
            light = QColor(bar)
            light.setAlpha(70)
            p.setBrush(light)
            p.drawRoundedRect(QRectF(r.x(), r.y(), r.width() * min(self.secondary, 1.0), r.height()),
                              radius, radius)
        if self.value > 0:
            p.setBrush(bar)
            p.drawRoundedRect(QRectF(r.x(), r.y(), max(r.height(), r.width() * self.value), r.height()),
                              radius, radius)


class LevelMeter(QWidget):
    """The microphone level in dBFS (−60..0), with a muted look while push-to-talk is up."""

    FLOOR_DB = -60.0

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QGridLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setHorizontalSpacing(8)
        self.bar = BarMeter("good", height=8)
        self.bar.setMinimumWidth(120)
        self.text = QLabel("mic off")
        self.text.setObjectName("meterText")
        self.text.setMinimumWidth(86)
        title = QLabel("Mic")
        title.setObjectName("meterTitle")
        layout.addWidget(title, 0, 0)
        layout.addWidget(self.bar, 0, 1)
        layout.addWidget(self.text, 0, 2)
        self.db = self.FLOOR_DB

    def set_level(self, rms: float, active: bool, passing: bool = True) -> None:
        """``rms`` 0..1 of the latest block; ``active`` False when no microphone is open.

        Clamped to the scale: anything above full scale (a faulty device, an infinity)
        shows 0 dB, anything below the floor (or NaN) the floor.
        """
        if not active:
            self.db = self.FLOOR_DB
            self.bar.set_value(0.0)
            self.text.setText("mic off")
            return
        db = 20 * math.log10(rms) if rms > 0 else self.FLOOR_DB  # NaN > 0 is False
        self.db = min(0.0, max(self.FLOOR_DB, db))
        fraction = (self.db - self.FLOOR_DB) / -self.FLOOR_DB
        color = "bad" if self.db > -3 else "warn" if self.db > -12 else "good"
        self.bar.set_value(fraction, color=color if passing else "muted")
        self.text.setText(f"{self.db:.0f} dB" + ("" if passing else " · muted"))


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

    ROWS = ((Figure.VOICE_TO_VOICE_S, "Voice-to-voice"), (Figure.SILENCE_WAIT_S, "Turn-taking wait"),
            (Figure.STT_COMPUTE_S, "STT compute"),
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
