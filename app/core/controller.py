"""EngineController: the GUI's one handle on the engine. Every engine call that can block
(discovery, construction, load, Apply, start, stop, device switches) is a command
(``app.core.commands``) run on the controller's serial lane (``app.core.background``):
its work returns what it built, and its ``commit``, on the GUI thread, writes the
controller's state; ``refresh`` derives the displayed state from it.

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

from collections.abc import Callable, Sequence
from typing import Any

from PySide6.QtCore import QObject, Signal

from app.core.audio_devices import INPUT_KEYS, audio_changes, chosen_device, mic_pair, with_audio_of
from app.core.background import Failure, Job, JobKind, SerialLane
from app.core.bridge import EventBridge
from app.core.commands import (ApplyInPlace, Build, ControllerCommand, Discover, NewConversation, Say, Start,
                               Stop, SwitchAudio)
from app.core.controller_state import TRANSITIONS, ControllerMode, ControllerState
from app.core.push_to_talk import PushToTalkSource
from app.core.snapshots import SnapshotPoller
from engine.audio.base import AudioSink, AudioSource
from engine.config import EngineConfig
from engine.config_diff import Effect, diff_configs
from engine.errors import ParleyError
from engine.models.model_registry import ModelRegistry

__all__ = ["TRANSITIONS", "ControllerMode", "ControllerState", "EngineController"]


class EngineController(QObject):
    """Holds the applied config and the current Engine; signals every change."""

    state_changed = Signal(object)  # ControllerState
    config_changed = Signal(object)  # the applied EngineConfig (anything changed)
    engine_changed = Signal(object)  # a new current Engine, loaded
    apply_started = Signal(object)  # the ConfigDiff going to the current engine
    applied = Signal(object)  # that ConfigDiff, applied: the engine and the conversation stay
    load_started = Signal(object)  # the EngineConfig whose models load (new engine or reload)
    load_progress = Signal(str, object, str)  # stage, fraction or None, text
    apply_failed = Signal(object)  # nothing changed; the Failure says why (and carries the error)
    error = Signal(str)  # start/stop/run problems for the banner
    devices_found = Signal(object)  # list[DeviceInfo]
    audio_devices_found = Signal(object, object)  # inputs, outputs (AudioDevice lists)
    audio_switched = Signal(str, str)  # kind ("input"/"output"), device
    audio_switch_failed = Signal(str, str, str)  # kind, the device kept, message
    conversation_reset = Signal()  # New conversation: history and KV cache are empty
    typed_sent = Signal(int, int, str, bool)  # unit, turn_id, the typed text, spoken
    say_failed = Signal(str, str)  # the typed text, why it was not sent

    def __init__(self, config: EngineConfig, bridge: EventBridge, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.config = config
        self.bridge = bridge
        self.registry = ModelRegistry()  # shared by every engine this window builds
        self.engine = None
        self.worker = SerialLane(self)  # every command, one at a time, in order
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

    @property
    def busy(self) -> bool:
        """True while a command waits, runs, or has its result on the way."""
        return self.worker.busy

    @property
    def closing(self) -> bool:
        """True once ``shutdown`` began: results still arriving change nothing."""
        return self._closing

    # ------------------------------------------------------------------ discovery
    def discover(self, refresh_audio: bool = False) -> None:
        """Find compute devices and sound cards in the background."""
        # PortAudio must not re-scan under an open stream.
        self.run(Discover(self, refresh_audio and self.mode is ControllerMode.IDLE))

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
        audio = audio_changes(self.config, config)
        # The sound devices are never part of a model change: they switch on their own,
        # once the rest has applied, so a bad device cannot undo a good model.
        core = with_audio_of(config, self.config)
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
        diff = diff_configs(self.config, config)
        command = ApplyInPlace(self, config, diff, then)
        if diff.empty and not self.worker.busy:
            # Nothing to do, and no command in flight could still change the engine's config.
            command.finish(diff, None)
            return
        self.apply_started.emit(diff)
        if diff.reload_stages:
            self.loading = True
            self.load_started.emit(config)
        self.run(command)

    def _build(self, config: EngineConfig, then: Callable[[], None] | None) -> None:
        self.loading = self.building = True
        self.load_started.emit(config)
        self.run(Build(self, config, then))

    # ------------------------------------------------------------------ run
    def start_listening(self) -> None:
        """Open the microphone and speaker and start the pipeline."""
        config, push = self.config, self.push_to_talk

        def make():
            gate, sink = mic_pair(config, push)
            return [gate], [sink]

        self._start(make, ControllerMode.MIC)

    def start_typing(self) -> None:
        """Start the pipeline for typed messages alone: the speaker, no microphone (a quiet
        office, a microphone that does not work)."""
        from engine.audio.silent import SilentInput
        from engine.audio.speaker import SpeakerSink

        device = self.config.audio.output_device
        self._start(lambda: ([SilentInput()], [SpeakerSink(device)]), ControllerMode.TYPED)

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
        # While a new engine is built the current one is about to be replaced: starting
        # it now would start the wrong one.
        if (self.engine is None or self.building or ControllerState.STARTING in self._pending
                or self.mode not in (ControllerMode.IDLE, ControllerMode.TYPED)
                or self.mode is mode):
            return
        typed = self.mode is ControllerMode.TYPED
        if typed:  # typing alone goes on with the microphone (or a recording)
            self.run(Stop(self))
        self.run(Start(self, make, mode, carry_conversation=typed))

    def stop_listening(self) -> None:
        """Stop the pipeline (up to 2 s, in the background)."""
        if (self.engine is None or self.mode is ControllerMode.IDLE
                or ControllerState.STOPPING in self._pending):
            return
        self.run(Stop(self))

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

    # ------------------------------------------------------------------ the conversation
    def new_conversation(self) -> None:
        """Start the conversation over in the background: a reply in flight is cut off,
        the chat history and the LLM's KV cache are emptied; ``conversation_reset``
        follows (at once without an engine: there is nothing to clear)."""
        if self.engine is None:
            self.conversation_reset.emit()
            return
        self.run(NewConversation(self))

    def say_why_not(self) -> str | None:
        """Why a typed message cannot be sent now (None: it can). A message sent while no
        conversation runs starts one for typing alone (``start_typing``)."""
        if self.engine is None:
            return "No models are loaded yet: wait for loading to finish"
        if self.state in TRANSITIONS or self.building:
            return f"Parley is {self.state.label.lower().rstrip('…')}: wait a moment"
        return None

    def say(self, text: str, speak: bool = True) -> None:
        """Send a typed message to the running conversation, in the background; it is
        answered like a spoken turn (spoken unless ``speak`` is False). ``typed_sent``
        follows with its turn id, or ``say_failed`` with why it was not sent."""
        why_not = self.say_why_not()
        if why_not is None and not text.strip():
            why_not = "The message is empty: type something to send"
        if why_not is not None:
            self.say_failed.emit(text, why_not)
            return
        if self.mode is ControllerMode.IDLE:
            self.start_typing()  # on the same lane, before the message
        self.run(Say(self, text.strip(), speak))

    def run_with_engine(self, what: str, work: Callable[[Any], Any], done: Callable[[Any], None],
                        failed: Callable[[Failure], None]) -> None:
        """``work(engine)`` with the current engine on the serial lane (after what is queued
        there, so never during a load or an Apply), then ``done(value)`` or
        ``failed(failure)`` here; without an engine ``failed`` at once."""
        engine = self.engine
        if engine is None:
            error = ParleyError(f"{what}: no models are loaded yet; wait for loading to finish")
            failed(Failure(error, what))
            return
        self.worker.submit(Job(what, lambda _task: work(engine), done, failed))

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

    def adopt_ptt_source(self, gate: PushToTalkSource | None) -> None:
        """The push-to-talk gate now running (None: none runs), from a command's commit."""
        if gate is not None:
            # The command built the gate with the push-to-talk setting of its start; the
            # user may have toggled it since (the gate's flags are plain attributes the VAD reads).
            gate.enabled = self.push_to_talk
        self._ptt_source = gate

    # ------------------------------------------------------------------ audio devices
    def switch_audio(self, kind: str, device: str) -> None:
        """Switch the microphone or speaker as a transaction.

        The new device is opened first; only if that works is it used (the pipeline
        restarts on it if running) and the setting changed. Otherwise the old device stays
        and ``audio_switch_failed`` carries it and the reason.
        """
        if device == chosen_device(self.config.audio, kind):
            return
        self.run(SwitchAudio(self, kind, {f"audio.{kind}_device": device}))

    def _switch_audio_settings(self, audio: dict[str, Any]) -> None:
        """Apply changed ``audio.*`` settings: one switch for the microphone, one for the
        speaker."""
        for kind, keys in (("input", INPUT_KEYS), ("output", ("audio.output_device",))):
            overrides = {k: v for k, v in audio.items() if k in keys}
            if overrides:
                self.run(SwitchAudio(self, kind, overrides))

    # ------------------------------------------------------------------ close
    def shutdown(self, wait_s: float = 5.0) -> list[str]:
        """Final close: stop the engine and join its threads (the GUI may wait here).

        Returns the names of threads that did not end. A load of a new engine cannot be
        cut short; its thread is a daemon and ends with the process. Any other command in
        flight (a start, a stop, an Apply) finishes first.
        """
        self._closing = True
        self.worker.shutdown(0)
        if self.worker.current is not JobKind.LOAD and self.worker.wait_idle(wait_s):
            self.worker.join(1.0)
        stuck: list[str] = []
        if not self.snapshots.shutdown(2.0):
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

    # ------------------------------------------------------------------ state
    def run(self, command: ControllerCommand) -> None:
        """Submit ``command`` to the serial lane; its transition shows until its commit."""
        if command.transition is not None:
            self._pending.append(command.transition)
        self.refresh()
        self.worker.submit(command)

    def end_transition(self, transition: ControllerState | None) -> None:
        """A command's transition is over (a commit calls this); the state follows."""
        if transition is not None and transition in self._pending:
            self._pending.remove(transition)
        self.refresh()

    def refresh(self) -> None:
        """Derive the displayed state from what is running and pending; signal a change.
        The one place that writes ``state``."""
        if self._pending:
            state = self._pending[-1]
        elif self.mode is ControllerMode.TYPED:
            state = ControllerState.TYPING
        elif self.mode is not ControllerMode.IDLE:
            state = ControllerState.LISTENING
        elif self.loading:
            state = ControllerState.LOADING
        else:
            state = ControllerState.READY if self.engine is not None else ControllerState.NOT_LOADED
        if state != self.state:
            self.state = state
            self.state_changed.emit(state)

    def report_stuck(self, stuck: list[str]) -> None:
        """Engine threads that did not stop, on the banner."""
        if stuck:
            self.error.emit("some engine threads did not stop within 2 s: " + ", ".join(stuck))
