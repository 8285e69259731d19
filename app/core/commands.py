"""The EngineController's operations as commands: ``work`` on the controller's serial lane,
``commit`` on the GUI thread.

Each operation (discover, build, swap engines, apply in place, start, stop, new
conversation, a typed message, switch a sound device) is one small class. Its ``work`` only builds and
returns (an Engine, the sources it started, the threads that did not stop); its one
``commit`` method, on the GUI thread, writes what that changes in the controller's state
and ends the transition (``STARTING``, ``STOPPING``) the controller showed meanwhile.
The controller derives the displayed state from that (``EngineController.refresh``).

Sound devices are never part of a model change: an Apply takes the ``audio.*`` settings
out and switches them afterwards, each as its own transaction (``SwitchAudio``), and a
device switch that finished meanwhile wins over the audio an Apply or a load started
from. ``app.core.audio_devices.with_audio_of`` is the one place that keeps them apart.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from app.core.audio_devices import chosen_device, mic_pair, with_audio_of
from app.core.background import Command, JobKind, Outcome, Task
from app.core.controller_state import ControllerMode, ControllerState
from app.core.push_to_talk import PushToTalkSource
from engine.config import EngineConfig
from engine.config_diff import ConfigDiff
from engine.errors import AudioDeviceError, ParleyError

if TYPE_CHECKING:
    from app.core.controller import EngineController
    from engine.engine import Engine

log = logging.getLogger("parley.app")


# ---------------------------------------------------------------------- helpers of the work
def open_history(engine, store):
    """Record ``engine``'s turns into the history (on the lane). Returns the recorder, the
    store, and a notice to show (a damaged database moved aside, or why the history is
    unavailable); the conversation goes on without history if it fails."""
    from engine.history.recorder import record_history
    from engine.history.store import HistoryStore

    opened = store is None
    try:
        store = store or HistoryStore()
    except ParleyError as exc:
        return None, None, f"the conversation history is off: {exc}"
    return record_history(engine, "desktop", store), store, store.notice if opened else None


def safe_snapshot(engine):
    """``engine.snapshot()``, or None if it failed (logged; the poller takes the next one)."""
    try:
        return engine.snapshot()
    except Exception:  # logged; the meters can wait for the poller's next one
        log.exception("engine snapshot failed")
        return None


# ---------------------------------------------------------------------- commands
def _running(engine: Engine | None) -> Engine:
    """The engine a command works on: one queued when none was loaded fails, saying so."""
    if engine is None:
        raise ParleyError("no engine is loaded: load the models first (Settings tab)")
    return engine


class ControllerCommand(Command):
    """An operation of ``controller``. ``transition`` shows in its state from submission
    (``EngineController.run``) until ``commit`` ends it."""

    transition: ControllerState | None = None

    def __init__(self, controller: EngineController) -> None:
        self.controller = controller

    def end(self) -> None:
        """End the transition (once) and let the controller derive its state again."""
        self.controller.end_transition(self.transition)
        self.transition = None

    def fail(self, outcome: Outcome) -> bool:
        """If the work failed: end the transition, say why on the banner, True."""
        if outcome.failure is None:
            return False
        self.end()
        self.controller.error.emit(outcome.failure.message)
        return True


class Discover(ControllerCommand):
    """Find the compute devices and the sound cards."""

    what = JobKind.DISCOVER

    def __init__(self, controller: EngineController, refresh_audio: bool) -> None:
        super().__init__(controller)
        self.refresh_audio = refresh_audio

    def work(self, task: Task):
        from engine.audio.sd_devices import list_audio_devices
        from engine.runtime.devices import discover_devices

        return discover_devices(), list_audio_devices(refresh=self.refresh_audio)

    def commit(self, outcome: Outcome) -> None:
        if self.fail(outcome):
            return
        devices, (inputs, outputs) = outcome.got()
        self.controller.devices_found.emit(devices)
        self.controller.audio_devices_found.emit(inputs, outputs)


class Build(ControllerCommand):
    """A new Engine on ``config``, loaded on the shared registry; it replaces the current
    one (which runs on until then), and ``then`` follows."""

    what = JobKind.LOAD

    def __init__(self, controller: EngineController, config: EngineConfig,
                 then: Callable[[], None] | None) -> None:
        super().__init__(controller)
        self.config, self.then = config, then
        self.registry, self.store = controller.registry, controller.history_store

    def work(self, task: Task):
        from engine.engine import Engine

        engine = Engine(self.config, registry=self.registry)
        engine.load(task.report_load)
        return engine, safe_snapshot(engine), open_history(engine, self.store)

    def progress(self, stage: str, fraction: float | None, text: str) -> None:
        self.controller.load_progress.emit(stage, fraction, text)

    def commit(self, outcome: Outcome) -> None:
        c = self.controller
        c.loading = c.building = False
        if outcome.failure is not None:
            c.refresh()
            c.apply_failed.emit(outcome.failure)
            return
        engine, snapshot, (recorder, store, notice) = outcome.got()
        if c.closing:
            if recorder is not None:
                recorder.close()
            engine.close()
            return
        old, was_mic = c.engine, c.mode is ControllerMode.MIC
        old_recorder, c.history, c.history_store = c.history, recorder, store
        if notice:
            c.error.emit(notice)
        c.engine = engine
        c.config = with_audio_of(engine.config, c.config)  # device switches meanwhile win
        c.snapshots.watch(engine, snapshot)
        c.bridge.attach(engine)
        c.config_changed.emit(c.config)
        c.engine_changed.emit(engine)
        if old is None:
            c.refresh()
            if self.then is not None:
                self.then()
            return
        c.bridge.detach(old)
        c.mode = ControllerMode.IDLE
        c.adopt_ptt_source(None)  # its microphone closes with the old engine
        c.run(SwapEngine(c, old, old_recorder, engine, was_mic, self.then))


class SwapEngine(ControllerCommand):
    """Stop and release the engine ``Build`` replaced; restart the microphone on the new
    one if it was listening."""

    what = JobKind.SWITCH_ENGINE

    def __init__(self, controller: EngineController, old, old_recorder, engine, was_mic: bool,
                 then: Callable[[], None] | None) -> None:
        super().__init__(controller)
        self.old, self.old_recorder, self.engine, self.was_mic, self.then = (
            old, old_recorder, engine, was_mic, then)
        self.config, self.push = controller.config, controller.push_to_talk
        self.transition = ControllerState.STARTING if was_mic else ControllerState.STOPPING

    def work(self, task: Task):
        stuck = self.old.stop(2.0)
        if self.old_recorder is not None:
            self.old_recorder.close()  # its last turns are written before it goes
        self.old.release_models()  # shared models stay: the new engine holds them too
        gate = None
        if self.was_mic:
            gate, sink = mic_pair(self.config, self.push)
            self.engine.start([gate], [sink])
        return stuck, gate

    def commit(self, outcome: Outcome) -> None:
        if self.fail(outcome):
            return
        stuck, gate = outcome.got()
        c = self.controller
        c.report_stuck(stuck)
        if gate is not None:
            c.adopt_ptt_source(gate)
            c.mode = ControllerMode.MIC
        self.end()
        if self.then is not None:
            self.then()


class ApplyInPlace(ControllerCommand):
    """``config`` applied to the running engine: runtime settings at once, model reloads
    on the lane; the pipeline, the conversation and the sound devices stay."""

    what = JobKind.APPLY

    def __init__(self, controller: EngineController, config: EngineConfig, diff: ConfigDiff,
                 then: Callable[[], None] | None) -> None:
        super().__init__(controller)
        self.engine, self.config, self.diff, self.then = controller.engine, config, diff, then

    def work(self, task: Task):
        # The engine was started on its own audio settings (a switch since then changed
        # only the controller's): Engine.apply sees no audio change.
        engine = _running(self.engine)
        result = engine.apply(with_audio_of(self.config, engine.config), task.report_load)
        return result, safe_snapshot(engine)

    def progress(self, stage: str, fraction: float | None, text: str) -> None:
        self.controller.load_progress.emit(stage, fraction, text)

    def commit(self, outcome: Outcome) -> None:
        c = self.controller
        c.loading = False
        if outcome.failure is not None:
            c.refresh()
            c.apply_failed.emit(outcome.failure)
            return
        if c.closing:
            return
        result, snapshot = outcome.got()
        self.finish(result if isinstance(result, ConfigDiff) else self.diff, snapshot)

    def finish(self, diff: ConfigDiff, snapshot) -> None:
        """The applied config becomes the controller's (also when there was nothing to do)."""
        c = self.controller
        c.config = with_audio_of(self.config, c.config)  # device switches meanwhile win
        c.snapshots.offer(snapshot)
        c.refresh()
        c.config_changed.emit(c.config)
        c.applied.emit(diff)
        if self.then is not None:
            self.then()


