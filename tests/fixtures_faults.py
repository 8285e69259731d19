"""Fault injection for the tests, and only for them: nothing here is part of the product.

- ``Faulty*`` wrap a really loaded model: the Nth call of its work method raises (a stage
  that fails on turn N), everything else is the real model's.
- ``FaultyRegistry`` is a ModelRegistry whose loader fails for one stage (a load that
  fails: an error, or a device out of memory).
- ``FakeSoundDevice`` stands in for the ``sounddevice`` module where ``engine.audio.mic``
  and ``engine.audio.speaker`` import it (``install_fake_sound``, monkeypatching): its
  streams call the real callbacks from their own thread with the samples a test gives
  (NaN, infinities, a recording), and a test can unplug the device (the stream stops, as
  PortAudio reports it), stall it (callbacks stop, the stream still says it is active),
  and plug it back in.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import numpy as np

from engine.audio.sd_devices import AudioDevice
from engine.backends.base import no_progress
from engine.runtime.model_registry import ModelRegistry

WAIT_S = 10.0


def injected(text: str = "injected fault") -> RuntimeError:
    return RuntimeError(text)


def cuda_oom() -> BaseException:
    """What torch raises when CUDA memory runs out (the real class, on any build)."""
    import torch

    return torch.cuda.OutOfMemoryError(
        "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.55 GiB")


def onnx_oom() -> RuntimeError:
    """ONNX Runtime's wording when an allocation fails."""
    return RuntimeError("[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : Non-zero status code returned "
                        "while running Conv node. Failed to allocate memory for requested buffer of "
                        "size 1073741824")


def ctranslate2_oom() -> RuntimeError:
    """CTranslate2's wording when CUDA memory runs out."""
    return RuntimeError("CUDA failed with error out of memory")


class _Counter:
    def __init__(self, on_calls: set[int], exc: Callable[[], BaseException]) -> None:
        self.on_calls = on_calls
        self.exc = exc
        self.calls = 0
        self.raised = 0
        self._lock = threading.Lock()

    def hit(self) -> bool:
        with self._lock:
            self.calls += 1
            fail = self.calls in self.on_calls
            self.raised += fail
            return fail


class FaultyModel:
    """A loaded STT or TTS model whose ``method`` raises on the calls numbered ``on_calls``
    (1-based); a generator method raises before its first item."""

    def __init__(self, model, method: str, exc: Callable[[], BaseException],
                 on_calls: set[int] | int = 1) -> None:
        self._model = model
        self._method = method
        self.faults = _Counter({on_calls} if isinstance(on_calls, int) else set(on_calls), exc)

    def __getattr__(self, name: str):
        attr = getattr(self._model, name)
        if name != self._method:
            return attr
        faults = self.faults

        def call(*args, **kwargs):
            if faults.hit():
                raise faults.exc()
            return attr(*args, **kwargs)

        return call


class FaultyLlm:
    """A loaded LLM whose sessions' ``generate`` raises on the calls numbered ``on_calls``,
    after ``after_steps`` tokens of the reply (a failure mid-reply)."""

    def __init__(self, model, exc: Callable[[], BaseException], on_calls: set[int] | int = 1,
                 after_steps: int = 2) -> None:
        self._model = model
        self.after_steps = after_steps
        self.faults = _Counter({on_calls} if isinstance(on_calls, int) else set(on_calls), exc)

    def __getattr__(self, name: str):
        return getattr(self._model, name)

    def new_session(self):
        return _FaultySession(self._model.new_session(), self)


class _FaultySession:
    def __init__(self, session, owner: FaultyLlm) -> None:
        self._session = session
        self._owner = owner

    def __getattr__(self, name: str):
        return getattr(self._session, name)

    def generate(self, messages, options, should_stop) -> Iterator:
        fail = self._owner.faults.hit()
        for n, step in enumerate(self._session.generate(messages, options, should_stop)):
            if fail and n == self._owner.after_steps:
                raise self._owner.faults.exc()
            yield step
        if fail:
            raise self._owner.faults.exc()


class FaultyVad:
    """A loaded VAD whose streams raise on the ``on_frame``-th frame scored (1-based,
    counted over all streams) and on the ``frames`` after it."""

    def __init__(self, model, exc: Callable[[], BaseException], on_frame: int, frames: int = 1) -> None:
        self._model = model
        self.faults = _Counter(set(range(on_frame, on_frame + frames)), exc)

    def __getattr__(self, name: str):
        return getattr(self._model, name)

    def new_stream(self):
        return _FaultyVadStream(self._model.new_stream(), self.faults)


