"""EngineController: the GUI's one handle on the engine. Every engine call that can block
(discovery, construction, load, start, stop, device switches) goes through the Worker.

Apply builds a new Engine on the new config with the shared ModelRegistry, so models whose
key did not change are reused and only new ones load; the old engine keeps running until
the new one is ready, and a failure leaves everything as it was.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from PySide6.QtCore import QObject, Signal

from app.bridge import EventBridge
from app.ptt import PushToTalkSource
from app.worker import Worker
from engine.audio.base import AudioSink, AudioSource
from engine.config import EngineConfig
from engine.errors import AudioDeviceError, ParleyError
from engine.models import ModelRegistry

log = logging.getLogger("parley.app")

#: What the window shows in its state pill.
STATES = ("not loaded", "loading", "ready", "starting", "listening", "stopping")


class EngineController(QObject):
    """Holds the applied config and the current Engine; signals every change."""

    state_changed = Signal(str)
    config_changed = Signal(object)  # the applied EngineConfig (models or audio changed)
    engine_changed = Signal(object)  # the new current Engine, loaded
    load_started = Signal(object)  # the EngineConfig being loaded
    load_progress = Signal(str, object, str)  # stage, fraction or None, text
    apply_failed = Signal(str)  # nothing changed; the message says why
    error = Signal(str)  # start/stop/run problems for the banner
    devices_found = Signal(object)  # list[DeviceInfo]
    audio_devices_found = Signal(object, object)  # inputs, outputs (AudioDevice lists)
    audio_switched = Signal(str, str)  # kind ("input"/"output"), device
    audio_switch_failed = Signal(str, str, str)  # kind, the device kept, message

    def __init__(self, config: EngineConfig, bridge: EventBridge, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.config = config
        self.bridge = bridge
        self.registry = ModelRegistry()  # shared by every engine this window builds
        self.engine = None
        self.worker = Worker(self)
        self.mode: str | None = None  # "mic" or "file" while running
        self.state = "not loaded"
        self.loading = False
        self._pending: list[str] = []  # "starting"/"stopping" jobs queued or running
        self.push_to_talk = False
        self._gate: PushToTalkSource | None = None
        self._closing = False

    # ------------------------------------------------------------------ discovery
    def discover(self, refresh_audio: bool = False) -> None:
        """Find compute devices and sound cards in the background."""
        def job():
            from engine.audio.sd_devices import list_audio_devices
            from engine.devices import discover_devices

            # PortAudio must not re-scan under an open stream.
            return discover_devices(), list_audio_devices(refresh=refresh_audio and self.mode is None)

        def done(result) -> None:
            devices, (inputs, outputs) = result
            self.devices_found.emit(devices)
            self.audio_devices_found.emit(inputs, outputs)

        self.worker.submit("discovering devices", job, done, self.error.emit)

    # ------------------------------------------------------------------ load / apply
    def apply(self, config: EngineConfig) -> None:
        """Build and load an engine on ``config``; on success it replaces the current one."""
        from engine.engine import Engine

        registry = self.registry
        self.loading = True
        self.load_started.emit(config)
        self._refresh()

        def job():
            engine = Engine(config, registry=registry)
            engine.load(self._progress)
            return engine

        self.worker.submit("loading models", job, self._loaded, self._load_failed)

    def _progress(self, stage: str, fraction: float | None, text: str) -> None:
        try:  # runs on the worker thread; the signal is queued to the GUI thread
            self.load_progress.emit(stage, fraction, text)
        except RuntimeError:
            pass

    def _loaded(self, engine) -> None:
        self.loading = False
        if self._closing:
            engine.close()
            return
        old, was_mic = self.engine, self.mode == "mic"
        audio = self.config.audio  # device switches made meanwhile win over the loaded config
        self.engine = engine
        self.config = engine.config.with_overrides(
            {"audio.input_device": audio.input_device, "audio.output_device": audio.output_device})
        self.bridge.attach(engine)
        self.config_changed.emit(self.config)
        self.engine_changed.emit(engine)
        if old is None:
            self._refresh()
            return
        self.bridge.detach(old)
        self.mode = None
        transition = self._begin("starting" if was_mic else "stopping")
        source, sink = self._mic_pair(self.config) if was_mic else (None, None)

        def job():
            stuck = old.stop(2.0)
            old.release_models()  # shared models stay: the new engine holds them too
            if was_mic:
                engine.start([source], [sink])
            return stuck

        def done(stuck) -> None:
            self._stuck(stuck)
            self.mode = "mic" if was_mic else None
            self._end(transition)

        def failed(message: str) -> None:
            self._end(transition)
            self.error.emit(message)

        self.worker.submit("switching to the new settings", job, done, failed)

    def _load_failed(self, message: str) -> None:
        self.loading = False
        self._refresh()
        self.apply_failed.emit(message)

    # ------------------------------------------------------------------ run
    def start_listening(self) -> None:
        """Open the microphone and speaker and start the pipeline."""
        config = self.config

        def make():
            source, sink = self._mic_pair(config)
            return [source], [sink]

        self._start(make, "mic")

    def start_recording(self, path: str, realtime: bool = True) -> None:
        """Converse with a recording: its turns are answered through the speaker."""
        from engine.audio.file_source import FileSource
        from engine.audio.speaker import SpeakerSink

        config = self.config
        trailing = (config.vad.min_silence_ms + config.turns.reopen_grace_ms) / 1000 + 0.5

        def make():
            # Decoding happens here, off the GUI thread; a bad file is an AudioInputError.
            source = FileSource(path, realtime=realtime, trailing_silence_s=trailing)
            return [source], [SpeakerSink(config.audio.output_device)]

        self._start(make, "file")

    def start_with(self, sources: Sequence[AudioSource], sinks: Sequence[AudioSink]) -> None:
        """Run the pipeline on given sources and sinks (a recording); stops when drained."""
        sources, sinks = list(sources), list(sinks)
        self._start(lambda: (sources, sinks), "file")

    def _start(self, make, mode: str) -> None:
        engine = self.engine
        if engine is None or self.mode is not None or "starting" in self._pending:
            return
        transition = self._begin("starting")

        def job():
            sources, sinks = make()
            # Behind an Apply the current engine may have changed: start the newest.
            (self.engine or engine).start(sources, sinks)

        def done(_value) -> None:
            self.mode = mode
            self._end(transition)

        def failed(message: str) -> None:
            self._gate = None
            self._end(transition)
            self.error.emit(message)

        self.worker.submit("starting the pipeline", job, done, failed)

    def stop_listening(self) -> None:
        """Stop the pipeline (up to 2 s, in the background)."""
        engine = self.engine
        if engine is None or self.mode is None or "stopping" in self._pending:
            return
        transition = self._begin("stopping")

        def done(stuck) -> None:
            self.mode = None
            self._gate = None
            self._stuck(stuck)
            self._end(transition)

        def failed(message: str) -> None:
            self.mode = None
            self._end(transition)
            self.error.emit(message)

        self.worker.submit("stopping the pipeline", lambda: engine.stop(2.0), done, failed)

    def interrupt(self) -> None:
        """Cut off the reply in progress (cheap: flags and a sink flush)."""
        if self.engine is not None and self.mode is not None:
            self.engine.interrupt()

    def poll(self) -> None:
        """Called by the window's timer: a recording that has been fully answered stops."""
        engine = self.engine
        if self.mode == "file" and not self._pending and engine.wait_drained(0):
            self.stop_listening()

    def snapshot(self):
        """The current engine's snapshot, or None (no engine, or it could not be taken)."""
        engine = self.engine
        if engine is None:
            return None
        try:
            return engine.snapshot()
        except Exception:  # noqa: BLE001 - a failed poll must not take the window down
            log.exception("engine snapshot failed")
            return None

    # ------------------------------------------------------------------ push-to-talk
    def set_push_to_talk(self, enabled: bool) -> None:
        """Gate the microphone behind the talk key (takes effect at once)."""
        self.push_to_talk = enabled
        if self._gate is not None:
            self._gate.enabled = enabled

    def set_talking(self, pressed: bool) -> None:
        """The talk key went down or up."""
        if self._gate is not None:
            self._gate.pressed = pressed

    @property
    def mic_passing(self) -> bool:
        """False while push-to-talk holds the microphone back."""
        return self._gate is None or self._gate.passing

    @property
    def talking(self) -> bool:
        """True while the microphone's audio goes through."""
        return self._gate is not None and self._gate.passing and self.mode == "mic"

    def _mic_pair(self, config: EngineConfig, input_device: str | None = None,
                  output_device: str | None = None):
        from engine.audio.mic import MicSource
        from engine.audio.speaker import SpeakerSink

        mic = MicSource(input_device or config.audio.input_device, config.audio.capture_buffer_s)
        self._gate = PushToTalkSource(mic, enabled=self.push_to_talk)
        return self._gate, SpeakerSink(output_device or config.audio.output_device)

    # ------------------------------------------------------------------ audio devices
    def switch_audio(self, kind: str, device: str) -> None:
        """Switch the microphone or speaker as a transaction.

        The new device is opened first; only if that works is it used (the pipeline
        restarts on it if running) and the setting changed. Otherwise the old device stays
        and ``audio_switch_failed`` carries it and the reason.
        """
        from engine.audio.mic import MicSource
        from engine.audio.speaker import SpeakerSink

        field = f"audio.{kind}_device"
        old = getattr(self.config.audio, f"{kind}_device")
        if device == old:
            return
        new_config = self.config.with_overrides({field: device})
        engine, running = self.engine, self.mode == "mic"
        old_config = self.config
        transition = self._begin("starting") if running else None

        def job():
            probe = (MicSource(device, new_config.audio.capture_buffer_s) if kind == "input"
                     else SpeakerSink(device))
            probe.open()
            if not running:
                probe.close()
                return None
            engine.stop(2.0)
            source, sink = self._mic_pair(new_config)
            if kind == "input":
                self._gate.inner = probe
            else:
                sink = probe
            try:
                engine.start([source], [sink])
            except ParleyError as exc:
                source, sink = self._mic_pair(old_config)
                engine.start([source], [sink])
                raise AudioDeviceError(f"{device!r} opened but the pipeline did not start on it: {exc}") from None
            return None

        def done(_value) -> None:
            self.config = new_config
            self._end(transition)
            self.config_changed.emit(new_config)
            self.audio_switched.emit(kind, device)

        def failed(message: str) -> None:
            self._end(transition)
            self.audio_switch_failed.emit(kind, old, message)

        self.worker.submit(f"switching the {kind} device", job, done, failed)

    # ------------------------------------------------------------------ close
    def shutdown(self, wait_s: float = 5.0) -> list[str]:
        """Final close: stop the engine and join its threads (the GUI may wait here).

        Returns the names of threads that did not end. A load in progress cannot be cut
        short; its thread is a daemon and ends with the process.
        """
        self._closing = True
        self.worker.shutdown(0)
        if self.worker.current != "loading models":
            self.worker.wait_current(wait_s)  # a start or stop in flight finishes first
        self.bridge.detach_all()
        stuck: list[str] = []
        if self.engine is not None:
            stuck = self.engine.stop(2.0)
            self.engine.release_models()
        self.mode = None
        return stuck

    # ------------------------------------------------------------------ helpers
    def _begin(self, transition: str) -> str:
        self._pending.append(transition)
        self._refresh()
        return transition

    def _end(self, transition: str | None) -> None:
        if transition is not None and transition in self._pending:
            self._pending.remove(transition)
        self._refresh()

    def _refresh(self) -> None:
        """Derive the state from what is running and pending; signal a change."""
        if self._pending:
            state = self._pending[-1]
        elif self.mode is not None:
            state = "listening"
        elif self.loading:
            state = "loading"
        else:
            state = "ready" if self.engine is not None else "not loaded"
        if state != self.state:
            self.state = state
            self.state_changed.emit(state)

    def _stuck(self, stuck: list[str]) -> None:
        if stuck:
            self.error.emit("some engine threads did not stop within 2 s: " + ", ".join(stuck))
