"""EngineController: the GUI's one handle on the engine. Every engine call that can block
(discovery, construction, load, Apply, start, stop, device switches) goes through the
Worker, and every result comes back through the job's ``done`` callback on the GUI thread:
a job returns what it built, it never assigns the controller's state.

Apply is a diff against the running config (``engine.config_diff``). Runtime settings and
model reloads go to the current engine through ``Engine.apply``: the pipeline keeps
running, the conversation and the KV cache are kept, and the sound devices stay open. A
changed microphone or speaker goes through the transactional ``switch_audio``. Only a
change of ``units`` builds a new Engine (on the shared ModelRegistry, so models whose key
did not change are reused); the old engine keeps running until the new one is ready. A
failure leaves everything as it was.

Snapshots for the meters are taken by a SnapshotPoller on its own thread; ``snapshot``
returns its latest one and never calls into the engine.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QObject, Signal

from app.core.bridge import EventBridge
from app.conversation.ptt import PushToTalkSource
from app.core.snapshots import SnapshotPoller
from app.core.worker import JobKind, Worker
from engine.audio.base import AudioSink, AudioSource
from engine.config import EngineConfig
from engine.config_diff import ConfigDiff, Effect, diff_configs, effect_of
from engine.errors import AudioDeviceError, ParleyError
from engine.runtime.model_registry import ModelRegistry

log = logging.getLogger("parley.app")


class ControllerMode(enum.StrEnum):
    """What the running pipeline listens to."""

    IDLE = "idle"  # not running
    MIC = "mic"  # the microphone and the speaker
    FILE = "file"  # a recording (or given sources), stopped once it was answered


class ControllerState(enum.StrEnum):
    """The state the window shows in its pill; ``label`` is the text shown."""

    NOT_LOADED = "not loaded"
    LOADING = "loading"
    READY = "ready"
    STARTING = "starting"
    LISTENING = "listening"
    STOPPING = "stopping"

    @property
    def label(self) -> str:
        """The pill's text: ``Loading models``, ``Starting…``."""
        return _STATE_LABELS[self]


_STATE_LABELS = {
    ControllerState.NOT_LOADED: "Not loaded", ControllerState.LOADING: "Loading models",
    ControllerState.READY: "Ready", ControllerState.STARTING: "Starting…",
    ControllerState.LISTENING: "Listening", ControllerState.STOPPING: "Stopping…",
}
#: The transitions a start, stop or switch holds while its job is queued or running.
TRANSITIONS = (ControllerState.STARTING, ControllerState.STOPPING)
#: Settings that reopen the microphone (the rest of ``audio.*`` reopens the speaker).
_INPUT_KEYS = ("audio.input_device", "audio.capture_buffer_s")


@dataclass(frozen=True, slots=True)
class _Switched:
    """What an audio switch job built: the push-to-talk gate now running, and why the
    new device was not kept (None: it was)."""

    gate: PushToTalkSource
    error: str | None = None


def mic_pair(config: EngineConfig, push_to_talk: bool):
    """A microphone behind a push-to-talk gate, and a speaker, for ``config``'s devices.
    Nothing is opened here: ``Engine.start`` opens them."""
    from engine.audio.mic import MicSource
    from engine.audio.speaker import SpeakerSink

    mic = MicSource(config.audio.input_device, config.audio.capture_buffer_s)
    return PushToTalkSource(mic, enabled=push_to_talk), SpeakerSink(config.audio.output_device)


def _audio_items(config: EngineConfig) -> dict[str, Any]:
    return {k: v for k, v in config.flat().items() if effect_of(k) is Effect.AUDIO}


def _open_history(engine, store):
    """Record ``engine``'s turns into the history (runs on the worker). Returns the
    recorder, the store, and a notice to show (a damaged database moved aside, or why
    the history is unavailable); the conversation goes on without history if it fails."""
    from engine.history.store import HistoryStore, record_history

    opened = store is None
    try:
        store = store or HistoryStore()
    except ParleyError as exc:
        return None, None, f"the conversation history is off: {exc}"
    return record_history(engine, "desktop", store), store, store.notice if opened else None


def _safe_snapshot(engine):
    try:
        return engine.snapshot()
    except Exception:  # logged; the meters can wait for the poller's next one
        log.exception("engine snapshot failed")
        return None


