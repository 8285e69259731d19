"""The first-run device check, engine side (engine.doctor.device_check): the bundled recording as
the microphone, the real offline VAD, STT and TTS models, the fake sound device for the
faults."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from engine.audio.file_sink import FileSink
from engine.audio.file_source import FileSource
from engine.audio.speaker import SpeakerSink
from engine.models.model_registry import ModelRegistry
from engine.doctor.device_check import (MIC_STAGES, SPEAKER_STAGES, MicCheck, SpeakerCheck, dbfs,
                                       missing_models)
from tests.support.device_check import check_models
from tests.support.fake_sound import install_fake_sound
from tests.support.threads import parley_threads
from tests.support.transcripts import normalize_spelled


@pytest.fixture(scope="module")
def models():
    return check_models(ModelRegistry())


def mic_check(models, source, **kwargs) -> MicCheck:
    return MicCheck(source, models["vad"], models["stt"], **kwargs)


def test_missing_models_names_the_stages_not_loaded():
    assert missing_models(None, MIC_STAGES) == ["vad", "stt"]
    assert missing_models({"vad": object()}, MIC_STAGES) == ["stt"]
    assert missing_models({"tts": object()}, SPEAKER_STAGES) == []
    assert dbfs(0.0) == -120.0 and dbfs(1.0) == 0.0 and round(dbfs(0.1)) == -20


@pytest.mark.slow
def test_the_recording_is_heard_and_transcribed(models, one_two_three_path):
    levels: list[float] = []
    check = mic_check(models, FileSource(one_two_three_path, realtime=False), on_level=levels.append)
    result = check.run()
    assert result.ok, result.message
    assert result.heard and result.message is None
    words = normalize_spelled(result.transcript).split()
    assert {"one", "two", "three"} <= set(words), result.transcript
    assert result.peak_dbfs > -40 and max(levels) > 0.01
    assert result.device == str(one_two_three_path)  # a file source is named by its path
    assert 0.5 < result.speech_seconds <= result.seconds <= 8.0
    assert check.phase == "done"


@pytest.mark.slow
def test_the_check_stops_once_the_sentence_ended(models, jfk_path):
    """A long recording: the check transcribes at most ``max_seconds`` of it."""
    result = mic_check(models, FileSource(jfk_path, realtime=False), max_seconds=4.0).run()
    assert result.heard and result.seconds <= 4.1
    assert "americans" in normalize_spelled(result.transcript), result.transcript


@pytest.mark.slow
def test_a_silent_microphone_is_named_with_what_to_try(models):
    source = FileSource(np.zeros(16000 * 2, np.float32), realtime=False)
    result = mic_check(models, source, device="USB Mic").run()
    assert not result.ok and not result.heard and result.transcript == ""
    assert result.message.startswith("microphone 'USB Mic' gave only silence (peak -120 dBFS)")
    assert "not muted" in result.message and "another input" in result.message


@pytest.mark.slow
def test_noise_without_speech_is_told_apart_from_silence(models):
    noise = np.random.default_rng(0).normal(0, 0.05, 16000 * 2).astype(np.float32)
    result = mic_check(models, FileSource(noise, realtime=False)).run()
    assert not result.heard
    assert "picked up sound" in result.message and "no speech" in result.message


@pytest.mark.slow
def test_an_unplugged_microphone_is_named_with_the_portaudio_error(models, monkeypatch):
    from engine.audio.mic import MicSource

    sound = install_fake_sound(monkeypatch)
    sound.unplug("input")
    result = mic_check(models, MicSource("USB Mic"), device="USB Mic").run()
    assert not result.ok and result.seconds == 0
    assert result.message.startswith("microphone 'USB Mic' could not be opened: ")
    assert "no input devices are present" in result.message
    assert "pick another input" in result.message


@pytest.mark.slow
def test_the_fake_microphone_hears_the_recording(models, monkeypatch, one_two_three_path):
    """The real MicSource over the fake sound device: named by the opened device."""
    from engine.audio.decode import load_audio
    from engine.audio.mic import MicSource

    sound = install_fake_sound(monkeypatch)
    sound.hear(load_audio(one_two_three_path))
    result = mic_check(models, MicSource("default")).run()
    assert result.ok, result.message
    assert result.device == "Fake input"
    assert {"one", "two", "three"} <= set(normalize_spelled(result.transcript).split())
    assert not sound.live("input")  # closed again


@pytest.mark.slow
def test_a_microphone_that_delivers_nothing_is_reported(models, monkeypatch):
    from engine.audio.mic import MicSource

    sound = install_fake_sound(monkeypatch)
    source = MicSource("default")
    check = mic_check(models, source, stall_s=0.5)
    stalled = threading.Thread(target=lambda: (time.sleep(0.05), [s.stall() for s in sound.streams]))
    stalled.start()
    result = check.run()
    stalled.join()
    assert "delivered no audio for 0.5 s" in result.message or "stopped delivering" in result.message


@pytest.mark.slow
def test_a_source_that_breaks_while_read_is_reported(models, one_two_three_path):
    class Broken(FileSource):
        def read(self, timeout):
            raise RuntimeError("the stream broke")

    source = Broken(one_two_three_path, realtime=False)
    result = mic_check(models, source, device="USB Mic").run()
    assert result.message == ("microphone 'USB Mic' failed during the test: the stream broke. "
                              "Try: pick another input")
    assert source.finished is False and source._closed  # closed however it ended


@pytest.mark.slow
def test_cancel_stops_the_microphone_check(models, jfk_path):
    cancel = threading.Event()
    check = mic_check(models, FileSource(jfk_path, realtime=True))
    timer = threading.Timer(0.3, cancel.set)
    timer.start()
    start = time.monotonic()
    result = check.run(cancel)
    timer.join()
    assert result.cancelled and not result.ok and time.monotonic() - start < 2.0


@pytest.mark.slow
def test_the_sample_reply_is_played_and_not_silent(models):
    sink = FileSink(None, realtime=True)
    result = SpeakerCheck(sink, models["tts"], device="default").run()
    assert result.ok, result.message
    assert result.played and result.seconds > 1.0 and result.peak_dbfs > -30
    audio = sink.audio
    assert audio.size / sink.sample_rate == pytest.approx(result.seconds, abs=0.05)
    assert float(np.sqrt(np.mean(audio ** 2))) > 0.01  # what was "heard" is not silence
    assert not [t for t in parley_threads() if "filesink" in t]


@pytest.mark.slow
def test_the_fake_speaker_plays_the_sample(models, monkeypatch):
    sound = install_fake_sound(monkeypatch)
    result = SpeakerCheck(SpeakerSink("default"), models["tts"]).run()
    assert result.ok, result.message
    assert result.device == "Fake output"
    played = np.concatenate([s for stream in sound.streams for s in stream.played])
    assert np.max(np.abs(played)) > 0.05
    assert not sound.live("output")


@pytest.mark.slow
def test_an_unplugged_speaker_is_named(models, monkeypatch):
    sound = install_fake_sound(monkeypatch)
    sound.unplug("output")
    result = SpeakerCheck(SpeakerSink("Desk Speakers"), models["tts"], device="Desk Speakers").run()
    assert not result.ok and not result.played
    assert result.message.startswith("speaker 'Desk Speakers' could not be opened: ")
    assert "pick another output" in result.message


@pytest.mark.slow
def test_cancel_stops_the_speaker_check(models):
    cancel = threading.Event()
    sink = FileSink(None, realtime=True)
    check = SpeakerCheck(sink, models["tts"])
    timer = threading.Timer(0.5, cancel.set)
    timer.start()
    result = check.run(cancel)
    timer.join()
    assert result.cancelled and not result.played
    assert sink.seconds_played < result.seconds


@pytest.mark.slow
def test_invalid_samples_are_named_not_taken_for_silence(models):
    garbage = np.full(16000 * 2, np.nan, np.float32)
    check = mic_check(models, FileSource(garbage, realtime=False), device="USB Mic")
    result = check.run()
    assert not result.heard and result.peak_dbfs == -120.0
    assert result.message.startswith("microphone 'USB Mic' delivered invalid samples")
    assert "pick another input" in result.message
    assert check.health.state.value == "invalid"  # the guard's report, as the pipeline's


@pytest.mark.slow
def test_the_check_takes_the_pipelines_vad_and_stt_settings(models, one_two_three_path):
    """The same recording: no speech where the VAD setting asks for 5 s of it at once; the
    padding around the speech, the language and the beam width are the settings'."""
    from engine.config import SttConfig, VadConfig

    class Spy:
        def __init__(self, model) -> None:
            self.model, self.calls = model, []

        def transcribe(self, audio, language=None, beam_size=1, fit_window_s=None):
            self.calls.append((audio.size, language, beam_size, fit_window_s))
            return self.model.transcribe(audio, language, beam_size, fit_window_s)

    strict = mic_check(models, FileSource(one_two_three_path, realtime=False),
                       vad=VadConfig(min_speech_ms=5000)).run()
    assert not strict.heard and "no speech" in strict.message
    stt = Spy(models["stt"])
    for pad_ms, language in ((0, "en"), (250, "")):
        result = MicCheck(FileSource(one_two_three_path, realtime=False), models["vad"], stt,
                          VadConfig(pad_ms=pad_ms), SttConfig(language=language, beam_size=2)).run()
        assert result.ok, result.message
        assert 0.5 < result.speech_seconds < result.seconds
    (tight, *_), (padded, *_) = stt.calls
    fit = SttConfig().fit_window_s  # the window setting travels too
    assert [call[1:] for call in stt.calls] == [("en", 2, fit), (None, 2, fit)]  # "" is detection
    # 250 ms is 8 frames of 512: all of them after the speech (a second of silence follows
    # it), as many as the recording has before it
    assert 8 * 512 <= padded - tight <= 2 * 8 * 512


def test_frames_keep_their_capture_times_across_blocks():
    from engine.audio.framing import Framer

    framer = Framer(4, rate=4)
    assert framer.push(np.arange(3, dtype=np.float32), 10.0) == []
    frames = framer.push(np.arange(3, 9, dtype=np.float32), 10.75)
    assert [(f.tolist(), t) for f, t in frames] == [([0, 1, 2, 3], 10.0), ([4, 5, 6, 7], 11.0)]
    framer.reset()
    assert [t for _f, t in framer.push(np.zeros(4, np.float32), 20.0)] == [20.0]


def test_the_sentence_ends_after_a_second_of_silence_whatever_the_vad_wait():
    from engine.doctor.device_check import END_SILENCE_S, check_turns
    from engine.config import VadConfig

    for wait_ms in (100, 300, 800):
        turns = check_turns(VadConfig(min_silence_ms=wait_ms))
        assert wait_ms + turns.reopen_grace_ms == END_SILENCE_S * 1000
        assert not turns.speculative and not turns.live_transcription
    assert check_turns(VadConfig(min_silence_ms=3000)).reopen_grace_ms == 0
