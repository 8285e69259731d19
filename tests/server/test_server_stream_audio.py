"""StreamSource and StreamSink: a network client's audio in and out of a pipeline unit."""

from __future__ import annotations

import time

import numpy as np
import pytest

from engine.audio.base import InputMarker
from engine.audio.pcm import from_pcm16 as pcm16_to_float
from engine.audio.pcm import to_pcm16 as float_to_pcm16
from engine.server.stream_audio import StreamSink, StreamSource


class Clock:
    """A settable clock for the virtual playout tests."""

    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def sine(freq: float, seconds: float, rate: int, amp: float = 0.5) -> np.ndarray:
    t = np.arange(round(seconds * rate)) / rate
    return (amp * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def drain(source: StreamSource) -> list:
    blocks = []
    while (block := source.read(0.0)) is not None:
        blocks.append(block)
    return blocks


def peak_hz(audio: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(audio * np.hanning(audio.size)))
    return float(np.argmax(spectrum) * rate / audio.size)


# ---------------------------------------------------------------------- PCM16
def test_pcm16_is_little_endian_signed_and_round_trips():
    assert float_to_pcm16(np.array([1 / 32767], np.float32)) == b"\x01\x00"
    assert float_to_pcm16(np.array([-1.0, 2.0], np.float32)) == b"\x01\x80\xff\x7f"  # clipped
    audio = sine(440, 0.1, 24000)
    assert np.max(np.abs(pcm16_to_float(float_to_pcm16(audio)) - audio)) < 1e-4


def test_odd_length_pcm16_is_refused():
    with pytest.raises(ValueError, match="odd number of bytes"):
        pcm16_to_float(b"\x00\x01\x02")
    with pytest.raises(ValueError):
        StreamSource().push_pcm16(b"\x00")


# ---------------------------------------------------------------------- source
def test_source_resamples_24k_to_16k_keeping_length_and_pitch():
    source = StreamSource()
    pcm = float_to_pcm16(sine(440, 1.0, 24000))
    for at in range(0, len(pcm), 960):  # 20 ms appends, as clients send them
        assert source.push_pcm16(pcm[at:at + 960])
    source.commit()  # flushes the resampler's tail
    blocks = drain(source)
    assert blocks[-1].marker is InputMarker.COMMIT
    audio = np.concatenate([b.samples for b in blocks if b.marker is None])
    assert abs(audio.size - 16000) <= 2
    assert audio.dtype == np.float32
    assert abs(peak_hz(audio, 16000) - 440) < 3
    assert abs(source.received_s - 1.0) < 1e-9


def test_source_stamps_blocks_with_arrival_time_minus_duration():
    clock = Clock(50.0)
    source = StreamSource(clock=clock)
    source.push_pcm16(float_to_pcm16(sine(300, 0.2, 24000)))
    source.commit()
    first = drain(source)[0]
    assert first.t_start == pytest.approx(50.0 - first.samples.size / 16000)
    assert source.t_first == first.t_start


def test_source_refuses_audio_beyond_its_budget_and_counts_it():
    source = StreamSource(max_buffer_s=0.5)
    assert source.push_pcm16(float_to_pcm16(np.zeros(int(0.4 * 24000), np.float32)))
    assert source.buffered_s == pytest.approx(0.4, abs=0.05)  # less the resampler delay
    assert not source.push_pcm16(float_to_pcm16(np.zeros(int(0.2 * 24000), np.float32)))
    assert source.overflow_count == 1
    drain(source)  # the pipeline caught up: there is room again
    assert source.buffered_s == 0
    assert source.push_pcm16(float_to_pcm16(np.zeros(int(0.2 * 24000), np.float32)))


def test_source_refuses_appends_beyond_its_block_count():
    source = StreamSource(max_blocks=3)
    chunk = float_to_pcm16(np.zeros(480, np.float32))
    accepted = [source.push_pcm16(chunk) for _ in range(6)]
    assert source.buffered_blocks == 3 and source.buffer_capacity == 3
    assert accepted.count(False) == source.overflow_count >= 1


def test_markers_travel_in_order_and_clear_drops_audio_queued_after_the_last_commit():
    seen = []
    source = StreamSource(on_marker=seen.append)
    source.push_pcm16(float_to_pcm16(sine(200, 0.1, 24000)))
    source.commit()
    source.push_pcm16(float_to_pcm16(sine(200, 0.1, 24000)))  # dropped by the clear below
    source.clear()
    kinds = [b.marker for b in drain(source)]
    assert kinds[-2:] == [InputMarker.COMMIT, InputMarker.CLEAR]
    assert all(k is None for k in kinds[:-2]) and len(kinds) > 2
    assert seen == [InputMarker.COMMIT, InputMarker.CLEAR]  # called as each was read


def test_marker_callback_runs_when_the_marker_is_read_not_when_sent():
    seen = []
    source = StreamSource(on_marker=seen.append)
    source.commit()
    assert seen == []
    assert source.read(0.0).marker is InputMarker.COMMIT
    assert seen == [InputMarker.COMMIT]


def test_read_times_out_and_close_ends_the_source():
    source = StreamSource()
    start = time.monotonic()
    assert source.read(0.05) is None
    assert 0.04 <= time.monotonic() - start < 1.0
    assert not source.finished
    source.push_pcm16(float_to_pcm16(np.zeros(480, np.float32)))
    source.close()
    assert source.finished
    assert source.read(0.0) is None  # queued audio is dropped with the client
    source.push_pcm16(float_to_pcm16(np.zeros(480, np.float32)))
    assert source.buffered_blocks == 0


def test_level_is_the_rms_of_the_latest_block():
    source = StreamSource()
    assert source.level == 0.0
    source.push_pcm16(float_to_pcm16(np.full(2400, 0.25, np.float32)))
    assert source.level == pytest.approx(0.25, abs=0.02)


# ---------------------------------------------------------------------- sink
def test_sink_resamples_to_24k_pcm16_in_pieces():
    sent = []
    sink = StreamSink(lambda turn, pcm: sent.append((turn, pcm)), max_piece_s=0.25)
    sink.open()
    sink.play(sine(440, 1.0, 22050), 22050, 7)
    assert {turn for turn, _ in sent} == {7}
    assert max(len(pcm) for _, pcm in sent) <= 0.25 * 24000 * 2
    audio = pcm16_to_float(b"".join(pcm for _, pcm in sent))
    assert abs(audio.size - 24000) <= 2
    assert abs(peak_hz(audio, 24000) - 440) < 3
    assert sink.samples_sent == audio.size


def test_sink_playout_clock_queues_turns_and_says_when_they_are_heard():
    clock = Clock(10.0)
    sink = StreamSink(lambda turn, pcm: None, clock=clock)
    sink.play(np.zeros(24000, np.float32), 24000, 1)  # 1 s
    assert sink.first_heard(1) == 10.0 and sink.is_playing
    clock.t = 10.5
    sink.play(np.zeros(24000, np.float32), 24000, 2)  # starts when the first one ends
    assert sink.first_heard(2) == pytest.approx(11.0)
    clock.t = 11.99
    assert sink.is_playing
    clock.t = 12.01
    assert not sink.is_playing
    assert sink.first_heard(3) is None


def test_sink_flush_returns_the_unheard_samples_and_stops_playing():
    clock = Clock(0.0)
    sink = StreamSink(lambda turn, pcm: None, clock=clock)
    sink.play(np.zeros(24000, np.float32), 24000, 1)
    clock.t = 0.25
    assert sink.flush() == 18000
    assert not sink.is_playing
    assert sink.flush() == 0
    sink.play(np.zeros(2400, np.float32), 24000, 2)  # the next reply plays at once
    assert sink.first_heard(2) == 0.25


def test_sink_wait_idle_on_the_real_clock():
    sink = StreamSink(lambda turn, pcm: None)
    sink.play(np.zeros(2400, np.float32), 24000, 1)  # 100 ms
    assert not sink.wait_idle(0.0)
    assert sink.wait_idle(2.0)
    assert not sink.is_playing


def test_closed_sink_sends_nothing():
    sent = []
    sink = StreamSink(lambda turn, pcm: sent.append(pcm))
    sink.close()
    sink.play(np.ones(100, np.float32), 24000, 1)
    assert sent == [] and not sink.is_playing
