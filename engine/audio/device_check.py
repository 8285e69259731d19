"""The first-run check of the sound devices: does the microphone hear speech, does the
speaker play a reply?

``MicCheck`` reads an ``AudioSource`` for a few seconds, keeps the live level (``level``,
polled by a meter) and the loudest block (``peak``), runs the loaded VAD model over it to
find the speech, and transcribes that with the loaded STT model. ``SpeakerCheck``
synthesizes a sample reply with the loaded TTS model and plays it on an ``AudioSink``.
Both own their device for the length of ``run`` (open, then close however it ends), run
on the caller's thread (a GUI runs them on a thread of its own), stop early when a
``threading.Event`` is set, and return a frozen result whose ``message``, on failure,
names the device and says what to try. Nothing here raises for a device problem.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from engine.audio.base import PIPELINE_RATE, AudioSink, AudioSource

log = logging.getLogger("parley.setup_check")

#: The stages each check needs from a loaded engine.
MIC_STAGES = ("vad", "stt")
SPEAKER_STAGES = ("tts",)
SAMPLE_REPLY = "Hello! This is how my answers will sound. If you can hear me, you are all set."
FLOOR_DBFS = -120.0  # what digital silence is reported as (log10(0) has no value)
SILENCE_DBFS = -50.0  # a microphone whose loudest block stays below this heard nothing
_PAD_S = 0.3  # audio kept either side of the detected speech, for the first/last word
_MIN_SPEECH_S = 0.15  # less than this above the VAD threshold is a click, not speech


def dbfs(rms: float) -> float:
    """``rms`` (0..1) in dB relative to full scale; ``FLOOR_DBFS`` for silence (or NaN)."""
    return max(FLOOR_DBFS, 20 * math.log10(rms)) if rms > 0 else FLOOR_DBFS


def missing_models(models: Mapping[str, object] | None, stages: tuple[str, ...]) -> list[str]:
    """The ``stages`` that ``models`` (an engine's ``models``) does not hold yet."""
    return [s for s in stages if not models or models.get(s) is None]


def _device_name(device_obj, setting: str | None, fallback: str) -> str:
    """The name to put in a message: the opened device's own name, else the setting."""
    device = getattr(device_obj, "device", None)
    name = getattr(device, "name", None)
    if name:
        return str(name)
    if setting and setting.strip().lower() not in ("", "default", "auto"):
        return setting
    return str(getattr(device_obj, "name", None) or fallback)


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

    ``level`` (RMS of the latest block, 0..1), ``peak`` and ``phase`` (``"opening"``,
    ``"listening"``, ``"transcribing"``, ``"done"``) may be read from any thread while
    ``run`` works; ``on_level`` is called with each block's RMS on the reading thread.
    """

    def __init__(self, source: AudioSource, vad_model, stt_model, *, device: str | None = None,
                 max_seconds: float = 8.0, end_silence_s: float = 1.0, threshold: float = 0.5,
                 language: str | None = "en", beam_size: int = 1, stall_s: float = 3.0,
                 on_level: Callable[[float], None] | None = None) -> None:
        """``device``: the setting the source was made from, for messages until it opens."""
        if not max_seconds > 0:
            raise ValueError(f"MicCheck max_seconds must be > 0; got {max_seconds!r}")
        if not 0 < threshold < 1:
            raise ValueError(f"MicCheck threshold must be between 0 and 1; got {threshold!r}")
        self.source, self.vad, self.stt = source, vad_model, stt_model
        self.device_setting = device
        self.max_seconds, self.end_silence_s, self.threshold = max_seconds, end_silence_s, threshold
        self.language, self.beam_size, self.stall_s = language or None, beam_size, stall_s
        self.on_level = on_level
        self.level = 0.0
        self.peak = 0.0
        self.phase = "opening"

    @property
    def device_name(self) -> str:
        """The microphone's name as messages give it."""
        return _device_name(self.source, self.device_setting, "default")

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
            audio, speech, failure, cancelled = self._listen(cancel)
        except Exception as exc:
            log.warning("setup check: listening failed", exc_info=True)
            self.phase = "done"
            return self._result(0.0, message=(
                f"microphone {self.device_name!r} failed during the test: {_reason(exc)}. "
                "Try: pick another input"))
        finally:
            self.source.close()
        seconds = audio.size / PIPELINE_RATE
        if cancelled:
            self.phase = "done"
            return self._result(seconds, message="the microphone test was stopped", cancelled=True)
        if failure:
            self.phase = "done"
            return self._result(seconds, message=failure)
        return self._transcribe(audio, speech, seconds)

    def _listen(self, cancel: threading.Event) -> tuple[np.ndarray, tuple[int, int] | None,
                                                        str | None, bool]:
        """Blocks until the sentence ended, time ran out, the source failed or ``cancel``.

        Returns the audio, (first, last) speech frame or None, a failure, cancelled.
        """
        n = int(getattr(self.vad, "frame_samples", 512))
        frame_s = n / PIPELINE_RATE
        end_frames = max(1, round(self.end_silence_s / frame_s))
        min_frames = max(1, round(_MIN_SPEECH_S / frame_s))
        stream = self.vad.new_stream()
        blocks: list[np.ndarray] = []
        captured = 0
        pending = np.zeros(0, np.float32)
        frames = speech_frames = 0
        first = last = None
        last_block = time.monotonic()
        while captured < self.max_seconds * PIPELINE_RATE:
            if cancel.is_set():
                return _join(blocks), None, None, True
            if first is not None and speech_frames >= min_frames and frames - 1 - last >= end_frames:
                break  # the sentence is over
            block = self.source.read(0.1)
            if block is None or block.samples.size == 0:
                if getattr(self.source, "finished", False):
                    break
                if getattr(self.source, "lost", False):
                    return _join(blocks), None, (
                        f"microphone {self.device_name!r} stopped delivering audio during the "
                        "test (unplugged, or the sound system ended the stream): plug it back "
                        "in, or pick another input"), False
                if time.monotonic() - last_block > self.stall_s:
                    return _join(blocks), None, (
                        f"microphone {self.device_name!r} delivered no audio for "
                        f"{self.stall_s:g} s: check it is connected and not used by another "
                        "program, or pick another input"), False
                continue
            last_block = time.monotonic()
            # A faulty card can send NaN or huge values: they must not reach the models.
            samples = np.clip(np.nan_to_num(block.samples.astype(np.float32, copy=False),
                                            nan=0.0, posinf=0.0, neginf=0.0), -1.0, 1.0)
            rms = float(np.sqrt(np.mean(np.square(samples, dtype=np.float64))))
            self.level, self.peak = rms, max(self.peak, rms)
            if self.on_level is not None:
                self.on_level(rms)
            blocks.append(samples)
            captured += samples.size
            pending = np.concatenate([pending, samples]) if pending.size else samples
            while pending.size >= n:
                frame, pending = pending[:n], pending[n:]
                if stream.speech_probability(frame) >= self.threshold:
                    first = frames if first is None else first
                    last = frames
                    speech_frames += 1
                frames += 1
        self.level = 0.0
        found = (first, last) if first is not None and speech_frames >= min_frames else None
        return _join(blocks), (None if found is None else (found[0] * n, (found[1] + 1) * n)), \
            None, False

    def _transcribe(self, audio: np.ndarray, speech: tuple[int, int] | None,
                    seconds: float) -> MicResult:
        name, peak_db = self.device_name, dbfs(self.peak)
        if speech is None:
            self.phase = "done"
            if peak_db < SILENCE_DBFS:
                return self._result(seconds, message=(
                    f"microphone {name!r} gave only silence (peak {peak_db:.0f} dBFS): check it "
                    "is not muted, pick another input, or raise its gain"))
            return self._result(seconds, message=(
                f"microphone {name!r} picked up sound (peak {peak_db:.0f} dBFS) but no speech "
                f"in {seconds:.0f} s: say a sentence while the test runs, move closer, or "
                "lower the background noise"))
        pad = round(_PAD_S * PIPELINE_RATE)
        start, end = max(0, speech[0] - pad), min(audio.size, speech[1] + pad)
        speech_s = (speech[1] - speech[0]) / PIPELINE_RATE
        self.phase = "transcribing"
        try:
            result = self.stt.transcribe(audio[start:end], self.language, self.beam_size)
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

    def __init__(self, sink: AudioSink, tts_model, *, device: str | None = None,
                 text: str = SAMPLE_REPLY, voice: str = "auto", speed: float = 1.0,
                 slack_s: float = 5.0) -> None:
        """``device``: the setting the sink was made from, for messages until it opens;
        ``slack_s``: how much longer than the audio playback may take before it counts as
        stuck."""
        if not text.strip():
            raise ValueError("SpeakerCheck text must not be empty")
        self.sink, self.tts, self.device_setting = sink, tts_model, device
        self.text, self.voice, self.speed, self.slack_s = text, voice, speed, slack_s
        self.phase = "opening"

    @property
    def device_name(self) -> str:
        """The speaker's name as messages give it."""
        return _device_name(self.sink, self.device_setting, "default")

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
            for chunk in self.tts.synthesize(self.text, cancel.is_set, self.voice, self.speed):
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
            if getattr(self.sink, "lost", False):
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


def _join(blocks: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(blocks) if blocks else np.zeros(0, np.float32)


def _reason(exc: BaseException) -> str:
    """The exception's own words (its type when it has none), without a trailing period."""
    return (str(exc) or type(exc).__name__).rstrip(". ")