class Start(ControllerCommand):
    """Start ``engine`` on the sources and sinks ``make()`` builds (on the lane)."""

    what = JobKind.START

    def __init__(self, controller: EngineController, make: Callable[[], tuple[list, list]],
                 mode: ControllerMode, carry_conversation: bool = False) -> None:
        super().__init__(controller)
        self.engine, self.make, self.mode = controller.engine, make, mode
        self.carry = carry_conversation
        self.transition = ControllerState.STARTING

    def work(self, task: Task):
        sources, sinks = self.make()
        _running(self.engine).start(sources, sinks, carry_conversation=self.carry)
        return sources

    def commit(self, outcome: Outcome) -> None:
        if self.fail(outcome):
            return
        if self.mode is ControllerMode.MIC:
            self.controller.adopt_ptt_source(outcome.got()[0])
        self.controller.mode = self.mode
        self.end()


class Stop(ControllerCommand):
    """Stop the pipeline (up to 2 s)."""

    what = JobKind.STOP

    def __init__(self, controller: EngineController) -> None:
        super().__init__(controller)
        self.engine = controller.engine
        self.transition = ControllerState.STOPPING

    def work(self, task: Task):
        return _running(self.engine).stop(2.0)

    def commit(self, outcome: Outcome) -> None:
        c = self.controller
        c.mode = ControllerMode.IDLE
        if self.fail(outcome):
            return
        c.adopt_ptt_source(None)
        c.report_stuck(outcome.got())
        self.end()


