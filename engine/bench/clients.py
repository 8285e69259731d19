"""Realtime clients for ``parley-cli bench serve``: recordings streamed at real time.

A client speaks the OpenAI Realtime protocol (GA event names) over one WebSocket: it
streams a recording as base64 PCM16 at 24 kHz in 40 ms ``input_audio_buffer.append``
chunks, each sent when a microphone would have finished capturing it, then a tail of
silence, and waits for the reply. The server does turn-taking (server VAD) and answers
on its own.

Voice-to-voice is measured on the client's clock: the arrival of the first
``response.output_audio.delta`` of the reply minus the moment the client sent the chunk
holding the last sample of speech. Where speech ends in the recording is what the
server's VAD said: the last ``input_audio_buffer.speech_stopped``'s ``audio_end_ms`` (in
Parley the VAD's end of speech, without the silence it then waited for). Only where a
server sends none (or a value outside the streamed audio) is it found in the recording
itself (``speech_end``: the last 20 ms frame within 30 dB of the loudest one), which
takes trailing noise for speech: jfk.flac ends in half a second of crowd noise after
"country" (the energy end is 11.0 s, Parley's VAD says 10.59 s, Whisper's word
timestamps 10.48 s). Both are kept in the result, with which one was used.

The reply is the first response whose audio starts after the end of speech; a response
already speaking before then answered an earlier part of the recording and is counted
(``early_responses``) but not timed. ``TurnTracker`` holds all of that and touches no
network, so it is tested with made-up events; ``RealtimeClient`` is the aiohttp glue.
aiohttp is what the server itself needs (``parley[server]``), so the benchmark adds no
dependency.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from engine.audio.pcm import frame_rms, to_pcm16
from engine.errors import ParleyError
from engine.runtime.stats import percentile

if TYPE_CHECKING:
    import aiohttp  # imported where a client connects: the bench runs without the server extra

CLIENT_RATE = 24000  # the Realtime API's audio/pcm rate
CHUNK_S = 0.04
SILENCE_TAIL_S = 1.5
FRAME_S = 0.02
BELOW_PEAK_DB = 30.0


class BenchRunError(ParleyError):
    """The benchmark could not measure: a server that did not start, a client error, a
    timeout. Exit status 1 (bad arguments are a ConfigError, status 2)."""

    exit_code = 1


class SessionRefused(BenchRunError):
    """The server had no unit for this client: an HTTP 503 before the WebSocket upgrade
    (``how`` = ``http_503``, with the seconds of its ``Retry-After`` if it sent one), or
    after it an ``error`` event with code ``session_limit_reached`` and / or close code
    1013 (``how`` = ``session_limit_reached``; no Retry-After)."""

    def __init__(self, message: str, how: str, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.how = how
        self.retry_after_s = retry_after_s


REFUSED_CODE = "session_limit_reached"  # the error code of a full server
TRY_AGAIN_LATER = 1013  # its close code


def retry_after(value: str | None) -> float | None:
    """A ``Retry-After`` header in seconds (the delay-seconds form); None if absent or
    an HTTP date (the server's clock is not this one's)."""
    if value is None or not value.strip().isdigit():
        return None
    return float(value.strip())


# -- the recording ---------------------------------------------------------------------

def speech_end(audio: np.ndarray, rate: int, frame_s: float = FRAME_S,
               below_peak_db: float = BELOW_PEAK_DB) -> int:
    """The sample index just after the recording's speech: the end of the last
    ``frame_s`` frame whose RMS is within ``below_peak_db`` of the loudest frame's.

    A plain energy threshold relative to the recording's own peak, with no VAD model, so
    it is the same for every server. A partial last frame counts as a frame. Digital
    silence throughout returns 0.
    """
    audio = np.asarray(audio, dtype=np.float32)
    frame = max(1, round(rate * frame_s))
    if audio.size == 0:
        return 0
    loudness = frame_rms(audio, frame)
    peak = float(loudness.max())
    if peak <= 0.0:
        return 0
    loud = np.flatnonzero(loudness >= peak * 10 ** (-below_peak_db / 20))
    return int(min(audio.size, (loud[-1] + 1) * frame))


@dataclass(frozen=True)
class Utterance:
    """A recording as a client streams it: PCM16 at ``CLIENT_RATE`` with a silent tail."""

    name: str
    pcm: bytes  # the recording, then ``tail_s`` of digital silence
    speech_samples: int  # samples of the recording itself
    speech_end_sample: int  # ``speech_end`` of the recording
    rate: int = CLIENT_RATE

    @classmethod
    def from_audio(cls, name: str, audio: np.ndarray, rate: int = CLIENT_RATE,
                   tail_s: float = SILENCE_TAIL_S) -> Utterance:
        audio = np.asarray(audio, dtype=np.float32)
        end = speech_end(audio, rate)
        if end == 0:
            from engine.errors import AudioInputError

            raise AudioInputError(f"{name} is silent: there is no speech to stream")
        tail = np.zeros(round(tail_s * rate), np.float32)
        return cls(name, to_pcm16(np.concatenate([audio, tail])), int(audio.size), end, rate)

    @classmethod
    def load(cls, path: str | Path, tail_s: float = SILENCE_TAIL_S) -> Utterance:
        from engine.audio.decode import load_audio

        return cls.from_audio(str(path), load_audio(path, CLIENT_RATE), CLIENT_RATE, tail_s)

    @property
    def samples(self) -> int:
        return len(self.pcm) // 2

    @property
    def duration_s(self) -> float:
        return self.samples / self.rate

    @property
    def speech_end_s(self) -> float:
        return self.speech_end_sample / self.rate

    def chunk_samples(self, chunk_s: float = CHUNK_S) -> int:
        return max(1, round(chunk_s * self.rate))

    def chunks(self, chunk_s: float = CHUNK_S) -> list[bytes]:
        """The PCM in ``chunk_s`` pieces (the last may be shorter)."""
        step = 2 * self.chunk_samples(chunk_s)
        return [self.pcm[i:i + step] for i in range(0, len(self.pcm), step)]

    def speech_end_chunk(self, chunk_s: float = CHUNK_S) -> int:
        """Index of the chunk that holds the last speech sample."""
        return max(0, self.speech_end_sample - 1) // self.chunk_samples(chunk_s)


def deadlines(start: float, chunks: list[bytes], rate: int = CLIENT_RATE) -> list[float]:
    """When to send each chunk: when a microphone would have captured all of it, i.e.
    ``start`` plus the audio up to the chunk's end."""
    out, samples = [], 0
    for chunk in chunks:
        samples += len(chunk) // 2
        out.append(start + samples / rate)
    return out