class EngineController(QObject):
    """Holds the applied config and the current Engine; signals every change."""

    state_changed = Signal(object)  # ControllerState
    config_changed = Signal(object)  # the applied EngineConfig (anything changed)
    engine_changed = Signal(object)  # a new current Engine, loaded
    apply_started = Signal(object)  # the ConfigDiff going to the current engine
    applied = Signal(object)  # that ConfigDiff, applied: the engine and the conversation stay
    load_started = Signal(object)  # the EngineConfig whose models load (new engine or reload)
    load_progress = Signal(str, object, str)  # stage, fraction or None, text
    apply_failed = Signal(object)  # nothing changed; the message (a JobFailure) says why
    error = Signal(str)  # start/stop/run problems for the banner
    devices_found = Signal(object)  # list[DeviceInfo]
    audio_devices_found = Signal(object, object)  # inputs, outputs (AudioDevice lists)
    audio_switched = Signal(str, str)  # kind ("input"/"output"), device
    audio_switch_failed = Signal(str, str, str)  # kind, the device kept, message
    conversation_reset = Signal()  # New conversation: history and KV cache are empty

    def __init__(self, config: EngineConfig, bridge: EventBridge, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.config = config
        self.bridge = bridge
        self.registry = ModelRegistry()  # shared by every engine this window builds
        self.engine = None
        self.worker = Worker(self)
        self.snapshots = SnapshotPoller()
        # Every finished turn of the desktop conversation goes to the history as it ends.
        self.history = None  # HistoryRecorder of the current engine
        self.history_store = None  # the HistoryStore, opened with the first engine
        self.mode = ControllerMode.IDLE
        self.state = ControllerState.NOT_LOADED
        self.loading = False  # models are loading (a new engine, or a reload by Apply)
        self.building = False  # a new Engine is being built; it will replace the current one
        self._pending: list[ControllerState] = []  # TRANSITIONS queued or running
        self.push_to_talk = False
        self._ptt_source: PushToTalkSource | None = None
        self._closing = False

    # ------------------------------------------------------------------ discovery
    def discover(self, refresh_audio: bool = False) -> None:
        """Find compute devices and sound cards in the background."""
        # PortAudio must not re-scan under an open stream.
        refresh = refresh_audio and self.mode is ControllerMode.IDLE

        def job():
            from engine.audio.sd_devices import list_audio_devices
            from engine.runtime.devices import discover_devices

            return discover_devices(), list_audio_devices(refresh=refresh)

        def done(result) -> None:
            devices, (inputs, outputs) = result
            self.devices_found.emit(devices)
            self.audio_devices_found.emit(inputs, outputs)

        self.worker.submit(JobKind.DISCOVER, job, done, self.error.emit)

    # ------------------------------------------------------------------ load / apply
    def apply(self, config: EngineConfig) -> None:
        """Make ``config`` the applied config, doing only what its differences need.

        Without an engine, one is built and loaded. With one, runtime settings and model
        reloads go to it in place (``applied`` follows); a change of ``units`` builds a
        new engine (``engine_changed`` follows). Changed sound devices are switched
        afterwards, each as its own transaction. On failure ``apply_failed`` says why and
        nothing changed.
        """
        if self._closing:
            return
        old_audio, new_audio = _audio_items(self.config), _audio_items(config)
        audio = {k: v for k, v in new_audio.items() if old_audio[k] != v}
        # The sound devices are never part of a model change: they switch on their own,
        # once the rest has applied, so a bad device cannot undo a good model.
        core = config.with_overrides({k: old_audio[k] for k in audio}) if audio else config
        then = (lambda: self._switch_audio_settings(audio)) if audio else None
        if self.engine is None or diff_configs(self.config, core).keys(Effect.RESTART):
            self._build(core, then)
        else:
            self._apply_in_place(core, then)

    def rebuild(self, config: EngineConfig | None = None) -> None:
        """Build a new engine on ``config`` (default: the current one), resolving ``auto``
        again, e.g. after models were downloaded. The conversation starts over."""
        self._build(config or self.config, None)

    def _apply_in_place(self, config: EngineConfig, then: Callable[[], None] | None) -> None:
        engine = self.engine
        diff = diff_configs(self.config, config)
        if diff.empty and not self.worker.busy:
            # Nothing to do, and no job in flight could still change the engine's config.
            self._finish_apply(config, diff, None, then)
            return
        reloading = bool(diff.reload_stages)
        self.apply_started.emit(diff)
        if reloading:
            self.loading = True
            self.load_started.emit(config)
            self._refresh()

        def job():
            # The engine was started on its own audio settings (a switch since then
            # changed only ours): Engine.apply sees no audio change.
            target = config.with_overrides(_audio_items(engine.config))
            result = engine.apply(target, self._progress)
            return result, _safe_snapshot(engine)

        def done(value) -> None:
            result, snapshot = value
            self.loading = False
            if self._closing:
                return
            self._finish_apply(config, result if isinstance(result, ConfigDiff) else diff, snapshot, then)

        def failed(message: str) -> None:
            self.loading = False
            self._refresh()
            self.apply_failed.emit(message)

        self.worker.submit(JobKind.APPLY, job, done, failed)

    def _finish_apply(self, config: EngineConfig, diff: ConfigDiff, snapshot,
                      then: Callable[[], None] | None) -> None:
        # Device switches finished meanwhile win over the audio the Apply started from.
        self.config = config.with_overrides(_audio_items(self.config))
        self.snapshots.offer(snapshot)
        self._refresh()
        self.config_changed.emit(self.config)
        self.applied.emit(diff)
        if then is not None:
            then()

    def _build(self, config: EngineConfig, then: Callable[[], None] | None) -> None:
        from engine.engine import Engine

        registry = self.registry
        self.loading = self.building = True
        self.load_started.emit(config)
        self._refresh()

        store = self.history_store

        def job():
            engine = Engine(config, registry=registry)
            engine.load(self._progress)
            return engine, _safe_snapshot(engine), _open_history(engine, store)

        self.worker.submit(JobKind.LOAD, job, lambda value: self._loaded(*value, then),
                           self._load_failed)

    def _progress(self, stage: str, fraction: float | None, text: str) -> None:
        try:  # runs on the worker thread; the signal is queued to the GUI thread
            self.load_progress.emit(stage, fraction, text)
        except RuntimeError:
            pass

    def _loaded(self, engine, snapshot, history, then: Callable[[], None] | None) -> None:
        self.loading = self.building = False
        recorder, store, notice = history
        if self._closing:
            if recorder is not None:
                recorder.close()
            engine.close()
            return
        old, was_mic = self.engine, self.mode is ControllerMode.MIC
        old_recorder, self.history, self.history_store = self.history, recorder, store
        if notice:
            self.error.emit(notice)
        self.engine = engine
        # Device switches made meanwhile win over the loaded config.
        self.config = engine.config.with_overrides(_audio_items(self.config))
        self.snapshots.watch(engine, snapshot)
        self.bridge.attach(engine)
        self.config_changed.emit(self.config)
        self.engine_changed.emit(engine)
        if old is None:
            self._refresh()
            if then is not None:
                then()
            return
        self.bridge.detach(old)
        self.mode = ControllerMode.IDLE
        self._ptt_source = None  # its microphone closes with the old engine
        transition = self._begin(ControllerState.STARTING if was_mic else ControllerState.STOPPING)
        config, push = self.config, self.push_to_talk

        def job():
            stuck = old.stop(2.0)
            if old_recorder is not None:
                old_recorder.close()  # its last turns are written before it goes
            old.release_models()  # shared models stay: the new engine holds them too
            gate = None
            if was_mic:
                gate, sink = mic_pair(config, push)
                engine.start([gate], [sink])
            return stuck, gate

        def done(value) -> None:
            stuck, gate = value
            self._stuck(stuck)
            if gate is not None:
                self._adopt_ptt_source(gate)
                self.mode = ControllerMode.MIC
            self._end(transition)
            if then is not None:
                then()

        def failed(message: str) -> None:
            self._end(transition)
            self.error.emit(message)

        self.worker.submit(JobKind.SWITCH_ENGINE, job, done, failed)

    def _load_failed(self, message: str) -> None:
        self.loading = self.building = False
        self._refresh()
        self.apply_failed.emit(message)

    # ------------------------------------------------------------------ run
    def start_listening(self) -> None:
        """Open the microphone and speaker and start the pipeline."""
        config, push = self.config, self.push_to_talk

        def make():
            gate, sink = mic_pair(config, push)
            return [gate], [sink]

        self._start(make, ControllerMode.MIC)

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

        self._start(make, ControllerMode.FILE)

    def start_with(self, sources: Sequence[AudioSource], sinks: Sequence[AudioSink]) -> None:
        """Run the pipeline on given sources and sinks (a recording); stops when drained."""
        sources, sinks = list(sources), list(sinks)
        self._start(lambda: (sources, sinks), ControllerMode.FILE)

    def _start(self, make, mode: ControllerMode) -> None:
        engine = self.engine
        # While a new engine is built the current one is about to be replaced: starting
        # it now would start the wrong one.
        if (engine is None or self.building or self.mode is not ControllerMode.IDLE
                or ControllerState.STARTING in self._pending):
            return
        transition = self._begin(ControllerState.STARTING)

        def job():
            sources, sinks = make()
            engine.start(sources, sinks)
            return sources

        def done(sources) -> None:
            if mode is ControllerMode.MIC:
                self._adopt_ptt_source(sources[0])
            self.mode = mode
            self._end(transition)

        def failed(message: str) -> None:
            self._end(transition)
            self.error.emit(message)

        self.worker.submit(JobKind.START, job, done, failed)

    def stop_listening(self) -> None:
        """Stop the pipeline (up to 2 s, in the background)."""
        engine = self.engine
        if engine is None or self.mode is ControllerMode.IDLE or ControllerState.STOPPING in self._pending:
            return
        transition = self._begin(ControllerState.STOPPING)

        def done(stuck) -> None:
            self.mode = ControllerMode.IDLE
            self._ptt_source = None
            self._stuck(stuck)
            self._end(transition)

        def failed(message: str) -> None:
            self.mode = ControllerMode.IDLE
            self._end(transition)
            self.error.emit(message)

        self.worker.submit(JobKind.STOP, lambda: engine.stop(2.0), done, failed)

    def interrupt(self) -> None:
        """Cut off the reply in progress (cheap: flags and a sink flush)."""
        if self.engine is not None and self.mode is not ControllerMode.IDLE:
            self.engine.interrupt()

    def poll(self) -> None:
        """Called by the window's timer: a recording that has been fully answered stops."""
        engine = self.engine
        if (self.mode is ControllerMode.FILE and not self._pending and engine is not None
                and engine.wait_drained(0)):
            self.stop_listening()

    def snapshot(self):
        """The latest EngineSnapshot of the current engine (taken off the GUI thread by the
        poller), or None. Never calls into the engine."""
        return self.snapshots.latest()

    # ------------------------------------------------------------------ assistant
    def new_conversation(self) -> None:
        """Start the conversation over in the background: a reply in flight is cut off,
        the chat history and the LLM's KV cache are emptied; ``conversation_reset``
        follows (at once without an engine: there is nothing to clear)."""
        engine = self.engine
        if engine is None:
            self.conversation_reset.emit()
            return

        def done(complete: bool) -> None:
            if self.history is not None:
                self.history.new_conversation()  # the history shows the break too
            if not complete:
                self.error.emit("New conversation: the history is cleared, but the LLM was "
                                "still busy; its KV cache empties before its next reply")
            self.conversation_reset.emit()

        self.worker.submit(JobKind.NEW_CONVERSATION, engine.new_conversation, done,
                           self.error.emit)

    def list_voices(self, done: Callable[[Any], None], failed: Callable[[str], None]) -> None:
        """The current engine's TTS voices (a VoiceList), found in the background."""
        from app.assistant.jobs import submit_voices

        submit_voices(self, done, failed)

    def preview_voice(self, text: str, voice: str, speed: float,
                      done: Callable[[Any], None], failed: Callable[[str], None]) -> None:
        """``text`` spoken with the loaded TTS as ``voice`` at ``speed``, synthesised in
        the background apart from the pipeline: ``done((audio, rate))`` here."""
        from app.assistant.jobs import submit_preview

        submit_preview(self, text, voice, speed, done, failed)

    # ------------------------------------------------------------------ push-to-talk
    def set_push_to_talk(self, enabled: bool) -> None:
        """Gate the microphone behind the talk key (takes effect at once)."""
        self.push_to_talk = enabled
        if self._ptt_source is not None:
            self._ptt_source.enabled = enabled

    def set_talking(self, pressed: bool) -> None:
        """The talk key went down or up."""
        if self._ptt_source is not None:
            self._ptt_source.pressed = pressed

    @property
    def mic_passing(self) -> bool:
        """False while push-to-talk holds the microphone back."""
        return self._ptt_source is None or self._ptt_source.passing

    @property
    def talking(self) -> bool:
        """True while the microphone's audio goes through."""
        return self._ptt_source is not None and self._ptt_source.passing and self.mode is ControllerMode.MIC

    def _adopt_ptt_source(self, gate: PushToTalkSource) -> None:
        # The job built the gate with the push-to-talk setting of its start; the user may
        # have toggled it since (the gate's flags are plain attributes the VAD reads).
        gate.enabled = self.push_to_talk
        self._ptt_source = gate

    # ------------------------------------------------------------------ audio devices
    def switch_audio(self, kind: str, device: str) -> None:
        """Switch the microphone or speaker as a transaction.

        The new device is opened first; only if that works is it used (the pipeline
        restarts on it if running) and the setting changed. Otherwise the old device stays
        and ``audio_switch_failed`` carries it and the reason.
        """
        field = f"audio.{kind}_device"
        if device == getattr(self.config.audio, f"{kind}_device"):
            return
        self._switch_audio(kind, {field: device})

    def _switch_audio_settings(self, audio: dict[str, Any]) -> None:
        """Apply changed ``audio.*`` settings: one switch for the microphone, one for the
        speaker."""
        for kind, keys in (("input", _INPUT_KEYS), ("output", ("audio.output_device",))):
            overrides = {k: v for k, v in audio.items() if k in keys}
            if overrides:
                self._switch_audio(kind, overrides)

    def _switch_audio(self, kind: str, overrides: dict[str, Any]) -> None:
        from engine.audio.mic import MicSource
        from engine.audio.speaker import SpeakerSink

        old_config = self.config
        new_config = old_config.with_overrides(overrides)
        kept = getattr(old_config.audio, f"{kind}_device")
        device = getattr(new_config.audio, f"{kind}_device")
        engine, running, push = self.engine, self.mode is ControllerMode.MIC, self.push_to_talk
        transition = self._begin(ControllerState.STARTING) if running else None

        def job() -> _Switched | None:
            probe = None
            if device != kept:  # the new device is opened before the old one is let go
                probe = (MicSource(device, new_config.audio.capture_buffer_s) if kind == "input"
                         else SpeakerSink(device))
                probe.open()
                if not running:
                    probe.close()
            if not running:
                return None
            engine.stop(2.0)
            gate, sink = mic_pair(new_config, push)
            if probe is not None:
                if kind == "input":
                    gate.inner = probe
                else:
                    sink = probe
            try:
                engine.start([gate], [sink])
            except ParleyError as exc:
                if probe is not None:
                    probe.close()
                gate, sink = mic_pair(old_config, push)
                engine.start([gate], [sink])
                reason = AudioDeviceError(f"{device!r} opened but the pipeline did not start on it: {exc}")
                return _Switched(gate, str(reason))
            return _Switched(gate)

        def done(result: _Switched | None) -> None:
            if result is not None:
                self._adopt_ptt_source(result.gate)
            self._end(transition)
            if result is not None and result.error is not None:
                self.audio_switch_failed.emit(kind, kept, result.error)
                return
            # Onto the config as it is now: an Apply may have finished meanwhile.
            self.config = self.config.with_overrides(overrides)
            self.config_changed.emit(self.config)
            self.audio_switched.emit(kind, device)

        def failed(message: str) -> None:
            self._end(transition)
            self.audio_switch_failed.emit(kind, kept, message)

        self.worker.submit(JobKind.SWITCH_INPUT if kind == "input" else JobKind.SWITCH_OUTPUT,
                           job, done, failed)

    # ------------------------------------------------------------------ close
    def shutdown(self, wait_s: float = 5.0) -> list[str]:
        """Final close: stop the engine and join its threads (the GUI may wait here).

        Returns the names of threads that did not end. A load of a new engine cannot be
        cut short; its thread is a daemon and ends with the process. Any other job in
        flight (a start, a stop, an Apply) finishes first.
        """
        self._closing = True
        self.worker.shutdown(0)
        if self.worker.current is not JobKind.LOAD and self.worker.wait_current(wait_s):
            self.worker.join(1.0)
        stuck: list[str] = []
        if not self.snapshots.stop(2.0):
            stuck.append(self.snapshots.name)
        self.bridge.detach_all()
        if self.engine is not None:
            stuck += self.engine.stop(2.0)
            self.engine.release_models()
        if self.history is not None:
            self.history.close()  # every finished turn is written before the window goes
        if self.history_store is not None:
            self.history_store.close()
        self.mode = ControllerMode.IDLE
        self._ptt_source = None
        return stuck

    # ------------------------------------------------------------------ helpers
    def _begin(self, transition: ControllerState) -> ControllerState:
        self._pending.append(transition)
        self._refresh()
        return transition

    def _end(self, transition: ControllerState | None) -> None:
        if transition is not None and transition in self._pending:
            self._pending.remove(transition)
        self._refresh()

    def _refresh(self) -> None:
        """Derive the state from what is running and pending; signal a change."""
        if self._pending:
            state = self._pending[-1]
        elif self.mode is not ControllerMode.IDLE:
            state = ControllerState.LISTENING
        elif self.loading:
            state = ControllerState.LOADING
        else:
            state = ControllerState.READY if self.engine is not None else ControllerState.NOT_LOADED
        if state != self.state:
            self.state = state
            self.state_changed.emit(state)

    def _stuck(self, stuck: list[str]) -> None:
        if stuck:
            self.error.emit("some engine threads did not stop within 2 s: " + ", ".join(stuck))