class _FaultyVadStream:
    def __init__(self, stream, faults: _Counter) -> None:
        self._stream = stream
        self._faults = faults

    def __getattr__(self, name: str):
        return getattr(self._stream, name)

    def speech_probability(self, frame: np.ndarray) -> float:
        if self._faults.hit():
            raise self._faults.exc()
        return self._stream.speech_probability(frame)


class FaultyRegistry(ModelRegistry):
    """A ModelRegistry whose loader raises ``exc()`` for ``stage`` (the other stages load
    for real): the registry's own bookkeeping runs as for any failed load."""

    def __init__(self, stage: str, exc: Callable[[], BaseException]) -> None:
        super().__init__()
        self.stage = stage
        self.exc = exc
        self.attempts = 0

    def acquire(self, placement, options, progress=no_progress, loader=None):
        if placement.stage != self.stage:
            return super().acquire(placement, options, progress, loader)

        def fail(_request, _progress):
            self.attempts += 1
            raise self.exc()

        return super().acquire(placement, options, progress, fail)


# ---------------------------------------------------------------------- sound devices
class FakePortAudioError(Exception):
    pass


class _Time:
    def __init__(self, now: float, latency: float) -> None:
        self.currentTime = now
        self.inputBufferAdcTime = now - latency
        self.outputBufferDacTime = now + latency


class _Status:
    input_overflow = False
    output_underflow = False


class FakeStream:
    """An input or output stream: its thread calls the callback every ``period_s``."""

    def __init__(self, sound: FakeSoundDevice, kind: str, device, samplerate, channels, dtype,
                 blocksize, callback, finished_callback=None) -> None:
        self.sound = sound
        self.kind = kind
        self.device = device
        self.samplerate = samplerate
        self.channels = channels
        self.blocksize = blocksize
        self.callback = callback
        self.finished_callback = finished_callback
        self.latency = 0.01
        self._run = threading.Event()
        self._calling = threading.Event()  # False: stalled
        self._calling.set()
        self._thread: threading.Thread | None = None
        self.active = False
        self.closed = False
        self.aborted = False
        self.callbacks = 0
        self.played: list[np.ndarray] = []

    def start(self) -> None:
        if not self.sound.present[self.kind]:
            raise FakePortAudioError("Device unavailable [PaErrorCode -9985]")
        self.active = True
        self._run.set()
        self._thread = threading.Thread(target=self._loop, name=f"fake-{self.kind}-stream", daemon=True)
        self._thread.start()

    def _halt(self) -> None:
        self._run.clear()
        self.active = False
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(WAIT_S)
            assert not self._thread.is_alive(), "the fake stream's thread did not end"

    def stop(self) -> None:
        self._halt()
        if self.finished_callback is not None:
            self.finished_callback()

    def abort(self) -> None:
        self.aborted = True
        self.stop()

    def close(self) -> None:
        self._halt()
        self.closed = True

    def _loop(self) -> None:
        period = self.sound.period_s
        while self._run.is_set():
            time.sleep(period)
            if not self._run.is_set() or not self._calling.is_set():
                continue
            self.callbacks += 1
            now = time.monotonic()
            if self.kind == "input":
                data = self.sound.next_input(self.blocksize, self.channels)
                self.callback(data, self.blocksize, _Time(now, self.blocksize / self.samplerate),
                              _Status())
            else:
                out = np.zeros((self.blocksize, self.channels), np.float32)
                self.callback(out, self.blocksize, _Time(now, 0.01), _Status())
                if out.any():
                    self.played.append(out[:, 0].copy())

    # faults ----------------------------------------------------------------------------
    def die(self, notify: bool = True) -> None:
        """The device went away: callbacks end, the stream is no longer active; PortAudio
        calls the finished callback (``notify``), or not (a JACK server that died)."""
        self._run.clear()
        if self._thread is not None:
            self._thread.join(WAIT_S)
        self.active = False
        if notify and self.finished_callback is not None:
            self.finished_callback()

    def stall(self, stalled: bool = True) -> None:
        """Callbacks stop (or resume) while the stream still reports itself active."""
        if stalled:
            self._calling.clear()
        else:
            self._calling.set()