# -- what the server said --------------------------------------------------------------

@dataclass
class Response:
    """One server response as the client saw it (times are ``perf_counter`` seconds)."""

    id: str
    created_t: float | None = None
    first_audio_t: float | None = None
    audio_bytes: int = 0
    done_t: float | None = None
    status: str | None = None
    reason: str | None = None
    text: str = ""  # the reply's transcript, from response.done
    server_v2v_s: float | None = None  # Parley's own measure (response.parley), if sent

    @property
    def audio_s(self) -> float:
        return self.audio_bytes / 2 / CLIENT_RATE


@dataclass
class TurnTracker:
    """Every server event of one connection, with its arrival time; no network here."""

    responses: dict[str, Response] = field(default_factory=dict)
    transcripts: list[str] = field(default_factory=list)
    speech_stopped_ms: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    error_codes: list[str | None] = field(default_factory=list)  # one per ``errors`` entry
    session_created: bool = False
    session_updated: bool = False

    def _response(self, rid: str) -> Response:
        if rid not in self.responses:
            self.responses[rid] = Response(rid)
        return self.responses[rid]

    def feed(self, t: float, event: dict) -> None:
        kind = event.get("type")
        if kind == "error":
            err = event.get("error") or {}
            code = f" ({err['code']})" if err.get("code") else ""
            self.errors.append(f"{err.get('type', 'error')}{code}: {err.get('message', event)}")
            self.error_codes.append(err.get("code") if isinstance(err.get("code"), str) else None)
        elif kind == "session.created":
            self.session_created = True
        elif kind == "session.updated":
            self.session_updated = True
        elif kind == "input_audio_buffer.speech_stopped":
            if isinstance(event.get("audio_end_ms"), int | float):
                self.speech_stopped_ms.append(int(event["audio_end_ms"]))
        elif kind == "conversation.item.input_audio_transcription.completed":
            self.transcripts.append(str(event.get("transcript", "")))
        elif kind == "response.created":
            response = self._response(str((event.get("response") or {}).get("id", "")))
            response.created_t = response.created_t or t
        elif kind == "response.output_audio.delta":
            response = self._response(str(event.get("response_id", "")))
            if response.first_audio_t is None:
                response.first_audio_t = t
            try:
                response.audio_bytes += len(base64.b64decode(event.get("delta", ""), validate=True))
            except (binascii.Error, ValueError, TypeError):
                self.errors.append("response.output_audio.delta carries audio that is not base64")
                self.error_codes.append(None)
        elif kind == "response.done":
            body = event.get("response") or {}
            response = self._response(str(body.get("id", "")))
            response.done_t = t
            response.status = body.get("status")
            details = body.get("status_details") or {}
            response.reason = details.get("reason") if isinstance(details, dict) else None
            response.text = _transcript(body)
            parley = body.get("parley")
            v2v = parley.get("voice_to_voice_s") if isinstance(parley, dict) else None
            response.server_v2v_s = v2v if isinstance(v2v, int | float) else None

    def reply(self, speech_end_t: float) -> Response | None:
        """The first response whose audio started after ``speech_end_t``."""
        late = [(r.first_audio_t, r) for r in self.responses.values()
                if r.first_audio_t is not None and r.first_audio_t >= speech_end_t]
        return min(late, key=lambda pair: pair[0])[1] if late else None

    def early_responses(self, speech_end_t: float) -> int:
        return sum(1 for r in self.responses.values()
                   if r.first_audio_t is not None and r.first_audio_t < speech_end_t)

    def pending(self) -> list[Response]:
        return [r for r in self.responses.values() if r.done_t is None]

    def complete(self, speech_end_t: float) -> bool:
        """The reply is done and no other response is still running."""
        reply = self.reply(speech_end_t)
        return reply is not None and reply.done_t is not None and not self.pending()


