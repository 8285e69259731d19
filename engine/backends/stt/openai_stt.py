"""The remote STT backend: ``POST /audio/transcriptions`` on an OpenAI-compatible server.

The turn's audio goes up as a 16 kHz, 16-bit mono WAV with ``language`` (omitted for
detection). With ``stt.stream`` (the default) the request asks for a streamed transcript:
a server that streams answers with server-sent ``transcript.text.delta`` events, one that
does not answers with plain JSON, and both are read. ``beam_size`` is not part of the API
and is not sent. Nothing of a transcript reaches the pipeline before it is complete, so
any failure worth retrying is retried (``stt.retries``); the last one is a RemoteError
naming the server, what happened and what to check.
"""

from __future__ import annotations

import json
import time

import numpy as np

from engine.audio.pcm import wav_bytes
from engine.backends.base import LoadRequest, Progress, SttModel, SttResult, no_progress
from engine.backends.remote import Endpoint, RemoteClient, RemoteError, Retrier
from engine.config import SttConfig
from engine.errors import DeviceError
from engine.measures import Figure

SAMPLE_RATE = 16000


def load(request: LoadRequest, progress: Progress = no_progress) -> RemoteStt:
    """A client of the server the ``stt`` section names, for ``request.model``."""
    if request.device.kind != "remote":
        raise DeviceError(f"stt backend 'openai' cannot run on {request.device}; it runs on "
                          "remote (a server named by stt.base_url)")
    options = request.options_as(SttConfig)
    endpoint = Endpoint.of("stt", options)
    progress(None, f"using {request.model} on {endpoint.base_url}")
    return RemoteStt(RemoteClient(endpoint), request.model, options.stream)


class RemoteStt(SttModel):
    """A speech-to-text model on a server, shared by every pipeline unit."""

    sample_rate = SAMPLE_RATE
    actual_device = "remote"

    def __init__(self, client: RemoteClient, model: str, stream: bool = True) -> None:
        self.client = client
        self.model = model
        self.stream = stream
        self.endpoint = client.endpoint

    def check_language(self, language: str | None) -> None:
        """The server decides which languages it knows: any code is passed on."""

    def transcribe(self, audio: np.ndarray, language: str | None = None,
                   beam_size: int = 1, fit_window_s: float | None = None) -> SttResult:
        """Transcribe 16 kHz mono float32 audio on the server; the result's ``figures``
        are the network's share of its time. ``beam_size`` and ``fit_window_s`` are not
        part of the API: the server decodes as it does."""
        started = time.perf_counter()
        data = wav_bytes(audio, SAMPLE_RATE)
        retrier = Retrier(self.endpoint)
        while True:
            try:
                text = self._request(data, language)
                break
            except Exception as exc:  # noqa: BLE001 - every failure is translated for the user
                error = self.client.error(exc, self.model)
                if retrier.again(error):
                    continue
                raise error from None
        figures: dict[Figure, float] = {}
        timing = self.client.timing()
        if timing is not None:
            if timing.network_s is not None:
                figures[Figure.STT_NETWORK_S] = timing.network_s
            if timing.headers_s is not None:
                figures[Figure.STT_HEADERS_S] = timing.headers_s
        return SttResult(text.strip(), len(audio) / SAMPLE_RATE, time.perf_counter() - started,
                         figures)

    def _request(self, data: bytes, language: str | None) -> str:
        api = self.client.openai.audio.transcriptions
        kwargs = {"file": ("audio.wav", data, "audio/wav"), "model": self.model}
        if language:
            kwargs["language"] = language
        if not self.stream:
            return api.create(response_format="json", **kwargs).text
        with api.with_streaming_response.create(stream=True, **kwargs) as response:
            kind = response.headers.get("content-type", "")
            if "text/event-stream" in kind:
                return self._read_events(response.iter_lines())
            body = response.read()
        if "json" in kind or body.lstrip().startswith(b"{"):
            answer = json.loads(body)
            if not isinstance(answer, dict) or not isinstance(answer.get("text"), str):
                raise ValueError("the answer has no 'text'")
            return answer["text"]
        return body.decode("utf-8", "replace")

    def _read_events(self, lines) -> str:
        """The transcript from server-sent events: the deltas, or the final ``done`` text."""
        parts: list[str] = []
        for line in lines:
            if not line.startswith("data:"):
                continue
            payload = line[5:].strip()
            if payload == "[DONE]":
                return "".join(parts)
            event = json.loads(payload)
            kind = event.get("type", "")
            if kind == "transcript.text.delta":
                parts.append(str(event.get("delta", "")))
            elif kind == "transcript.text.done":
                return str(event.get("text", "".join(parts)))
            elif kind == "error" or "error" in event:
                raise RemoteError(f"{self.endpoint.what} reported an error while transcribing: "
                                  f"{str(event.get('error', event))[:200]}",
                                  url=self.endpoint.base_url, stage="stt", kind="server_error")
        # No end of the stream: a transcript cut short is not a transcript.
        raise self.client.cut("ended the transcript stream before its end", True)

    def close(self) -> None:
        self.client.close()
