"""The remote TTS backend: ``POST /audio/speech`` on an OpenAI-compatible server.

Each clause goes up with ``voice`` (``auto`` sends ``alloy``, the API's default voice,
which servers map to one of theirs) and ``speed`` (sent when it is not 1.0), and comes
back as ``tts.response_format``: ``pcm`` (the API's raw 24 kHz 16-bit mono) or ``wav``
(its own rate, read from the header; a streamed WAV's unknown length is fine). Audio is
handed on as it arrives, so a server that streams gives the first audio before it has
made the rest. A request that fails before its first byte of audio is retried
(``tts.retries``) when that can help; after it, the clause ends with a RemoteError: audio
the user heard is never asked for again. ``should_stop()`` is checked per received
block, and closing the response closes the connection.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from engine.audio.pcm import from_pcm16
from engine.backends.base import LoadRequest, Progress, TtsChunk, TtsModel, no_progress
from engine.backends.remote import Endpoint, RemoteClient, Retrier
from engine.config import TtsConfig
from engine.errors import ConfigError, DeviceError
from engine.measures import Figure
from engine.backends.voices import Voice, VoiceList

PCM_RATE = 24000  # the API's "pcm": 24 kHz, 16-bit little-endian, mono
FORMATS = ("pcm", "wav")
DEFAULT_VOICE = "alloy"
#: The voices OpenAI documents for /audio/speech; other servers have names of their own.
OPENAI_VOICES = ("alloy", "ash", "ballad", "coral", "echo", "fable", "nova", "onyx", "sage",
                 "shimmer", "verse")
MIN_CHUNK_S = 0.05  # hand audio on in blocks of at least this much (but never hold the tail)


def load(request: LoadRequest, progress: Progress = no_progress) -> RemoteTts:
    """A client of the server the ``tts`` section names, for ``request.model``."""
    if request.device.kind != "remote":
        raise DeviceError(f"tts backend 'openai' cannot run on {request.device}; it runs on "
                          "remote (a server named by tts.base_url)")
    options = request.options_as(TtsConfig)
    fmt = options.response_format.strip().lower()
    if fmt not in FORMATS:
        raise ConfigError(f"'tts.response_format' = {fmt!r} is not supported; use "
                          f"{' or '.join(FORMATS)}")
    endpoint = Endpoint.of("tts", options)
    progress(None, f"using {request.model} on {endpoint.base_url}")
    return RemoteTts(RemoteClient(endpoint), request.model, fmt)


class PcmDecoder:
    """Raw 16-bit little-endian mono bytes -> float32 blocks, whatever the bytes' split."""

    def __init__(self, rate: int = PCM_RATE) -> None:
        self.rate = rate
        self._rest = b""

    def feed(self, data: bytes) -> np.ndarray:
        data = self._rest + data
        usable = len(data) - len(data) % 2
        self._rest = data[usable:]
        return from_pcm16(data[:usable])


class WavDecoder:
    """A (possibly streamed) WAV file -> float32 mono blocks: reads the RIFF header as it
    arrives (16-bit PCM or 32-bit float, any rate and channel count), then the data."""

    def __init__(self) -> None:
        self._buffer = b""
        self._in_data = False
        self.rate = 0
        self._channels = 1
        self._format = 1
        self._width = 2
        self._rest = b""

    def feed(self, data: bytes) -> np.ndarray:
        if not self._in_data:
            self._buffer += data
            data = self._header()
            if not self._in_data:
                return np.zeros(0, np.float32)
        data = self._rest + data
        frame = self._width * self._channels
        usable = len(data) - len(data) % frame
        self._rest = data[usable:]
        if self._format == 3:
            samples = np.frombuffer(data[:usable], dtype="<f4").astype(np.float32)
        else:
            samples = from_pcm16(data[:usable])
        if self._channels > 1:
            samples = samples.reshape(-1, self._channels).mean(axis=1)
        return samples

    def _header(self) -> bytes:
        """Parse what the buffer holds of the header; the data bytes after it, once found."""
        buf = self._buffer
        if len(buf) < 12:
            return b""
        if buf[:4] != b"RIFF" or buf[8:12] != b"WAVE":
            raise ValueError("the audio is not a WAV file (no RIFF/WAVE header)")
        pos = 12
        while len(buf) >= pos + 8:
            chunk, size = buf[pos:pos + 4], struct.unpack("<I", buf[pos + 4:pos + 8])[0]
            if chunk == b"data":
                if not self.rate:
                    raise ValueError("the WAV file has no fmt chunk before its data")
                self._in_data = True
                self._buffer = b""
                return buf[pos + 8:]
            if len(buf) < pos + 8 + size:
                return b""
            if chunk == b"fmt ":
                fmt, channels, rate = struct.unpack("<HHI", buf[pos + 8:pos + 16])
                bits = struct.unpack("<H", buf[pos + 22:pos + 24])[0]
                if fmt == 0xFFFE and size >= 26:  # WAVE_FORMAT_EXTENSIBLE: the real format
                    fmt = struct.unpack("<H", buf[pos + 32:pos + 34])[0]
                if (fmt, bits) not in ((1, 16), (3, 32)) or channels < 1:
                    raise ValueError(f"unsupported WAV audio (format {fmt}, {bits} bits): "
                                     "Parley reads 16-bit PCM and 32-bit float")
                self._format, self._channels, self.rate = fmt, channels, rate
                self._width = bits // 8
            pos += 8 + size + (size % 2)
        return b""