def _transcript(response: dict) -> str:
    """The spoken text of a ``realtime.response``: its output items' audio transcripts."""
    texts = []
    for item in response.get("output") or []:
        for part in (item.get("content") or []) if isinstance(item, dict) else []:
            if isinstance(part, dict) and isinstance(part.get("transcript"), str):
                texts.append(part["transcript"])
    return " ".join(texts).strip()


@dataclass(frozen=True)
class TurnResult:
    """One client's turn: what ``bench serve`` reports."""

    client: int
    voice_to_voice_s: float
    transcript: str  # what the server heard (input transcription)
    reply: str  # what it said (the reply's transcript)
    reply_audio_s: float
    early_responses: int
    speech_end_s: float  # where speech ends in the recording, as used (seconds)
    speech_end_source: str  # "server_vad" (speech_stopped.audio_end_ms) or "energy"
    energy_speech_end_s: float  # ``speech_end`` of the recording
    server_voice_to_voice_s: float | None  # the server's own figure (response.done.parley)
    late_chunks: int  # chunks sent more than one chunk late (an overloaded client)

    def as_dict(self) -> dict:
        return {"client": self.client, "voice_to_voice_s": round(self.voice_to_voice_s, 4),
                "transcript": self.transcript, "reply": self.reply,
                "reply_audio_s": round(self.reply_audio_s, 3), "early_responses": self.early_responses,
                "speech_end_s": round(self.speech_end_s, 3), "speech_end_source": self.speech_end_source,
                "energy_speech_end_s": round(self.energy_speech_end_s, 3),
                "server_voice_to_voice_s": self.server_voice_to_voice_s,
                "late_chunks": self.late_chunks}


