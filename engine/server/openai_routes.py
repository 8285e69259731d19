"""The OpenAI HTTP API on the models a Parley server holds, so one Parley can serve another.

``parley-cli serve`` answers, beside ``/v1/realtime``:

- ``GET /v1/models`` (and ``/v1/models/{id}``): the STT, LLM and TTS models it holds, each
  with a ``parley`` field naming its stage, backend and device.
- ``POST /v1/chat/completions``: the LLM, streamed (server-sent events, ``stream: true``,
  with ``stream_options.include_usage``) or not. ``max_tokens``/``max_completion_tokens``,
  ``temperature``, and the extensions ``repetition_penalty`` and ``no_repeat_ngram_size``;
  what is not sent follows the server's own ``llm.*`` settings.
- ``POST /v1/audio/transcriptions``: multipart upload of a recording (WAV, FLAC, OGG;
  any rate and channels), ``model``, ``language``, ``response_format`` json or text, and
  ``stream`` (the transcript then comes as one ``transcript.text.delta`` event and a
  ``transcript.text.done``: Parley's STT backends are not incremental).
- ``POST /v1/audio/speech``: JSON ``{model, input, voice, speed, response_format}``,
  ``pcm`` (24 kHz 16-bit mono) or ``wav`` (the voice's own rate, its length left open),
  streamed as the voice makes it. OpenAI's voice names and ``auto`` pick the model's
  default voice.

A ``model`` must be one ``GET /v1/models`` lists (or the model's full path): another
name is a 404 ``model_not_found``. The routes sit behind the same checks as the
realtime endpoint (``engine.server.request_guard``: host, origin and CORS, API key).
Model work runs on this module's own thread pool, never on the event loop; each chat
request gets its own LLM session (``new_session``), and the shared model's lock
serialises the forward passes. A model on the CPU computes under the compute gate
(``engine.runtime.compute_gate``), each LLM token, TTS chunk and transcription as one
call of urgency ``HTTP_URGENCY``: it queues with the realtime units' calls instead of
competing with them for the cores, behind a unit whose user waits for a first answer.
A client that goes away stops its generation (or synthesis) at the next token (or chunk).
"""

from __future__ import annotations

import asyncio
import functools
import io
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from aiohttp import web

from engine.audio.pcm import to_pcm16, wav_header
from engine.backends.base import GenerationOptions, SttResult, TtsModel, model_of
from engine.backends.voices import openai_voice
from engine.config import AUTO_LANGUAGE
from engine.errors import ParleyError
from engine.runtime.compute_gate import Urgency, get_compute_gate
from engine.models.placement import Placement

log = logging.getLogger("parley.server")

SERVED_STAGES = ("stt", "llm", "tts")
WORKERS = 4  # model calls at once (forwards are serialised per model anyway)
PCM_RATE = 24000
MAX_SPEECH_CHARS = 4096
_GENERIC_PARTS = {"model", "data", "weights", "snapshot"}
_EXTENSIONS = (".gguf", ".onnx", ".safetensors", ".bin", ".pt", ".pth")
_CREATED = int(time.time())
#: An HTTP call waits like a realtime reply already under way: after a unit whose user
#: waits in silence for its first audio, before live transcription.
HTTP_URGENCY = Urgency.REPLY
_END = object()


def _on_cpu(model) -> bool:
    return model.actual_device == "cpu"


def gated_steps(model, steps: Iterator) -> Iterator:
    """``steps`` (LLM tokens, TTS chunks) each computed holding the compute gate, where
    ``model`` computes on the CPU. A call of no unit waits as urgent as a reply
    (``HTTP_URGENCY``: the gate's rank for a unit that declared nothing)."""
    if not _on_cpu(model):
        return steps
    return _each_gated(steps)