class RemoteTts(TtsModel):
    """A text-to-speech model on a server, shared by every pipeline unit."""

    actual_device = "remote"

    def __init__(self, client: RemoteClient, model: str, response_format: str = "pcm") -> None:
        self.client = client
        self.model = model
        self.response_format = response_format
        self.endpoint = client.endpoint
        self.sample_rate = PCM_RATE

    def voices(self) -> VoiceList:
        """OpenAI's documented voice names; the server decides which it really has, and
        any other name is passed on as typed (``any_name``)."""
        return VoiceList((Voice("auto", f"auto ({DEFAULT_VOICE})"),
                          *(Voice(n, n) for n in OPENAI_VOICES)), any_name=True,
                         note=f"{self.endpoint.base_url} decides its voices: OpenAI's documented "
                              "names are listed, and any other name is sent as typed")

    def check_voice(self, voice: str) -> None:
        """The server decides which voices it has: any name is passed on."""

    def synthesize(self, text: str, should_stop: Callable[[], bool], voice: str = "auto",
                   speed: float = 1.0) -> Iterator[TtsChunk]:
        """Speak ``text`` on the server; audio is yielded as it arrives (a request's first
        chunk with the network's share of its time, ``figures``)."""
        retrier = Retrier(self.endpoint, should_stop)
        while True:
            if should_stop():
                return
            produced = False
            try:
                for chunk in self._stream(text, should_stop, voice, speed):
                    produced = True
                    yield chunk
                return
            except Exception as exc:  # noqa: BLE001 - every failure is translated for the user
                error = self.client.error(exc, self.model)
                if produced:
                    raise self.client.cut(f"stopped sending speech audio midway ({error.kind})",
                                          False) from None
                if retrier.again(error):
                    continue
                raise error from None

    def _stream(self, text: str, should_stop: Callable[[], bool], voice: str,
                speed: float) -> Iterator[TtsChunk]:
        kwargs: dict[str, Any] = {"model": self.model, "input": text,
                  "voice": DEFAULT_VOICE if voice in ("", "auto") else voice,
                  "response_format": self.response_format}
        if speed != 1.0:
            kwargs["speed"] = speed
        api = self.client.openai.audio.speech.with_streaming_response
        with api.create(**kwargs) as response:
            figures = self._figures()
            decoder = PcmDecoder() if self.response_format == "pcm" else WavDecoder()
            pending: list[np.ndarray] = []
            held = 0
            for data in response.iter_bytes():
                if should_stop():
                    return  # leaving the block closes the response and its connection
                samples = decoder.feed(data)
                if not samples.size:
                    continue
                pending.append(samples)
                held += samples.size
                if held >= MIN_CHUNK_S * decoder.rate:
                    yield TtsChunk(np.concatenate(pending), decoder.rate, figures)
                    figures, pending, held = {}, [], 0
            if pending:
                yield TtsChunk(np.concatenate(pending), decoder.rate, figures)
            if self.response_format == "wav" and not decoder.rate:
                raise ValueError("the WAV answer ended inside its header")

    def _figures(self) -> dict[Figure, float]:
        timing = self.client.timing()
        figures: dict[Figure, float] = {}
        if timing is not None:
            if timing.network_s is not None:
                figures[Figure.TTS_NETWORK_S] = timing.network_s
            if timing.headers_s is not None:
                figures[Figure.TTS_HEADERS_S] = timing.headers_s
        return figures

    def close(self) -> None:
        self.client.close()

