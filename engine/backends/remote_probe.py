"""Is a remote stage's server there, and what does it serve: probing before use.

``probe``/``discover_remote`` ask ``GET /models`` with a short timeout before anything
is used: is the server there, does it take the key, which server is it, which models does
it serve. Placement and the device lists read it like they read a GPU's presence. A server
whose model list cannot be read (``mlx_lm.server`` without a Hugging Face cache folder
answers 200 with an empty body) is checked instead with one small request for the
configured model (``check_model``), and the result's ``note`` says so.
"""

from __future__ import annotations

import http
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from engine.backends.remote import REMOTE_STAGES, Endpoint, RemoteClient, RemoteError
from engine.config import LlmConfig, SttConfig, TtsConfig
from engine.errors import ConfigError, ParleyError

log = logging.getLogger("parley.remote")

PROBE_TIMEOUT_S = 3.0  # a reachability check must not hold up a start or a dropdown
CHECK_TIMEOUT_S = 10.0  # a one-token request computes: it may take longer (capped by timeout_s)
_OWNERS = {"vllm": "vLLM", "library": "Ollama", "ollama": "Ollama", "llamacpp": "llama.cpp",
           "llama.cpp": "llama.cpp", "parley": "Parley", "openai": "OpenAI", "system": "OpenAI",
           "openai-internal": "OpenAI", "lmstudio": "LM Studio", "mlx_lm": "mlx_lm.server"}


@dataclass(frozen=True)
class ProbeResult:
    """What ``GET /models`` said about an endpoint."""

    endpoint: Endpoint
    ok: bool
    reason: str = ""  # why the endpoint cannot be used
    server: str = ""  # vLLM, Ollama, llama.cpp, Parley... or the HTTP Server header
    models: tuple[str, ...] = ()
    seconds: float = 0.0
    error: ParleyError | None = None
    hints: tuple[tuple[str, str], ...] = ()  # (model, stage) where the server says (Parley)
    note: str = ""  # how the endpoint was checked when its model list could not be read

    def match(self, asked: str) -> str | None:
        """The listed model id ``asked`` names (itself, or a listed path ending in it),
        the first listed for ``auto``; None if the server does not list it."""
        if asked == "auto":
            mine = [m for m, s in self.hints if s == self.endpoint.stage]
            return mine[0] if mine else (self.models[0] if self.models else None)
        if asked in self.models:
            return asked
        if asked.startswith(("/", ".", "~")):  # a folder served by path (mlx_lm.server)
            real = os.path.realpath(os.path.expanduser(asked))
            return real if real in self.models else None
        named = [m for m in self.models if m != short_model(m) and short_model(m) == asked]
        return named[0] if len(named) == 1 else None

    def model_problem(self, asked: str) -> str | None:
        """Why ``asked`` cannot be used on this server, or None."""
        if not self.models:
            return None if asked != "auto" else (
                f"{self.endpoint.base_url} lists no models: set '{self.endpoint.stage}.model'")
        if self.match(asked) is None:
            listed = ", ".join(self.models[:8]) + (" ..." if len(self.models) > 8 else "")
            return (f"{self.endpoint.base_url} does not serve model {asked!r}: it lists {listed}; "
                    f"set '{self.endpoint.stage}.model' to one of them")
        return None


def short_model(model: str) -> str:
    """A model id for labels: the last part of a path."""
    return model.rstrip("/").replace("\\", "/").rsplit("/", 1)[-1] if model.startswith(
        ("/", ".", "~")) or "\\" in model else model


def _server_name(headers, data: list) -> str:
    owners = {str(m.get("owned_by", "")).lower() for m in data if isinstance(m, dict)}
    for owner in owners:
        if owner in _OWNERS:
            return _OWNERS[owner]
    header = (headers.get("server") or "").strip()
    if header.lower().startswith("llama.cpp"):
        return "llama.cpp"
    return header.split()[0] if header else "OpenAI-compatible"


class UnreadableListing(Exception):
    """``GET /models`` answered, but not with a model list; the message says what it sent."""


