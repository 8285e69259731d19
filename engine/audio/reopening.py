"""A sound card that is reopened when it is lost: what the microphone and the speaker share.

``ReopeningDevice`` owns one PortAudio stream at a time (a ``DeviceStream``) and its
life: ``open`` resolves the setting to a device, picks a format it supports and starts
the stream; ``close`` stops and releases it. When the subclass's watch finds the stream
gone (``check_stream``) or stuck, ``lose`` releases it (``health.release_stream``),
reports the device as lost and starts a ``Reopener`` that opens the device the setting
names again every ``RETRY_S`` until that works or the device is closed. What differs
(the stream's direction and callback, the formats tried, what is reset when it is back)
is the subclass's: ``_start_stream``, ``_formats``, ``_on_lost``, ``_on_reopened``.

The lock guards the switch between streams (``_stream``, ``_open``, ``_lost``,
``_reopener``); the audio callback never takes it.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, ClassVar, Generic, TypeVar

from engine.audio.health import (RETRY_S, STREAMS, DeviceState, HealthLog, HealthReport, Reopener,
                                 release_stream, stream_closed, stream_opened)
from engine.audio.sd_devices import (AudioDevice, DeviceKind, describe_devices, import_sounddevice,
                                     list_audio_devices, resolve_device)
from engine.errors import AudioDeviceError

log = logging.getLogger("parley.audio")


class DeviceStream:
    """One open stream of a device: the PortAudio stream and the format it runs at."""

    __slots__ = ("stream", "device", "rate", "channels", "ended")

    def __init__(self, device: AudioDevice, rate: int, channels: int) -> None:
        self.stream: Any = None  # the sounddevice stream, once started
        self.device = device
        self.rate = rate
        self.channels = channels
        self.ended = False  # PortAudio's finished callback ran: this stream stopped

    def on_finished(self) -> None:
        self.ended = True


S = TypeVar("S", bound=DeviceStream)


class ReopeningDevice(Generic[S]):
    """A sound device of one direction (``kind``) that reopens itself when lost.

    Subclasses set the class constants and implement ``_start_stream`` and ``_formats``.
    """

    what: ClassVar[str]  # "microphone": the device in messages and its health reports
    kind: ClassVar[DeviceKind]
    tag: ClassVar[str]  # short name for threads: "mic"
    while_lost: ClassVar[str]  # what the user misses while it is lost, in the report
    when_back: ClassVar[str]  # what works again once it is back

    def __init__(self, device: str | int | None, block_ms: int, requested_rate: int | None) -> None:
        self.device_setting = device
        self.block_ms = block_ms
        self.requested_rate = requested_rate  # None: the subclass's preferred rates
        self.health = HealthLog(self.what)
        self._lock = threading.Lock()
        self._stream: S | None = None  # the open stream; kept (stopped) while lost
        self._open = False  # between open() and close()
        self._lost = False
        self._reopener: Reopener | None = None

    # ------------------------------------------------------------------ to implement
    def _start_stream(self, sd: Any, device: AudioDevice, rate: int, channels: int,
                      previous: S | None) -> S:
        """Create and start a stream on ``device`` (``previous``: the lost one, or None).

        Raise ``sd.PortAudioError`` or ValueError if PortAudio refuses it."""
        raise NotImplementedError

    def _formats(self, device: AudioDevice) -> tuple[list[int], list[int]]:
        """The rates and channel counts to try on ``device``, in order of preference."""
        raise NotImplementedError

    def _on_lost(self, stream: S) -> None:
        """The device was just lost (before its stream is released)."""

    def _on_reopened(self, old: S | None, new: S) -> None:
        """``new`` replaces ``old``; called under the lock."""

    def _on_close(self, stream: S) -> None:
        """The device is being closed (before its stream stops)."""

    # ------------------------------------------------------------------ lifecycle
    @property
    def device(self) -> AudioDevice | None:
        """The device open now (or last open), None before ``open``."""
        stream = self._stream
        return None if stream is None else stream.device

    @property
    def device_name(self) -> str | None:
        device = self.device
        return None if device is None else device.name

    @property
    def channels(self) -> int | None:
        stream = self._stream
        return None if stream is None else stream.channels

    @property
    def lost(self) -> bool:
        """True while the device is lost (its stream released, reopening is tried)."""
        return self._lost

    def open(self) -> None:
        """Open and start the stream; AudioDeviceError names the device and lists the
        devices of its kind."""
        if self._open:
            return
        with STREAMS.changing(self.tag):
            stream = self._open_stream(None)
        with self._lock:
            self._stream, self._open, self._lost = stream, True, False
            self._on_reopened(None, stream)

    def close(self) -> None:
        """Stop and release the stream (and stop reopening a lost one). Idempotent."""
        with self._lock:
            was_open, self._open = self._open, False
            reopener, self._reopener = self._reopener, None
            lost = self._lost
        if reopener is not None:
            reopener.stop()
        stream = self._stream
        if not was_open or stream is None or lost:
            return  # a lost stream was released when it was lost
        self._on_close(stream)
        with STREAMS.changing(self.tag):
            try:
                stream.stream.stop()
            finally:
                stream.stream.close()
                stream_closed()

    def _open_stream(self, previous: S | None) -> S:
        """Open and start a stream on the device the setting names now."""
        sd = import_sounddevice()
        device = resolve_device(self.device_setting, self.kind)
        rate, channels = self._choose_format(sd, device)
        try:
            stream = self._start_stream(sd, device, rate, channels, previous)
        except (sd.PortAudioError, ValueError) as exc:
            raise AudioDeviceError(
                f"cannot open {self.what} {device.label} at {rate} Hz, {channels} ch: {exc}; "
                f"{self._present()}"
            ) from None
        stream_opened()
        return stream

    def _choose_format(self, sd: Any, device: AudioDevice) -> tuple[int, int]:
        rates, channel_options = self._formats(device)
        check = sd.check_input_settings if self.kind is DeviceKind.INPUT else sd.check_output_settings
        errors = []
        for rate in dict.fromkeys(rates):
            for channels in dict.fromkeys(channel_options):
                try:
                    check(device=device.index, channels=channels, dtype="float32", samplerate=rate)
                    return rate, channels
                except (sd.PortAudioError, ValueError) as exc:
                    errors.append(f"{rate} Hz x {channels} ch: {exc}")
        raise AudioDeviceError(
            f"{self.what} {device.label} supports none of the formats tried "
            f"({'; '.join(errors)}); {self._present()}"
        )

    def _present(self) -> str:
        inputs, outputs = list_audio_devices()
        return describe_devices(inputs if self.kind is DeviceKind.INPUT else outputs, self.kind)

    def _name(self) -> str:
        device = self.device
        return f'{self.what} "{device.name}"' if device is not None else \
            f"{self.what} {self.device_setting!r}"

    # ------------------------------------------------------------------ health
    def check_stream(self, stream: S) -> bool:
        """Lose the device if ``stream`` stopped (unplugged, or ended by the sound
        system); True while it runs."""
        if stream.ended or not stream.stream.active:
            self.lose(stream, "its stream stopped: the device was unplugged, or the sound "
                              "system ended the stream")
            return False
        return True

    def lose(self, stream: S, reason: str) -> None:
        """Release ``stream``, report the device lost and start reopening it (once)."""
        with self._lock:
            if self._lost or not self._open or stream is not self._stream:
                return
            self._lost = True
            reopener = self._reopener = Reopener(f"parley-{self.tag}-reopen", self._try_reopen)
        self._on_lost(stream)
        if release_stream(stream.stream, self.tag):
            stream_closed()
        self.health.set(DeviceState.LOST,
                        f"{self._name()} was lost ({reason}); {self.while_lost}, and it is "
                        f"reopened every {RETRY_S:g} s until it is back or another is chosen")
        with self._lock:
            if self._reopener is reopener:  # not closed meanwhile
                reopener.start()

    def _try_reopen(self) -> bool:
        """One attempt, on the reopener's thread: True once running again (or closed)."""
        if not self._open:
            return True
        with STREAMS.changing(self.tag):
            if STREAMS.can_refresh():  # no stream is open: a re-scan finds a replugged card
                list_audio_devices(refresh=True)
            try:
                stream = self._open_stream(self._stream)
            except AudioDeviceError as exc:  # still gone: the loss was reported already
                log.debug("reopening the %s failed: %s", self.what, exc)
                return False
        with self._lock:
            keep = self._open
            if keep:
                self._on_reopened(self._stream, stream)
                self._stream, self._lost = stream, False
        if not keep:  # closed meanwhile: this stream is nobody's
            if release_stream(stream.stream, self.tag):
                stream_closed()
            return True
        self.health.set(DeviceState.OK, f"{self._name()} is back; {self.when_back}")
        return True

    def watch(self) -> None:
        """Check the device now (the subclass's watch); called where it is used."""

    def poll_health(self) -> list[HealthReport]:
        """Check the device now and return its reports since the last call (one reader)."""
        self.watch()
        return self.health.drain()
