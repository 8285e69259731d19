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
network, so it is tested with made-up events; ``RealtimeClient``
(``engine.bench.realtime_client``) is the aiohttp glue.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engine.audio.pcm import frame_rms, to_pcm16
from engine.errors import ParleyError
from engine.runtime.stats import percentile

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