def _each_gated(steps: Iterator) -> Iterator:
    # Not ComputeGate.steps: with it, a speech stream its client cut off (the route stops
    # the synthesis) held up the next HTTP call past a 4 s client timeout in 2 of 3 runs of
    # tests/backends/test_remote_audio.py (its cut-midway test, then its STT timeout
    # test); this loop passed them each time. steps() also closes an abandoned stream
    # under the gate, and declares no urgency; which of the two stalled is not known yet.
    gate = get_compute_gate()
    while True:
        with gate.hold(urgency=HTTP_URGENCY):
            item = next(steps, _END)
        if item is _END:
            return
        yield item


def gated_call(model, fn: Callable, *args):
    """``fn(*args)``, one model call, holding the compute gate where ``model`` computes
    on the CPU."""
    if not _on_cpu(model):
        return fn(*args)
    with get_compute_gate().hold(urgency=HTTP_URGENCY):
        return fn(*args)


def served_id(model: str) -> str:
    """The id ``/v1/models`` gives a model: a hub id as is; a path's last meaningful
    part without its extension (``SmolLM2-135M-Instruct.Q4_1``, ``en_US-joe-medium``)."""
    text = model.replace("\\", "/").rstrip("/")
    if not text.startswith(("/", ".", "~")) and "\\" not in model and text.count("/") <= 1:
        return text
    parts = [p for p in text.split("/") if p]
    while len(parts) > 1 and parts[-1].lower() in _GENERIC_PARTS:
        parts.pop()
    name = parts[-1] if parts else text
    for ext in _EXTENSIONS:
        if name.lower().endswith(ext):
            return name[: -len(ext)]
    return name