class FakeSoundDevice:
    """The parts of ``sounddevice`` Parley's MicSource and SpeakerSink use, one input and
    one output device, with faults a test can trigger."""

    PortAudioError = FakePortAudioError

    def __init__(self, rate: int = 16000, period_s: float = 0.004) -> None:
        self.rate = rate
        self.period_s = period_s  # faster than real time: blocks arrive every 4 ms
        self.present = {"input": True, "output": True}
        self.streams: list[FakeStream] = []
        self.refreshes = 0
        self._lock = threading.Lock()
        self._input = np.zeros(0, np.float32)  # what the microphone "hears" next
        self._loop_input: np.ndarray | None = None

    # what the tests control -----------------------------------------------------------
    def hear(self, samples: np.ndarray) -> None:
        """Queue samples for the microphone (after them: silence, or the looped input)."""
        with self._lock:
            self._input = np.concatenate([self._input, np.asarray(samples, np.float32)])

    def hear_forever(self, block: np.ndarray | None) -> None:
        """After the queued samples, repeat ``block`` (None: silence)."""
        with self._lock:
            self._loop_input = None if block is None else np.asarray(block, np.float32)

    def pending_input(self) -> int:
        with self._lock:
            return self._input.size

    def next_input(self, frames: int, channels: int) -> np.ndarray:
        with self._lock:
            take, self._input = self._input[:frames], self._input[frames:]
            loop = self._loop_input
        if take.size < frames:
            fill = np.zeros(frames - take.size, np.float32)
            if loop is not None and loop.size:
                fill = np.resize(loop, frames - take.size)
            take = np.concatenate([take, fill])
        return np.repeat(take.reshape(-1, 1), channels, axis=1)

    def unplug(self, kind: str | None = None, notify: bool = True) -> None:
        """The ``kind`` device (None: both) vanishes: its open streams die, and opening
        it fails until ``plug``."""
        for k in (kind,) if kind else ("input", "output"):
            self.present[k] = False
        for stream in list(self.streams):
            if stream.active and (kind is None or stream.kind == kind):
                stream.die(notify)

    def plug(self, kind: str | None = None) -> None:
        for k in (kind,) if kind else ("input", "output"):
            self.present[k] = True

    def live(self, kind: str) -> list[FakeStream]:
        return [s for s in self.streams if s.kind == kind and s.active]

    # the sounddevice API ----------------------------------------------------------------
    def InputStream(self, **kwargs) -> FakeStream:  # noqa: N802 - sounddevice's name
        return self._stream("input", **kwargs)

    def OutputStream(self, **kwargs) -> FakeStream:  # noqa: N802 - sounddevice's name
        return self._stream("output", **kwargs)

    def _stream(self, kind: str, **kwargs) -> FakeStream:
        if not self.present[kind]:
            raise FakePortAudioError("Error opening stream: Device unavailable [PaErrorCode -9985]")
        stream = FakeStream(self, kind, **kwargs)
        self.streams.append(stream)
        return stream

    def check_input_settings(self, device, channels, dtype, samplerate) -> None:
        self._check("input", samplerate)

    def check_output_settings(self, device, channels, dtype, samplerate) -> None:
        self._check("output", samplerate)

    def _check(self, kind: str, samplerate) -> None:
        if not self.present[kind]:
            raise FakePortAudioError("Device unavailable [PaErrorCode -9985]")
        if samplerate != self.rate:
            raise FakePortAudioError("Invalid sample rate [PaErrorCode -9997]")

    def device(self, kind: str) -> AudioDevice:
        return AudioDevice(0, f"Fake {kind}", "Fake API", 1, float(self.rate), True)

    def resolve(self, setting, kind: str) -> AudioDevice:
        from engine.errors import AudioDeviceError

        if not self.present[kind]:
            raise AudioDeviceError(f"there is no default {kind} device; no {kind} devices are "
                                   "present (no sound card, or no sound server running)")
        return self.device(kind)

    def list_devices(self, refresh: bool = False):
        if refresh:
            self.refreshes += 1
        return ([self.device("input")] if self.present["input"] else [],
                [self.device("output")] if self.present["output"] else [])


def install_fake_sound(monkeypatch, sound: FakeSoundDevice | None = None) -> FakeSoundDevice:
    """Make MicSource and SpeakerSink open ``sound``'s devices instead of PortAudio's."""
    import engine.audio.mic as mic
    import engine.audio.speaker as speaker

    sound = sound or FakeSoundDevice()
    for module in (mic, speaker):
        monkeypatch.setattr(module, "import_sounddevice", lambda: sound)
        monkeypatch.setattr(module, "resolve_device", sound.resolve)
        monkeypatch.setattr(module, "list_audio_devices", sound.list_devices)
    return sound


def wait_for(condition: Callable[[], bool], timeout: float = WAIT_S, poll: float = 0.005) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(poll)
    return True


def parley_threads() -> list[str]:
    """Names of live threads Parley started (stages, sinks, device reopeners)."""
    return sorted(t.name for t in threading.enumerate() if t.name.startswith("parley"))
