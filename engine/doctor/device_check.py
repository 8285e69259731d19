"""The first-run check of the sound devices: does the microphone hear speech, does the
speaker play a reply?

``MicCheck`` reads an ``AudioSource`` for a few seconds, keeps the live level (``level``,
polled by a meter) and the loudest block (``peak``), and finds the user's sentence as the
pipeline would: the blocks go through a ``SampleGuard`` (invalid samples become silence)
and a ``Framer`` into the loaded VAD model, whose probabilities drive a ``TurnDetector``
configured by the user's ``VadConfig``, with the turn ending after ``END_SILENCE_S`` of
silence. The committed turn's audio is transcribed with the loaded STT model as the
``SttConfig`` says. ``SpeakerCheck`` synthesizes a sample reply with the loaded TTS model
(voice and speed from the ``TtsConfig``) and plays it on an ``AudioSink``.
Both own their device for the length of ``run`` (open, then close however it ends), run
on the caller's thread (a GUI runs them on a thread of its own), stop early when a
``threading.Event`` is set, and return a frozen result whose ``message``, on failure,
names the device and says what to try. Nothing here raises for a device problem.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from engine.audio.base import PIPELINE_RATE, AudioSink, AudioSource
from engine.audio.file_source import FileSource
from engine.audio.framing import Framer
from engine.audio.health import HealthLog, SampleGuard
from engine.audio.pcm import FLOOR_DBFS, dbfs, level
from engine.audio.sd_devices import is_default_setting
from engine.config import SttConfig, TtsConfig, TurnConfig, VadConfig
from engine.stages.turns import Committed, TurnDetector

if TYPE_CHECKING:
    from engine.backends.base import SttModel, TtsModel, VadModel

__all__ = ["FLOOR_DBFS", "MIC_STAGES", "SAMPLE_REPLY", "SPEAKER_STAGES", "MicCheck", "MicResult",
           "SpeakerCheck", "SpeakerResult", "dbfs", "missing_models"]

log = logging.getLogger("parley.device_check")

#: The stages each check needs from a loaded engine.
MIC_STAGES = ("vad", "stt")
SPEAKER_STAGES = ("tts",)
SAMPLE_REPLY = "Hello! This is how my answers will sound. If you can hear me, you are all set."
SILENCE_DBFS = -50.0  # a microphone whose loudest block stays below this heard nothing
END_SILENCE_S = 1.0  # silence after speech that ends the sentence (the VAD's own wait, then a grace)


def missing_models(models: Mapping[str, object] | None, stages: tuple[str, ...]) -> list[str]:
    """The ``stages`` that ``models`` (an engine's ``models``) does not hold yet."""
    return [s for s in stages if not models or models.get(s) is None]


def _device_name(device: AudioSource | AudioSink, setting: str | None) -> str:
    """The name to put in a message: the opened device's own name, else the setting, else
    the file a source reads."""
    if device.device_name:
        return device.device_name
    if setting and not is_default_setting(setting):
        return setting
    return device.name if isinstance(device, FileSource) else "default"


def check_turns(vad: VadConfig) -> TurnConfig:
    """How the check takes a turn: it ends after ``END_SILENCE_S`` of silence in all (the
    VAD's ``min_silence_ms``, then the rest as the reopen grace), one segment, no partials."""
    grace_ms = max(0, round(END_SILENCE_S * 1000) - vad.min_silence_ms)
    return TurnConfig(reopen_grace_ms=grace_ms, speculative=False, live_transcription=False)


@dataclass(frozen=True)
class MicResult:
    """What the microphone test found.

    ``heard``: the VAD found speech. ``peak_dbfs``: the loudest block's level.
    ``seconds``: audio captured. ``message``: None when all went well, else what failed,
    naming the device, and what to try.
    """

    device: str
    heard: bool
    peak_dbfs: float
    transcript: str
    seconds: float
    speech_seconds: float = 0.0
    message: str | None = None
    cancelled: bool = False

    @property
    def ok(self) -> bool:
        """Speech was heard and turned into words."""
        return self.message is None and self.heard and bool(self.transcript)


@dataclass(frozen=True)
class SpeakerResult:
    """What the speaker test did: ``seconds`` of the sample reply played on ``device``;
    ``peak_dbfs`` of that audio; ``message`` None, or what failed and what to try."""

    device: str
    played: bool
    seconds: float
    peak_dbfs: float
    text: str
    message: str | None = None
    cancelled: bool = False

    @property
    def ok(self) -> bool:
        """The whole sample reply was played."""
        return self.message is None and self.played


class MicCheck:
    """Listen to ``source`` until a sentence ends (or ``max_seconds``) and transcribe it.

    ``vad`` and ``stt`` are the settings the pipeline uses (threshold, waits, padding;
    language, beam width). ``level`` (RMS of the latest block, 0..1), ``peak`` and
    ``phase`` (``"opening"``, ``"listening"``, ``"transcribing"``, ``"done"``) may be read
    from any thread while ``run`` works; ``on_level`` is called with each block's level on
    the reading thread. ``stall_s``: how long the source may deliver nothing.
    """

    def __init__(self, source: AudioSource, vad_model: VadModel, stt_model: SttModel,
                 vad: VadConfig | None = None, stt: SttConfig | None = None, *,
                 device: str | None = None, max_seconds: float = 8.0, stall_s: float = 3.0,
                 on_level: Callable[[float], None] | None = None) -> None:
        """``device``: the setting the source was made from, for messages until it opens."""
        if not max_seconds > 0:
            raise ValueError(f"MicCheck max_seconds must be > 0; got {max_seconds!r}")
        self.source, self.vad_model, self.stt_model = source, vad_model, stt_model
        self.vad, self.stt = vad or VadConfig(), stt or SttConfig()
        self.device_setting = device
        self.max_seconds, self.stall_s = max_seconds, stall_s
        self.on_level = on_level
        self.health = HealthLog("microphone")
        self._guard = SampleGuard(self.health, lambda: f"microphone {self.device_name!r}")
        self.level = 0.0
        self.peak = 0.0
        self.phase = "opening"

    @property
    def device_name(self) -> str:
        """The microphone's name as messages give it."""
        return _device_name(self.source, self.device_setting)

    def run(self, cancel: threading.Event | None = None) -> MicResult:
        """Open the source, listen, close it, transcribe; never raises for a device problem."""
        cancel = cancel or threading.Event()
        try:
            self.source.open()
        except Exception as exc:  # noqa: BLE001 - any failure to open is the device's answer
            self.phase = "done"
            return self._result(0, message=(
                f"microphone {self.device_name!r} could not be opened: {_reason(exc)}. Try: check "
                "it is plugged in and not used by another program, or pick another input"))
        self.phase = "listening"
        try:
            seconds, turn, failure, cancelled = self._listen(cancel)
        except Exception as exc:
            log.warning("setup check: listening failed", exc_info=True)
            self.phase = "done"
            return self._result(0.0, message=(
                f"microphone {self.device_name!r} failed during the test: {_reason(exc)}. "
                "Try: pick another input"))
        finally:
            self.source.close()
        if cancelled:
            self.phase = "done"
            return self._result(seconds, message="the microphone test was stopped", cancelled=True)
        if failure:
            self.phase = "done"
            return self._result(seconds, message=failure)
        return self._transcribe(turn, seconds)

    def _listen(self, cancel: threading.Event) -> tuple[float, Committed | None, str | None, bool]:
        """Blocks until the sentence ended, time ran out, the source failed or ``cancel``.

        Returns the seconds captured, the sentence (None if no speech), a failure, cancelled.
        Frames are timed by the samples captured (a file read faster than real time has no
        clock of its own), so the turn's times are seconds into the check.
        """
        model = self.vad_model
        framer = Framer(model.frame_samples)
        detector = TurnDetector(self.vad, check_turns(self.vad), model.frame_samples, model.sample_rate)
        stream = model.new_stream()
        captured = 0
        last_block = time.monotonic()
        try:
            while captured < self.max_seconds * PIPELINE_RATE:
                if cancel.is_set():
                    return captured / PIPELINE_RATE, None, None, True
                block = self.source.read(0.1)
                if block is None or block.samples.size == 0:
                    if self.source.finished:
                        break
                    failure = self._no_audio(time.monotonic() - last_block)
                    if failure:
                        return captured / PIPELINE_RATE, None, failure, False
                    continue
                last_block = time.monotonic()
                samples = self._guard.check(np.asarray(block.samples, np.float32), PIPELINE_RATE)
                self._show_level(level(samples))
                for frame, t in framer.push(samples, captured / PIPELINE_RATE):
                    for event in detector.push(frame, stream.speech_probability(frame), t):
                        if isinstance(event, Committed):
                            return (captured + samples.size) / PIPELINE_RATE, event, None, False
                captured += samples.size
            ended = [e for e in detector.flush() if isinstance(e, Committed)]
            return captured / PIPELINE_RATE, (ended[0] if ended else None), None, False
        finally:
            self.level = 0.0

    def _no_audio(self, quiet_s: float) -> str | None:
        """What failed if the source delivered nothing for ``quiet_s`` (None: wait on)."""
        if self.source.lost:
            return (f"microphone {self.device_name!r} stopped delivering audio during the test "
                    "(unplugged, or the sound system ended the stream): plug it back in, or "
                    "pick another input")
        if quiet_s > self.stall_s:
            return (f"microphone {self.device_name!r} delivered no audio for {self.stall_s:g} s: "
                    "check it is connected and not used by another program, or pick another input")
        return None

    def _show_level(self, value: float) -> None:
        self.level, self.peak = value, max(self.peak, value)
        if self.on_level is not None:
            self.on_level(value)

    def _transcribe(self, turn: Committed | None, seconds: float) -> MicResult:
        name, peak_db = self.device_name, dbfs(self.peak)
        if turn is None:
            self.phase = "done"
            if self._guard.replaced_blocks:
                return self._result(seconds, message=(
                    f"microphone {name!r} delivered invalid samples (NaN, infinite or far beyond "
                    f"full scale) in {self._guard.replaced_blocks} blocks, heard as silence: pick "
                    "another input, or check its driver"))
            if peak_db < SILENCE_DBFS:
                return self._result(seconds, message=(
                    f"microphone {name!r} gave only silence (peak {peak_db:.0f} dBFS): check it "
                    "is not muted, pick another input, or raise its gain"))
            return self._result(seconds, message=(
                f"microphone {name!r} picked up sound (peak {peak_db:.0f} dBFS) but no speech "
                f"in {seconds:.0f} s: say a sentence while the test runs, move closer, or "
                "lower the background noise"))
        speech_s = turn.t_speech_end - turn.t_speech_start
        self.phase = "transcribing"
        try:
            result = self.stt_model.transcribe(turn.audio, self.stt.spoken_language,
                                               self.stt.beam_size, self.stt.fit_window_s)
            text = str(result.text).strip()
        except Exception as exc:  # the model's failure, shown, not raised
            log.warning("setup check: transcription failed", exc_info=True)
            self.phase = "done"
            return self._result(seconds, heard=True, speech_s=speech_s, message=(
                f"microphone {name!r} works (speech heard), but speech recognition failed: "
                f"{_reason(exc)}. Try another speech model on the Settings tab"))
        self.phase = "done"
        if not text:
            return self._result(seconds, heard=True, speech_s=speech_s, message=(
                f"microphone {name!r} heard speech (peak {peak_db:.0f} dBFS) but no words "
                "could be made out: speak closer and clearly, or raise its gain"))
        return self._result(seconds, heard=True, speech_s=speech_s, transcript=text)

    def _result(self, seconds: float, *, heard: bool = False, speech_s: float = 0.0,
                transcript: str = "", message: str | None = None,
                cancelled: bool = False) -> MicResult:
        return MicResult(self.device_name, heard, dbfs(self.peak), transcript, seconds, speech_s,
                         message, cancelled)


class SpeakerCheck:
    """Synthesize ``text`` with the TTS model and play it on ``sink``, to the end.

    ``phase`` (``"opening"``, ``"synthesizing"``, ``"playing"``, ``"done"``) may be read
    from any thread while ``run`` works.
    """

    def __init__(self, sink: AudioSink, tts_model: TtsModel, tts: TtsConfig | None = None, *,
                 device: str | None = None, text: str = SAMPLE_REPLY, slack_s: float = 5.0) -> None:
        """``tts``: the voice and speed to read it in; ``device``: the setting the sink was
        made from, for messages until it opens; ``slack_s``: how much longer than the audio
        playback may take before it counts as stuck."""
        if not text.strip():
            raise ValueError("SpeakerCheck text must not be empty")
        self.sink, self.tts_model, self.device_setting = sink, tts_model, device
        self.tts = tts or TtsConfig()
        self.text, self.slack_s = text, slack_s
        self.phase = "opening"

    @property
    def device_name(self) -> str:
        """The speaker's name as messages give it."""
        return _device_name(self.sink, self.device_setting)

    def run(self, cancel: threading.Event | None = None) -> SpeakerResult:
        """Open the sink, synthesize and play the sample, close it; never raises for a
        device problem."""
        cancel = cancel or threading.Event()
        try:
            self.sink.open()
        except Exception as exc:  # noqa: BLE001 - any failure to open is the device's answer
            self.phase = "done"
            return self._result(0.0, 0.0, False, (
                f"speaker {self.device_name!r} could not be opened: {_reason(exc)}. Try: check "
                "it is plugged in and switched on, close programs that hold it, or pick "
                "another output"))
        try:
            return self._play(cancel)
        finally:
            self.sink.close()
            self.phase = "done"

    def _play(self, cancel: threading.Event) -> SpeakerResult:
        seconds, peak = 0.0, 0.0
        self.phase = "synthesizing"
        try:
            for chunk in self.tts_model.synthesize(self.text, cancel.is_set, self.tts.voice,
                                                   self.tts.speed):
                if cancel.is_set():
                    break
                audio = np.asarray(chunk.audio, np.float32).reshape(-1)
                if audio.size == 0:
                    continue
                peak = max(peak, float(np.max(np.abs(audio))))
                seconds += audio.size / chunk.sample_rate
                self.sink.play(audio, chunk.sample_rate, 1)
                self.phase = "playing"
        except Exception as exc:  # the model's failure, shown, not raised
            log.warning("setup check: synthesis failed", exc_info=True)
            self.sink.flush()
            return self._result(seconds, peak, False, (
                f"the voice could not read the sample reply: {_reason(exc)}. Try another "
                "voice on the Settings tab"))
        if cancel.is_set():
            self.sink.flush()
            return self._result(seconds, peak, False, "the speaker test was stopped", True)
        if seconds == 0 or dbfs(peak) < SILENCE_DBFS:
            return self._result(seconds, peak, False, (
                f"the voice produced only silence for the sample reply (peak {dbfs(peak):.0f} "
                "dBFS), so the speaker could not be tested: try another voice on the Settings tab"))
        self.phase = "playing"
        deadline = time.monotonic() + seconds + self.slack_s
        while not self.sink.wait_idle(0.1):
            if cancel.is_set():
                self.sink.flush()
                return self._result(seconds, peak, False, "the speaker test was stopped", True)
            if self.sink.lost:
                return self._result(seconds, peak, False, (
                    f"speaker {self.device_name!r} stopped playing during the test "
                    "(unplugged, or the sound system ended the stream): plug it back in, or "
                    "pick another output"))
            if time.monotonic() > deadline:
                self.sink.flush()
                return self._result(seconds, peak, False, (
                    f"speaker {self.device_name!r} did not finish the {seconds:.1f} s sample "
                    f"within {seconds + self.slack_s:.0f} s (the device stalls): pick another "
                    "output, or restart the sound system"))
        return self._result(seconds, peak, True, None)

    def _result(self, seconds: float, peak: float, played: bool, message: str | None,
                cancelled: bool = False) -> SpeakerResult:
        return SpeakerResult(self.device_name, played, seconds, dbfs(peak), self.text, message,
                             cancelled)


def _reason(exc: BaseException) -> str:
    """The exception's own words (its type when it has none), without a trailing period."""
    return (str(exc) or type(exc).__name__).rstrip(". ")