class ApiError(Exception):
    """An answer in the OpenAI error shape: ``{"error": {message, type, code, param}}``."""

    def __init__(self, status: int, message: str, code: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.param = status, code, param

    def response(self) -> web.Response:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        return web.json_response({"error": {"message": str(self), "type": kind,
                                            "code": self.code, "param": self.param}},
                                 status=self.status)


def _sse(payload: dict | str) -> bytes:
    text = payload if isinstance(payload, str) else json.dumps(payload)
    return f"data: {text}\n\n".encode()


class OpenAiRoutes:
    """The OpenAI-compatible routes over one engine's loaded models."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self._executor = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="parley-openai")
        self._stops: set[threading.Event] = set()
        self._lock = threading.Lock()

    def register(self, app: web.Application) -> None:
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/v1/models/{model:.+}", self.model)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/v1/audio/transcriptions", self.transcriptions)
        app.router.add_post("/v1/audio/speech", self.speech)
        app.on_shutdown.append(self._on_shutdown)
        app.on_cleanup.append(self._on_cleanup)

    # ------------------------------------------------------------------ plumbing
    async def _on_shutdown(self, app: web.Application) -> None:
        with self._lock:
            for stop in self._stops:
                stop.set()

    async def _on_cleanup(self, app: web.Application) -> None:
        await asyncio.get_running_loop().run_in_executor(
            None, functools.partial(self._executor.shutdown, wait=True))

    def _stop_event(self) -> threading.Event:
        stop = threading.Event()
        with self._lock:
            self._stops.add(stop)
        return stop

    def _forget(self, stop: threading.Event) -> None:
        stop.set()
        with self._lock:
            self._stops.discard(stop)

    async def _call(self, fn: Callable, *args):
        return await asyncio.get_running_loop().run_in_executor(
            self._executor, functools.partial(fn, *args))

    def _stream(self, produce: Callable[[], Iterator], stop: threading.Event) -> asyncio.Queue:
        """Run ``produce()`` on the pool; its items, then ``("end", None)`` or
        ``("error", exc)``, arrive on the returned queue (on the loop)."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()

        def put(kind: str, value) -> None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, (kind, value))
            except RuntimeError:  # the loop closed (shutdown): nobody listens any more
                stop.set()

        def run() -> None:
            try:
                for item in produce():
                    put("item", item)
                    if stop.is_set():
                        break
                put("end", None)
            except Exception as exc:  # noqa: BLE001 - handed to the handler, which answers
                put("error", exc)

        self._executor.submit(run)
        return queue

    def _placed(self, stage: str, requested: object) -> Placement:
        """The placement of ``stage``, whose model is loaded, if ``requested`` names it;
        else 404."""
        placement = self.engine.placements.get(stage)
        if stage not in self.engine.models or placement is None:
            raise ApiError(404, f"this server holds no {stage} model", "model_not_found", "model")
        if not isinstance(requested, str) or not requested:
            raise ApiError(400, "'model' is required: one of GET /v1/models", "missing_model",
                           "model")
        if requested not in (served_id(placement.model), placement.model):
            raise ApiError(404, f"model {requested[:200]!r} is not served here; this server's "
                           f"{stage} model is {served_id(placement.model)!r} (GET /v1/models)",
                           "model_not_found", "model")
        return placement

    async def _json(self, request: web.Request) -> dict:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise ApiError(400, "the request body is not valid JSON", "invalid_json") from None
        if not isinstance(body, dict):
            raise ApiError(400, "the request body must be a JSON object", "invalid_json")
        return body

    def _entry(self, stage: str) -> dict:
        placement = self.engine.placements[stage]
        return {"id": served_id(placement.model), "object": "model", "created": _CREATED,
                "owned_by": "parley",
                "parley": {"stage": stage, "backend": placement.backend,
                           "device": str(placement.device),
                           "actual_device": self.engine.actual_device(stage)}}

    # ------------------------------------------------------------------ models
    async def models(self, request: web.Request) -> web.Response:
        """``GET /v1/models``."""
        data = [self._entry(s) for s in SERVED_STAGES if self.engine.models.get(s) is not None]
        return web.json_response({"object": "list", "data": data})

    async def model(self, request: web.Request) -> web.Response:
        """``GET /v1/models/{id}``."""
        wanted = request.match_info["model"]
        for stage in SERVED_STAGES:
            placement = self.engine.placements.get(stage)
            if placement is not None and self.engine.models.get(stage) is not None \
                    and wanted in (served_id(placement.model), placement.model):
                return web.json_response(self._entry(stage))
        return ApiError(404, f"model {wanted[:200]!r} is not served here", "model_not_found",
                        "model").response()

    # ------------------------------------------------------------------ chat
    async def chat(self, request: web.Request) -> web.StreamResponse:
        """``POST /v1/chat/completions``."""
        try:
            body = await self._json(request)
            placement = self._placed("llm", body.get("model"))
            model = model_of(self.engine.models, "llm")
            messages = _chat_messages(body.get("messages"))
            options = self._generation_options(body)
            stream = body.get("stream", False)
            if not isinstance(stream, bool):
                raise ApiError(400, "'stream' must be true or false", "invalid_type", "stream")
            if body.get("n", 1) != 1:
                raise ApiError(400, "'n' must be 1: Parley makes one reply per request",
                               "unsupported_value", "n")
        except ApiError as exc:
            return exc.response()
        name = served_id(placement.model)
        stop = self._stop_event()
        try:
            steps = self._stream(lambda: gated_steps(model, model.new_session().generate(
                messages, options, stop.is_set)), stop)
            if stream:
                usage = bool((body.get("stream_options") or {}).get("include_usage"))
                return await self._chat_stream(request, steps, name, options, usage)
            return await self._chat_whole(steps, name, options)
        finally:
            self._forget(stop)

    def _generation_options(self, body: dict) -> GenerationOptions:
        config = self.engine.config.llm
        limit = body.get("max_completion_tokens", body.get("max_tokens"))
        limit = config.max_new_tokens if limit is None else limit
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 4096:
            raise ApiError(400, "'max_tokens' must be an integer from 1 to 4096", "invalid_value",
                           "max_tokens")

        def number(key: str, lo: float, hi: float) -> float | None:
            value = body.get(key)
            if value is None:
                return None
            if isinstance(value, bool) or not isinstance(value, int | float) or not lo <= value <= hi:
                raise ApiError(400, f"'{key}' must be a number from {lo} to {hi}", "invalid_value", key)
            return float(value)

        # Not in the body: the engine's settings (an anti-repetition one at its default is
        # None there, the model family's to decide).
        base = GenerationOptions.from_config(config)
        temperature = number("temperature", 0.0, 2.0)
        penalty = number("repetition_penalty", 1.0, 3.0)
        ngram = body.get("no_repeat_ngram_size")
        if ngram is not None and (isinstance(ngram, bool) or not isinstance(ngram, int)
                                  or not 0 <= ngram <= 20):
            raise ApiError(400, "'no_repeat_ngram_size' must be an integer from 0 to 20",
                           "invalid_value", "no_repeat_ngram_size")
        return GenerationOptions(limit, base.temperature if temperature is None else temperature,
                                 base.repetition_penalty if penalty is None else penalty,
                                 base.no_repeat_ngram_size if ngram is None else ngram)

    @staticmethod
    def _chunk(cid: str, name: str, delta: dict, finish: str | None) -> dict:
        return {"id": cid, "object": "chat.completion.chunk", "created": int(time.time()),
                "model": name, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    async def _chat_stream(self, request: web.Request, steps: asyncio.Queue, name: str,
                           options: GenerationOptions, include_usage: bool) -> web.StreamResponse:
        cid = f"chatcmpl-{uuid.uuid4().hex}"
        response: web.StreamResponse | None = None
        last = None
        try:
            while True:
                kind, value = await steps.get()
                if kind == "error":
                    if response is None:
                        return _failure(value).response()
                    await response.write(_sse({"error": {"message": _failure(value).args[0],
                                                         "type": "server_error"}}))
                    return response
                if response is None:
                    response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                                           "Cache-Control": "no-cache"})
                    await response.prepare(request)
                    await response.write(_sse(self._chunk(cid, name, {"role": "assistant",
                                                                      "content": ""}, None)))
                if kind == "end":
                    break
                last = value
                if value.text:
                    await response.write(_sse(self._chunk(cid, name, {"content": value.text}, None)))
            finish = "length" if last is not None and last.tokens >= options.max_new_tokens else "stop"
            await response.write(_sse(self._chunk(cid, name, {}, finish)))
            if include_usage:
                await response.write(_sse({"id": cid, "object": "chat.completion.chunk",
                                           "created": int(time.time()), "model": name,
                                           "choices": [], "usage": _usage(last)}))
            await response.write(_sse("[DONE]"))
            await response.write_eof()
            return response
        except ConnectionError:  # the caller's finally stops the generation
            log.info("a chat client went away mid-reply: generation stopped")
            return response if response is not None else web.Response(status=499)

    async def _chat_whole(self, steps: asyncio.Queue, name: str,
                          options: GenerationOptions) -> web.Response:
        parts: list[str] = []
        last = None
        while True:
            kind, value = await steps.get()
            if kind == "error":
                return _failure(value).response()
            if kind == "end":
                break
            last = value
            parts.append(value.text)
        finish = "length" if last is not None and last.tokens >= options.max_new_tokens else "stop"
        return web.json_response({
            "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion",
            "created": int(time.time()), "model": name,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "".join(parts)},
                         "finish_reason": finish}],
            "usage": _usage(last)})

    # ------------------------------------------------------------------ transcriptions
    async def transcriptions(self, request: web.Request) -> web.StreamResponse:
        """``POST /v1/audio/transcriptions`` (multipart)."""
        try:
            if not request.content_type.startswith("multipart/"):
                raise ApiError(400, "send the audio as multipart/form-data with a 'file' field",
                               "invalid_content_type")
            form = await request.post()
            self._placed("stt", form.get("model"))
            model = model_of(self.engine.models, "stt")
            upload = form.get("file")
            if not isinstance(upload, web.FileField):
                raise ApiError(400, "'file' is required: the recording to transcribe", "missing_file",
                               "file")
            data = upload.file.read()
            audio = await self._call(_decode_audio, data)
            language = str(form.get("language") or "").strip() or None
            fmt = str(form.get("response_format") or "json")
            if fmt not in ("json", "text"):
                raise ApiError(400, "'response_format' must be json or text", "unsupported_value",
                               "response_format")
            stream = str(form.get("stream") or "false").lower() in ("true", "1")
            options = self.engine.config.stt

            def transcribe() -> SttResult:
                model.check_language(language)
                # "auto" (stt.language's word for it) detects, as no language does.
                spoken = None if language == AUTO_LANGUAGE else language
                return gated_call(model, model.transcribe, audio, spoken, options.beam_size,
                                  options.fit_window_s)

            try:
                result = await self._call(transcribe)
            except Exception as exc:  # noqa: BLE001 - answered, and logged when unexpected
                raise _failure(exc) from None
        except ApiError as exc:
            return exc.response()
        text = result.text.strip()
        if stream:
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                                   "Cache-Control": "no-cache"})
            await response.prepare(request)
            await response.write(_sse({"type": "transcript.text.delta", "delta": text}))
            await response.write(_sse({"type": "transcript.text.done", "text": text}))
            await response.write_eof()
            return response
        if fmt == "text":
            return web.Response(text=text, content_type="text/plain")
        return web.json_response({"text": text})

    # ------------------------------------------------------------------ speech
    async def speech(self, request: web.Request) -> web.StreamResponse:
        """``POST /v1/audio/speech``."""
        try:
            body = await self._json(request)
            self._placed("tts", body.get("model"))
            model = model_of(self.engine.models, "tts")
            text = body.get("input")
            if not isinstance(text, str) or not text.strip():
                raise ApiError(400, "'input' must be the text to speak", "invalid_value", "input")
            if len(text) > MAX_SPEECH_CHARS:
                raise ApiError(400, f"'input' is longer than {MAX_SPEECH_CHARS} characters",
                               "invalid_value", "input")
            fmt = body.get("response_format", "wav")
            if fmt not in ("pcm", "wav"):
                raise ApiError(400, f"'response_format' {str(fmt)[:40]!r} is not supported: use pcm "
                               "or wav", "unsupported_value", "response_format")
            if body.get("stream_format", "audio") != "audio":
                raise ApiError(400, "'stream_format' must be audio", "unsupported_value",
                               "stream_format")
            speed = body.get("speed", 1.0)
            if isinstance(speed, bool) or not isinstance(speed, int | float) or not 0.25 <= speed <= 4.0:
                raise ApiError(400, "'speed' must be a number from 0.25 to 4.0", "invalid_value",
                               "speed")
            voice = body.get("voice", "auto")
            voice = voice.get("id") if isinstance(voice, dict) else voice
            if not isinstance(voice, str):
                raise ApiError(400, "'voice' must be a voice name", "invalid_value", "voice")
            if voice in ("", "auto"):
                voice = "auto"
            else:  # OpenAI's names stand for a voice of the model (the README's table)
                name = voice
                voice = await self._call(lambda: openai_voice(name, model.voices())) or name
            try:
                await self._call(model.check_voice, voice)
            except ParleyError as exc:
                raise ApiError(400, str(exc), "invalid_value", "voice") from None
        except ApiError as exc:
            return exc.response()
        stop = self._stop_event()
        try:
            chunks = self._stream(lambda: gated_steps(model, model.synthesize(
                text, stop.is_set, voice, float(speed))), stop)
            return await self._speech_stream(request, chunks, fmt, model)
        finally:
            self._forget(stop)

    async def _speech_stream(self, request: web.Request, chunks: asyncio.Queue, fmt: str,
                             model: TtsModel) -> web.StreamResponse:
        response: web.StreamResponse | None = None
        resampler = None
        try:
            while True:
                kind, value = await chunks.get()
                if kind == "error":
                    if response is None:
                        return _failure(value).response()
                    log.warning("speech synthesis failed midway: %s", _failure(value))
                    if request.transport is not None:  # no chunked end: the client sees a cut
                        request.transport.abort()
                    return response
                if response is None:
                    rate = value.sample_rate if kind == "item" else int(model.sample_rate)
                    mime = "audio/pcm" if fmt == "pcm" else "audio/wav"
                    response = web.StreamResponse(headers={"Content-Type": mime})
                    response.enable_chunked_encoding()
                    await response.prepare(request)
                    if fmt == "wav":
                        await response.write(wav_header(rate))
                if kind == "end":
                    break
                audio = value.audio
                if fmt == "pcm" and value.sample_rate != PCM_RATE:
                    if resampler is None:
                        import soxr

                        resampler = soxr.ResampleStream(value.sample_rate, PCM_RATE, 1,
                                                        dtype="float32", quality="HQ")
                    audio = resampler.resample_chunk(np.asarray(audio, np.float32))
                await response.write(to_pcm16(audio))
            if resampler is not None:
                await response.write(to_pcm16(resampler.resample_chunk(np.zeros(0, np.float32),
                                                                       last=True)))
            await response.write_eof()
            return response
        except ConnectionError:  # the caller's finally stops the synthesis
            log.info("a speech client went away mid-audio: synthesis stopped")
            return response if response is not None else web.Response(status=499)