def _listing(response) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...], list]:
    """(model ids, Parley's stage hints, the raw ``data``) of a ``GET /models`` answer."""
    try:
        phrase = http.HTTPStatus(response.status_code).phrase
    except ValueError:
        phrase = ""
    code = f"{response.status_code} {phrase}".strip()
    text = response.text
    try:
        body = response.json()
    except ValueError:
        if not text.strip():
            raise UnreadableListing(f"{code} with an empty body") from None
        kind = response.headers.get("content-type") or "no content type"
        snippet = " ".join(text.split())[:80]
        raise UnreadableListing(f"{code} with a body that is not JSON ({kind}: {snippet!r})") from None
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        raise UnreadableListing(f"{code} with JSON that has no 'data' list")
    models = tuple(str(m["id"]) for m in data if isinstance(m, dict) and m.get("id"))
    hints = tuple((str(m["id"]), str(m["parley"].get("stage"))) for m in data
                  if isinstance(m, dict) and m.get("id") and isinstance(m.get("parley"), dict))
    return models, hints, data


def check_model(client: RemoteClient, options: SttConfig | LlmConfig | TtsConfig) -> str:
    """One small request for ``options.model`` on the stage's server, the nearest check of
    the real use: a chat completion of one token (LLM), a quarter second of silence
    transcribed (STT), one word spoken (TTS). Returns what was asked, for a note;
    raises what the client raised."""
    stage, model = client.endpoint.stage, options.model
    api = client.openai
    if isinstance(options, LlmConfig):
        api.chat.completions.create(model=model, max_tokens=1,
                                    messages=[{"role": "user", "content": "Hi"}])
        return "a one-token chat completion"
    if isinstance(options, SttConfig):
        from engine.audio.pcm import wav_header

        rate = 16000
        api.audio.transcriptions.create(model=model, response_format="json",
                                        file=("probe.wav", wav_header(rate, rate // 4) + bytes(rate // 2)))
        return "a quarter second of silence to transcribe"
    if isinstance(options, TtsConfig):
        from engine.backends.tts.openai_tts import DEFAULT_VOICE

        speech: dict[str, Any] = {  # as the TTS backend sends it (its format is checked there)
            "model": model, "input": "Hi.",
            "voice": DEFAULT_VOICE if options.voice in ("", "auto") else options.voice,
            "response_format": options.response_format.strip().lower() or "pcm"}
        with api.audio.speech.with_streaming_response.create(**speech) as response:
            response.read()  # the whole (short) answer: a server that fails midway shows here
        return "one word to speak"
    raise ConfigError(f"the {stage} stage cannot be checked with a request (no remote "
                      f"{stage} backend)")


def probe(endpoint: Endpoint, timeout_s: float = PROBE_TIMEOUT_S,
          options: SttConfig | LlmConfig | TtsConfig | None = None) -> ProbeResult:
    """``GET /models`` on ``endpoint`` within ``timeout_s``: reachable, key accepted, models.

    When the answer is not a model list and ``options`` (the stage's section) names a
    model, that model is checked with ``check_model`` instead (within ``CHECK_TIMEOUT_S``)
    and the result's ``note`` says what the server sent and how it was checked."""
    started = time.perf_counter()

    def failed(error: ParleyError) -> ProbeResult:
        return ProbeResult(endpoint, False, str(error), seconds=time.perf_counter() - started,
                           error=error)

    try:
        client = RemoteClient(endpoint, timeout_s=min(timeout_s, endpoint.timeout_s))
    except ParleyError as exc:  # the key's variable is not set, openai is not installed
        return failed(exc)
    try:
        raw = client.openai.models.with_raw_response.list()
        try:
            models, hints, data = _listing(raw.http_response)
        except UnreadableListing as exc:
            server = _server_name(raw.headers, [])
            return _checked(endpoint, options, str(exc), server, started)
        server = _server_name(raw.headers, data)
    except Exception as exc:  # noqa: BLE001 - every failure becomes the endpoint's reason
        error = client.error(exc)
        if error.kind == "timeout":
            error = RemoteError(f"{endpoint.what} did not answer GET /models within "
                                f"{min(timeout_s, endpoint.timeout_s):g} s (timeout): is the "
                                "server up and reachable?", url=endpoint.base_url,
                                stage=endpoint.stage, kind="timeout", retryable=True)
        elif error.kind == "not_found":
            error = RemoteError(f"{endpoint.what} has no GET /models (404): check that "
                                f"'{endpoint.stage}.base_url' is the API's root (usually ending "
                                "in /v1)", url=endpoint.base_url, stage=endpoint.stage,
                                kind="not_found", status=404)
        return failed(error)
    finally:
        client.close()
    return ProbeResult(endpoint, True, server=server, models=models,
                       seconds=time.perf_counter() - started, hints=hints)


def _checked(endpoint: Endpoint, options: SttConfig | LlmConfig | TtsConfig | None, sent: str,
             server: str, started: float) -> ProbeResult:
    """The probe of a server whose model list could not be read (it ``sent`` something
    else): the configured model asked for once, or why that cannot be done."""
    stage, what = endpoint.stage, endpoint.what

    def failed(message: str, kind: str = "bad_response", status: int | None = None) -> ProbeResult:
        error = RemoteError(message, url=endpoint.base_url, stage=stage, kind=kind, status=status)
        return ProbeResult(endpoint, False, message, server=server,
                           seconds=time.perf_counter() - started, error=error)

    if options is None or options.model.strip() in ("", "auto"):
        return failed(f"{what} answered GET /models with {sent}, not a model list, so model auto "
                      f"cannot be chosen: set '{stage}.model' to a model it serves (Parley then "
                      f"checks it with one small request), and check that '{stage}.base_url' is "
                      "an OpenAI-compatible API")
    model = options.model.strip()
    try:
        client = RemoteClient(endpoint, timeout_s=min(endpoint.timeout_s, CHECK_TIMEOUT_S))
    except ParleyError as exc:
        return failed(str(exc))
    try:
        asked = check_model(client, options)
    except ParleyError as exc:
        return failed(str(exc))
    except Exception as exc:  # noqa: BLE001 - the check's failure is the endpoint's reason
        error = client.error(exc, model)
        return failed(f"{what} answered GET /models with {sent}, not a model list; checked "
                      f"instead with a request for model {model!r}, which failed: {error}",
                      error.kind, error.status)
    finally:
        client.close()
    note = (f"{endpoint.host} answered GET /models with {sent}, not a model list; model "
            f"{model!r} answered {asked}, so it is used as configured")
    log.info("%s stage: %s", stage, note)
    return ProbeResult(endpoint, True, server=server, models=(model,),
                       seconds=time.perf_counter() - started, note=note)


def probe_stage(stage: str, options: SttConfig | LlmConfig | TtsConfig,
                timeout_s: float = PROBE_TIMEOUT_S) -> tuple[ProbeResult, str | None]:
    """Probe the endpoint of one stage's config section; the result and why the stage's
    model cannot be used there (None when it can). ConfigError for a bad base_url."""
    result = probe(Endpoint.of(stage, options), timeout_s, options)
    return result, (result.model_problem(options.model) if result.ok else result.reason)


def discover_remote(config, timeout_s: float = PROBE_TIMEOUT_S) -> list:
    """One ``remote`` DeviceInfo per stage of ``config`` (an EngineConfig) whose
    ``base_url`` is set, the stages' endpoints probed in parallel (``timeout_s`` at most):
    available when the server answers ``/models`` and lists the stage's model."""
    from engine.runtime.devices import Device, DeviceInfo

    stages = [s for s in REMOTE_STAGES if config.stage_config(s).base_url.strip()]
    endpoints: dict[str, Endpoint] = {}
    infos: dict[str, DeviceInfo] = {}
    for stage in stages:
        try:
            endpoints[stage] = Endpoint.of(stage, config.stage_config(stage))
        except ConfigError as exc:
            infos[stage] = DeviceInfo(Device("remote"), config.stage_config(stage).base_url.strip(),
                                      False, str(exc), stages=(stage,))
    results: dict[str, ProbeResult] = {}
    if endpoints:  # each stage its own probe (messages name the stage), all at once
        with ThreadPoolExecutor(max_workers=len(endpoints), thread_name_prefix="parley-probe") as pool:
            futures = {s: pool.submit(probe, e, timeout_s, config.stage_config(s))
                       for s, e in endpoints.items()}
            results = {s: f.result() for s, f in futures.items()}
    for stage, endpoint in endpoints.items():
        result = results[stage]
        asked = config.stage_config(stage).model
        if not result.ok:
            infos[stage] = DeviceInfo(Device("remote"), endpoint.host, False, result.reason,
                                      stages=(stage,))
            continue
        problem = result.model_problem(asked)
        model = result.match(asked) or asked
        name = f"{endpoint.host} · {result.server}"
        if model != "auto":
            name += f" · {short_model(model)}"
        infos[stage] = DeviceInfo(Device("remote"), name, problem is None, problem or "",
                                  stages=(stage,))
    return [infos[s] for s in stages]