def latency_summary(values: list[float]) -> dict:
    """n, p50, p95, min, max (seconds, rounded) of voice-to-voice samples."""
    def r(value: float | None) -> float | None:
        return None if value is None else round(value, 4)

    return {"n": len(values), "p50_s": r(percentile(values, 50)), "p95_s": r(percentile(values, 95)),
            "min_s": r(min(values)) if values else None, "max_s": r(max(values)) if values else None}


def speech_end_time(tracker: TurnTracker, utterance: Utterance, sent: list[float],
                    chunk_s: float = CHUNK_S, offset_s: float = 0.0) -> tuple[float, float, str]:
    """When the chunk holding the last speech sample was sent (``sent[i]``: when chunk i
    went out): (that time, the end of speech in seconds, where it came from).

    The end of speech is the server's last ``speech_stopped.audio_end_ms`` when it lies
    inside the streamed audio, else the recording's ``speech_end``. ``offset_s``: where
    this recording starts on the session's audio clock (not 0 for a second recording in
    one session: the server counts from the session's first sample, gaps included).
    """
    step = utterance.chunk_samples(chunk_s)
    if tracker.speech_stopped_ms:
        sample = round((tracker.speech_stopped_ms[-1] / 1000 - offset_s) * utterance.rate)
        if 0 < sample <= utterance.samples:
            index = min(len(sent) - 1, (sample - 1) // step)
            return sent[index], sample / utterance.rate, "server_vad"
    index = min(len(sent) - 1, utterance.speech_end_chunk(chunk_s))
    return sent[index], utterance.speech_end_s, "energy"


def turn_result(client: int, tracker: TurnTracker, utterance: Utterance, sent: list[float],
                late_chunks: int = 0, chunk_s: float = CHUNK_S, offset_s: float = 0.0) -> TurnResult:
    """The result of a complete turn (``tracker.complete`` at ``speech_end_time``)."""
    speech_end_t, speech_end_s, source = speech_end_time(tracker, utterance, sent, chunk_s, offset_s)
    reply = tracker.reply(speech_end_t)
    if reply is None or reply.first_audio_t is None:
        raise BenchRunError(f"client {client}: no reply audio after the end of speech")
    if reply.status != "completed":
        why = f" ({reply.reason})" if reply.reason else ""
        raise BenchRunError(f"client {client}: the reply ended {reply.status}{why}, not completed")
    return TurnResult(client, reply.first_audio_t - speech_end_t, " ".join(tracker.transcripts).strip(),
                      reply.text, reply.audio_s, tracker.early_responses(speech_end_t),
                      speech_end_s, source, utterance.speech_end_s, reply.server_v2v_s, late_chunks)


# -- the network -----------------------------------------------------------------------

#: Sent once after ``session.created`` (the client waits for ``session.updated``): audio
#: in and out as PCM16 at 24 kHz. Turn detection is left as the server has it (its own
#: server VAD, with the settings ``serve`` was started with).
SESSION_UPDATE = {
    "type": "session.update",
    "session": {
        "type": "realtime",
        "output_modalities": ["audio"],
        "audio": {"input": {"format": {"type": "audio/pcm", "rate": CLIENT_RATE}},
                  "output": {"format": {"type": "audio/pcm", "rate": CLIENT_RATE}}},
    },
}


class RealtimeClient:
    """One WebSocket connection to ``/v1/realtime``; ``async with`` it.

    ``clock`` is ``time.perf_counter`` (the tests may pass another); every received event
    goes to ``tracker`` with its arrival time.
    """

    def __init__(self, url: str, client: int = 0, connect_timeout: float = 30.0,
                 session_update: dict | None = SESSION_UPDATE,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.url = url
        self.client = client
        self.connect_timeout = connect_timeout
        self.session_update = session_update
        self.clock = clock
        self.tracker = TurnTracker()
        self._session: aiohttp.ClientSession | None = None
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._reader: asyncio.Task | None = None
        self._changed = asyncio.Event()
        self._closed: str | None = None
        self.close_code: int | None = None  # the server's, once it closed the socket
        self.stream_origin: float | None = None  # when the first stream of the session began

    async def __aenter__(self) -> RealtimeClient:
        await self.connect()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    def _fail(self, what: str) -> BenchRunError:
        return BenchRunError(f"client {self.client}: {what}")

    async def connect(self) -> None:
        """Open the socket, wait for ``session.created``, update the session.

        A full server is a ``SessionRefused`` (a BenchRunError): see that class."""
        await self._open()
        self._reader = asyncio.create_task(self._read())
        try:
            await self.wait_until(lambda: self.tracker.session_created, self.connect_timeout,
                                  "session.created")
        except BenchRunError as exc:
            if REFUSED_CODE in self.tracker.error_codes or self.close_code == TRY_AGAIN_LATER:
                await self.close()
                raise SessionRefused(str(exc), REFUSED_CODE) from None
            raise
        if self.session_update is not None:
            await self.send(self.session_update)
            await self.wait_until(lambda: self.tracker.session_updated, self.connect_timeout,
                                  "session.updated")

    async def _open(self) -> None:
        """The WebSocket connection itself; an HTTP 503 is a ``SessionRefused``."""
        import aiohttp

        self._session = aiohttp.ClientSession()
        try:
            # aiohttp declares ClientWSTimeout's fields with attr.ib(type=...), which
            # pyright does not read as parameters.
            timeout = aiohttp.ClientWSTimeout(ws_close=5.0)  # pyright: ignore[reportCallIssue]
            self._ws = await self._session.ws_connect(self.url, timeout=timeout, max_msg_size=0,
                                                      autoping=True)
        except aiohttp.WSServerHandshakeError as exc:
            await self.close()
            if exc.status == 503:
                wait = retry_after((exc.headers or {}).get("Retry-After"))
                raise SessionRefused(f"client {self.client}: the server answered 503 (full)",
                                     "http_503", wait) from None
            raise self._fail(f"cannot connect to {self.url}: HTTP {exc.status} {exc.message}") from None
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            await self.close()
            raise self._fail(f"cannot connect to {self.url}: {exc}") from None

    async def _read(self) -> None:
        import aiohttp

        ws = self._socket()
        try:
            async for msg in ws:
                if msg.type is aiohttp.WSMsgType.TEXT:
                    try:
                        event = json.loads(msg.data)
                    except ValueError:
                        self.tracker.errors.append(f"a message that is not JSON: {msg.data[:80]!r}")
                    else:
                        if isinstance(event, dict):
                            self.tracker.feed(self.clock(), event)
                elif msg.type is aiohttp.WSMsgType.ERROR:
                    self._closed = f"the connection failed: {ws.exception()}"
                    break
                self._changed.set()
        finally:
            self.close_code = ws.close_code
            if self._closed is None:
                self._closed = f"the server closed the connection (code {ws.close_code})"
            self._changed.set()

    async def wait_until(self, done: Callable[[], bool], timeout: float, what: str) -> None:
        """Until ``done()``; a server error, a closed socket or the timeout raise."""
        deadline = self.clock() + timeout
        while True:
            if self.tracker.errors:
                raise self._fail(f"server error: {self.tracker.errors[0]}")
            if done():
                return
            if self._closed is not None:
                raise self._fail(f"{self._closed} while waiting for {what}")
            left = deadline - self.clock()
            if left <= 0:
                raise self._fail(f"timed out after {timeout:.0f} s waiting for {what}")
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except TimeoutError:
                pass

    async def send(self, event: dict) -> None:
        if self._closed is not None:
            raise self._fail(self._closed)
        try:
            await self._socket().send_str(json.dumps(event))
        except (ConnectionError, RuntimeError) as exc:
            raise self._fail(f"cannot send {event.get('type')}: {exc}") from None

    async def stream(self, utterance: Utterance, start: float,
                     chunk_s: float = CHUNK_S) -> tuple[list[float], int]:
        """Send ``utterance`` paced by ``deadlines`` from ``start`` (a ``clock`` time).

        Returns (when each chunk was sent, how many went out more than one chunk late).
        """
        if self.stream_origin is None:
            self.stream_origin = start
        chunks = utterance.chunks(chunk_s)
        sent, late = [], 0
        for chunk, due in zip(chunks, deadlines(start, chunks, utterance.rate)):
            wait = due - self.clock()
            if wait > 0:
                await asyncio.sleep(wait)
            elif -wait > chunk_s:
                late += 1
            if self.tracker.errors:
                raise self._fail(f"server error: {self.tracker.errors[0]}")
            await self.send({"type": "input_audio_buffer.append",
                             "audio": base64.b64encode(chunk).decode("ascii")})
            sent.append(self.clock())
        return sent, late

    async def turn(self, utterance: Utterance, start: float, timeout: float,
                   chunk_s: float = CHUNK_S) -> TurnResult:
        """Stream the utterance from ``start``, wait (``timeout`` s after the stream's end)
        for the reply to be done, and measure it. A later turn of the session is measured
        from its own start (``stream_origin``)."""
        sent, late = await self.stream(utterance, start, chunk_s)
        offset = start - (self.stream_origin if self.stream_origin is not None else start)

        def done() -> bool:
            end_t = speech_end_time(self.tracker, utterance, sent, chunk_s, offset)[0]
            return self.tracker.complete(end_t)

        await self.wait_until(done, timeout, f"the reply to {Path(utterance.name).name}")
        return turn_result(self.client, self.tracker, utterance, sent, late, chunk_s, offset)

    def _socket(self) -> aiohttp.ClientWebSocketResponse:
        if self._ws is None:
            raise self._fail("not connected (connect first)")
        return self._ws

    async def close(self) -> None:
        if self._ws is not None and not self._ws.closed:
            await self._ws.close()
        if self._reader is not None:
            try:
                await asyncio.wait_for(self._reader, 5.0)
            except (TimeoutError, asyncio.CancelledError):
                self._reader.cancel()
        if self._session is not None:
            await self._session.close()
        self._ws = self._session = self._reader = None


async def concurrent_turns(url: str, utterance: Utterance, clients: int, timeout: float,
                           connect_timeout: float = 30.0, chunk_s: float = CHUNK_S,
                           session_update: dict | None = SESSION_UPDATE,
                           before_close: Callable[[], object] | None = None,
                           client_type: type[RealtimeClient] | None = None) -> list[TurnResult]:
    """``clients`` connections at once, each streaming ``utterance`` from the same instant.

    All connect first; the streams start together 0.2 s after the last one is ready.
    ``before_close()`` (if given) runs after every reply is done and before any socket
    closes, while every unit is still held (``bench serve`` samples memory there). Any
    client's failure fails the lot (the others are closed). ``client_type`` is the client
    class (default ``RealtimeClient``; ``engine.bench.openai_client`` has the openai one).
    """
    make = client_type or RealtimeClient
    conns = [make(url, i, connect_timeout, session_update) for i in range(clients)]
    try:
        await asyncio.gather(*(c.connect() for c in conns))
        start = time.perf_counter() + 0.2
        results = await asyncio.gather(*(c.turn(utterance, start, timeout, chunk_s) for c in conns))
        if before_close is not None:
            before_close()
        return list(results)
    finally:
        await asyncio.gather(*(c.close() for c in conns), return_exceptions=True)


async def get_json(url: str, timeout: float = 10.0) -> dict:
    """GET ``url`` and parse its JSON body (``/v1/pool``)."""
    import aiohttp

    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session:
            async with session.get(url) as reply:
                reply.raise_for_status()
                return await reply.json(content_type=None)
    except (TimeoutError, aiohttp.ClientError, OSError, ValueError) as exc:
        raise BenchRunError(f"GET {url} failed: {exc}") from None