# ---------------------------------------------------------------------- helpers
def _chat_messages(raw) -> list[dict[str, str]]:
    if not isinstance(raw, list) or not raw:
        raise ApiError(400, "'messages' must be a non-empty list", "invalid_value", "messages")
    out = []
    for i, message in enumerate(raw):
        if not isinstance(message, dict):
            raise ApiError(400, f"messages[{i}] must be an object", "invalid_value", "messages")
        role = message.get("role")
        role = "system" if role == "developer" else role
        if role not in ("system", "user", "assistant"):
            raise ApiError(400, f"messages[{i}].role {str(role)[:40]!r} is not supported: use "
                           "system, user or assistant", "unsupported_value", "messages")
        content = message.get("content")
        if isinstance(content, list):  # content parts: only text
            texts = []
            for part in content:
                if not isinstance(part, dict) or part.get("type") != "text" \
                        or not isinstance(part.get("text"), str):
                    raise ApiError(400, f"messages[{i}].content: only text parts are supported",
                                   "unsupported_value", "messages")
                texts.append(part["text"])
            content = "".join(texts)
        if not isinstance(content, str):
            raise ApiError(400, f"messages[{i}].content must be text", "invalid_value", "messages")
        out.append({"role": role, "content": content})
    return out


def _usage(step) -> dict:
    if step is None:
        return {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    return {"prompt_tokens": step.prompt_tokens, "completion_tokens": step.tokens,
            "total_tokens": step.prompt_tokens + step.tokens}


def _failure(exc: BaseException) -> ApiError:
    """A model call's failure as an answer: a ParleyError says what was wrong with the
    request (a context too long, a language the model lacks); anything else is logged."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, ParleyError):
        return ApiError(400, str(exc), "invalid_request")
    log.error("a model call failed", exc_info=exc)
    return ApiError(500, f"the model failed: {type(exc).__name__}", "server_error")


def _decode_audio(data: bytes) -> np.ndarray:
    """An uploaded recording as 16 kHz mono float32 (an ApiError if it is not audio)."""
    import soundfile as sf

    from engine.audio.decode import resample

    try:
        samples, rate = sf.read(io.BytesIO(data), dtype="float32", always_2d=True)
    except (sf.LibsndfileError, RuntimeError, TypeError, ValueError):
        raise ApiError(400, "'file' is not audio Parley can read (wav, flac, ogg)",
                       "invalid_file", "file") from None
    if samples.size == 0:
        raise ApiError(400, "'file' holds no audio samples", "invalid_file", "file")
    mono = samples.mean(axis=1, dtype=np.float32) if samples.shape[1] > 1 else samples[:, 0]
    return resample(mono, rate, 16000)