class NewConversation(ControllerCommand):
    """Cut off a reply in flight; empty the chat history and the LLM's KV cache."""

    what = JobKind.NEW_CONVERSATION

    def __init__(self, controller: EngineController) -> None:
        super().__init__(controller)
        self.engine = controller.engine

    def work(self, task: Task):
        return _running(self.engine).new_conversation()

    def commit(self, outcome: Outcome) -> None:
        if self.fail(outcome):
            return
        c = self.controller
        if c.history is not None:
            c.history.new_conversation()  # the history shows the break too
        if not outcome.value:
            c.error.emit("New conversation: the history is cleared, but the LLM was "
                         "still busy; its KV cache empties before its next reply")
        c.conversation_reset.emit()


class Say(ControllerCommand):
    """A typed message (``Engine.say``), answered like a spoken turn; spoken unless
    ``speak`` is False. ``typed_sent`` carries its turn id, or ``say_failed`` why not."""

    what = JobKind.SAY

    def __init__(self, controller: EngineController, text: str, speak: bool) -> None:
        super().__init__(controller)
        self.engine, self.text, self.speak = controller.engine, text, speak

    def work(self, task: Task) -> int:
        # The LLM's inbox may be full for a moment: the wait is here, never on the GUI thread.
        return _running(self.engine).say(self.text, speak=self.speak)

    def commit(self, outcome: Outcome) -> None:
        c = self.controller
        if outcome.failure is not None:
            c.say_failed.emit(self.text, outcome.failure.message)
            return
        c.typed_sent.emit(0, outcome.got(), self.text, self.speak)


class SwitchAudio(ControllerCommand):
    """Switch the microphone or the speaker (``kind``) as a transaction: the new device is
    opened before the old one is let go, and kept only if the pipeline runs on it."""

    def __init__(self, controller: EngineController, kind: str, overrides: dict[str, Any]) -> None:
        super().__init__(controller)
        self.kind, self.overrides = kind, overrides
        self.what = JobKind.SWITCH_INPUT if kind == "input" else JobKind.SWITCH_OUTPUT
        self.old_config = controller.config
        self.new_config = self.old_config.with_overrides(overrides)
        self.kept = chosen_device(self.old_config.audio, kind)
        self.device = chosen_device(self.new_config.audio, kind)
        self.engine, self.push = controller.engine, controller.push_to_talk
        self.running = controller.mode is ControllerMode.MIC
        self.transition = ControllerState.STARTING if self.running else None

    def work(self, task: Task) -> tuple[PushToTalkSource, str | None] | None:
        """None when not listening; else the gate now running and why the new device was
        not kept (None: it was)."""
        from engine.audio.mic import MicSource
        from engine.audio.speaker import SpeakerSink

        probe = None
        if self.device != self.kept:  # the new device is opened before the old one is let go
            probe = (MicSource(self.device, self.new_config.audio.capture_buffer_s)
                     if self.kind == "input" else SpeakerSink(self.device))
            probe.open()
            if not self.running:
                probe.close()
        if not self.running:
            return None
        engine = _running(self.engine)
        engine.stop(2.0)
        gate, sink = mic_pair(self.new_config, self.push)
        if isinstance(probe, MicSource):
            gate.inner = probe
        elif probe is not None:
            sink = probe
        try:
            engine.start([gate], [sink])
        except ParleyError as exc:
            if probe is not None:
                probe.close()
            gate, sink = mic_pair(self.old_config, self.push)
            engine.start([gate], [sink])
            reason = AudioDeviceError(f"{self.device!r} opened but the pipeline did not start on it: {exc}")
            return gate, str(reason)
        return gate, None

    def commit(self, outcome: Outcome) -> None:
        c = self.controller
        if outcome.failure is not None:
            self.end()
            c.audio_switch_failed.emit(self.kind, self.kept, outcome.failure.message)
            return
        error = None
        if outcome.value is not None:
            gate, error = outcome.value
            c.adopt_ptt_source(gate)
        self.end()
        if error is not None:
            c.audio_switch_failed.emit(self.kind, self.kept, error)
            return
        # Onto the config as it is now: an Apply may have finished meanwhile.
        c.config = c.config.with_overrides(self.overrides)
        c.config_changed.emit(c.config)
        c.audio_switched.emit(self.kind, self.device)
