"""engine.audio.pcm: the one scale rule between float32 and PCM16, loudness, WAV bytes."""

from __future__ import annotations

import io
import wave

import numpy as np
import pytest
import soundfile as sf

from engine.audio import pcm


def test_full_scale_is_32767_both_ways_and_symmetric():
    audio = np.array([0.0, 1.0, -1.0, 0.5, -0.5, 1 / 32767, -1 / 32767], np.float32)
    assert pcm.to_int16(audio).tolist() == [0, 32767, -32767, 16384, -16384, 1, -1]
    assert pcm.from_int16(np.array([0, 32767, -32767], np.int16)).tolist() == [0.0, 1.0, -1.0]


def test_the_bytes_are_little_endian_signed_16_bit():
    assert pcm.to_pcm16(np.array([1 / 32767, -1 / 32767, 1.0], np.float32)) == b"\x01\x00\xff\xff\xff\x7f"
    assert pcm.from_pcm16(b"\x00\x00\xff\x7f\x01\x80").tolist() == [0.0, 1.0, -1.0]
    assert pcm.from_pcm16(b"").dtype == np.float32 and pcm.from_pcm16(b"").size == 0


def test_out_of_range_and_invalid_samples_are_clipped_to_full_scale():
    audio = np.array([2.0, -2.0, np.inf, -np.inf, np.nan, 1.00001, -1.00001], np.float32)
    assert pcm.to_int16(audio).tolist() == [32767, -32767, 32767, -32767, 0, 32767, -32767]


def test_float_round_trip_is_within_half_a_step_and_exact_at_the_extremes():
    audio = np.random.default_rng(1).uniform(-1, 1, 48000).astype(np.float32)
    audio[:3] = [0.0, 1.0, -1.0]
    back = pcm.from_pcm16(pcm.to_pcm16(audio))
    assert back.dtype == np.float32
    assert np.max(np.abs(back - audio)) <= 0.5 / 32767 + 1e-7
    assert back[:3].tolist() == [0.0, 1.0, -1.0]


def test_every_int16_code_but_the_lowest_survives_a_round_trip():
    codes = np.arange(-32768, 32768, dtype=np.int16)
    back = pcm.to_int16(pcm.from_int16(codes))
    assert np.array_equal(back[1:], codes[1:])
    assert back[0] == -32767  # -32768 decodes past full scale (-1.00003) and is clipped


def test_an_odd_number_of_bytes_is_refused():
    with pytest.raises(ValueError, match="odd number of bytes"):
        pcm.from_pcm16(b"\x00\x01\x02")


def test_rms_power_and_level():
    assert pcm.rms(np.zeros(0, np.float32)) == 0.0 and pcm.power(np.zeros(0, np.float32)) == 0.0
    assert pcm.rms(np.full(100, 0.5, np.float32)) == pytest.approx(0.5)
    sine = np.sin(2 * np.pi * 440 * np.arange(16000) / 16000).astype(np.float32)
    assert pcm.rms(sine) == pytest.approx(1 / np.sqrt(2), rel=1e-4)
    assert pcm.power(sine) == pytest.approx(0.5, rel=1e-4)
    assert pcm.level(np.full(10, np.nan, np.float32)) == 0.0
    assert pcm.level(np.full(10, np.inf, np.float32)) == 1.0
    assert pcm.level(np.full(10, 3.0, np.float32)) == 1.0
    assert pcm.level(np.full(10, 0.25, np.float32)) == pytest.approx(0.25)


def test_frame_rms_takes_a_partial_last_frame_over_its_own_length():
    audio = np.concatenate([np.full(4, 0.5), np.zeros(4), np.full(2, 0.25)]).astype(np.float32)
    assert pcm.frame_rms(audio, 4).tolist() == pytest.approx([0.5, 0.0, 0.25])
    assert pcm.frame_rms(np.zeros(0, np.float32), 4).size == 0
    with pytest.raises(ValueError):
        pcm.frame_rms(audio, 0)


def test_dbfs_has_a_floor_for_silence():
    assert pcm.dbfs(1.0) == 0.0 and round(pcm.dbfs(0.1)) == -20 and round(pcm.dbfs(0.5)) == -6
    assert pcm.dbfs(0.0) == pcm.FLOOR_DBFS == -120.0
    assert pcm.dbfs(float("nan")) == -120.0 and pcm.dbfs(-1.0) == -120.0
    assert pcm.dbfs(1e-9) == -120.0  # -180 dB is below the floor
    assert pcm.dbfs(0.0, floor=-60.0) == -60.0 and pcm.dbfs(1e-4, floor=-60.0) == -60.0


def test_wav_bytes_are_what_the_wave_module_writes_and_soundfile_reads():
    audio = np.sin(2 * np.pi * 300 * np.arange(2400) / 24000).astype(np.float32) * 0.8
    data = pcm.wav_bytes(audio, 24000)
    expected = io.BytesIO()
    with wave.open(expected, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(24000)
        out.writeframes(pcm.to_pcm16(audio))
    assert data == expected.getvalue()
    with wave.open(io.BytesIO(data), "rb") as back:
        assert (back.getnchannels(), back.getsampwidth(), back.getframerate(), back.getnframes()) \
            == (1, 2, 24000, audio.size)
        assert pcm.from_pcm16(back.readframes(audio.size)).tolist() == \
            pcm.from_pcm16(pcm.to_pcm16(audio)).tolist()
    samples, rate = sf.read(io.BytesIO(data), dtype="int16")
    assert rate == 24000 and np.array_equal(samples, pcm.to_int16(audio))


def test_a_streamed_wav_header_leaves_its_sizes_open():
    header = pcm.wav_header(16000)
    assert len(header) == 44 and header[4:8] == header[40:44] == b"\xff\xff\xff\xff"
    assert header[8:40] == pcm.wav_header(16000, 0)[8:40]
    audio = np.linspace(-1, 1, 1600, dtype=np.float32)
    samples, rate = sf.read(io.BytesIO(header + pcm.to_pcm16(audio)), dtype="int16")
    assert rate == 16000 and np.array_equal(samples, pcm.to_int16(audio))
    with pytest.raises(ValueError):
        pcm.wav_header(0)
