"""A fake sound card for the tests.

``FakeSoundDevice`` stands in for the ``sounddevice`` module where ``engine.audio.mic``
and ``engine.audio.speaker`` import it (``install_fake_sound``, monkeypatching): its
streams call the real callbacks from their own thread with the samples a test gives
(NaN, infinities, a recording), and a test can unplug the device (the stream stops, as
PortAudio reports it), stall it (callbacks stop, the stream still says it is active),
and plug it back in.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from engine.audio.sd_devices import AudioDevice
from tests.support.threads import WAIT_S


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
        self.sound.changing()
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
        self.sound.changing()
        self._halt()
        if self.finished_callback is not None:
            self.finished_callback()

    def abort(self) -> None:
        self.aborted = True
        self.stop()

    def close(self) -> None:
        self.sound.changing()
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
        self.change_s = 0.0
        self.overlapping_changes = 0
        self._changes_now = 0
        self._change_lock = threading.Lock()
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

    def changing(self) -> None:
        """A stream opens, starts, stops or closes: PortAudio waits for its audio thread
        here (``change_s``); one that begins while another is in progress is counted in
        ``overlapping_changes``, which PortAudio's JACK host API cannot take."""
        with self._change_lock:
            self._changes_now += 1
            if self._changes_now > 1:
                self.overlapping_changes += 1
        time.sleep(self.change_s)
        with self._change_lock:
            self._changes_now -= 1

    def _stream(self, kind: str, **kwargs) -> FakeStream:
        self.changing()
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
    import engine.audio.reopening as reopening  # what opens both (ReopeningDevice)

    sound = sound or FakeSoundDevice()
    monkeypatch.setattr(reopening, "import_sounddevice", lambda: sound)
    monkeypatch.setattr(reopening, "resolve_device", sound.resolve)
    monkeypatch.setattr(reopening, "list_audio_devices", sound.list_devices)
    return sound
