"""What the remote backends share: a stage served by an OpenAI-compatible server.

A stage is remote when its backend is ``openai`` (its device is then ``remote``): its
``base_url`` names an OpenAI-compatible server (vLLM, Ollama, llama.cpp, mlx_lm.server,
another Parley's ``parley-cli serve``) and ``api_key_env`` the environment variable that
holds the server's key, read when the stage loads. The key is never stored in a setting,
and never appears in a message, a log line or a report.

- ``Endpoint``: a stage's server settings, checked.
- ``RemoteClient``: the official ``openai`` client over an HTTP client whose transport
  times every request (connect, request sent, response headers): the network's share.
- ``engine.backends.remote_probe``: ``GET /models`` before anything is used (is the
  server there, does it take the key, which models does it serve).
- ``RemoteError``: every failure as one message naming the server, what happened and
  what to check.
- ``Retrier``: bounded retries with a short back-off, only of failures worth retrying,
  and only before the first token or byte of a reply reached the pipeline (a reply the
  user heard the start of is never asked for again).
"""

from __future__ import annotations

import http
import json
import logging
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

from engine.config import RemoteFields
from engine.errors import ConfigError, MissingDependencyError, ParleyError

log = logging.getLogger("parley.remote")

REMOTE_BACKEND = "openai"
REMOTE_STAGES = ("stt", "llm", "tts")
#: The settings of a stage section that only a remote stage reads.
REMOTE_FIELDS = ("base_url", "api_key_env", "timeout_s", "retries")
CONNECT_TIMEOUT_S = 5.0  # at most this long to open a connection, whatever timeout_s says
BACKOFF_S = 0.25  # first retry after this long, then doubling...
BACKOFF_MAX_S = 2.0  # ...up to this (a server's Retry-After is capped here too)
#: Sent when no ``api_key_env`` is set: servers without keys (mlx_lm.server, Ollama, a
#: loopback Parley) accept anything, and no key of the user's is sent by accident (the
#: OPENAI_API_KEY variable is deliberately never read).
NO_KEY = "no-key"

_STAGE_NAMES = {"stt": "STT", "llm": "LLM", "tts": "TTS"}


class RemoteError(ParleyError):
    """A request to a remote stage's server failed. The message names the server, what
    happened and what to check; ``kind`` says what happened in one word (``refused``,
    ``unreachable``, ``timeout``, ``unauthorized``, ``not_found``, ``rate_limited``,
    ``server_error``, ``rejected``, ``cut``, ``bad_response``)."""

    def __init__(self, message: str, *, url: str, stage: str, kind: str,
                 status: int | None = None, retryable: bool = False,
                 retry_after: float | None = None) -> None:
        super().__init__(message)
        self.url, self.stage, self.kind, self.status = url, stage, kind, status
        self.retryable = retryable
        self.retry_after = retry_after


def stage_name(stage: str) -> str:
    return _STAGE_NAMES.get(stage, stage.upper())


def normalise_base_url(raw: str, key: str) -> str:
    """``raw`` as a base URL the client can use: http(s), a host, no credentials, no
    trailing slash; a bare ``http://host:port`` gets ``/v1``. ConfigError naming ``key``."""
    text = raw.strip()
    try:
        parts = urlsplit(text)
        port = parts.port  # raises ValueError on a bad port
    except ValueError:
        raise ConfigError(f"'{key}' = {raw!r} is not a URL; e.g. http://gpu-box:8000/v1") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"'{key}' = {raw!r} is not an http(s) URL with a host; "
                          "e.g. http://gpu-box:8000/v1")
    if parts.username or parts.password:
        raise ConfigError(f"'{key}' must not hold credentials (user:password@): put the API key "
                          "in an environment variable and name it in the stage's api_key_env")
    if parts.query or parts.fragment:
        raise ConfigError(f"'{key}' = {raw!r} must not have a query or fragment")
    path = parts.path.rstrip("/") or "/v1"
    netloc = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    if port is not None:
        netloc += f":{port}"
    return urlunsplit((parts.scheme, netloc, path, "", ""))


@dataclass(frozen=True)
class Endpoint:
    """One stage's server: where it is, how its key is found, how long to wait."""

    stage: str
    base_url: str  # normalised: no trailing slash
    api_key_env: str = ""
    timeout_s: float = 30.0
    retries: int = 1

    @classmethod
    def of(cls, stage: str, options: RemoteFields) -> Endpoint:
        """The endpoint of a stage's config section; ConfigError if its URL is missing or bad."""
        raw = options.base_url.strip()
        if not raw:
            raise ConfigError(f"the {stage} stage is remote, but '{stage}.base_url' is empty: set "
                              "it to an OpenAI-compatible server, e.g. http://gpu-box:8000/v1")
        env = options.api_key_env.strip()
        if env and (not env.replace("_", "").isalnum() or env[0].isdigit()):
            raise ConfigError(f"'{stage}.api_key_env' = {env!r} is not an environment variable "
                              "name: name the variable that holds the key, not the key itself")
        return cls(stage, normalise_base_url(raw, f"{stage}.base_url"), env,
                   float(options.timeout_s), int(options.retries))

    @property
    def host(self) -> str:
        """``gpu-box:8000`` (the URL's host and port)."""
        return urlsplit(self.base_url).netloc

    @property
    def what(self) -> str:
        """``the LLM server http://gpu-box:8000/v1``, for messages."""
        return f"the {stage_name(self.stage)} server {self.base_url}"

    def api_key(self) -> str | None:
        """The key from the environment (None when no variable is named). A named
        variable that is not set is a ConfigError saying which."""
        if not self.api_key_env:
            return None
        value = os.environ.get(self.api_key_env, "").strip()
        if not value:
            raise ConfigError(f"'{self.stage}.api_key_env' names the environment variable "
                              f"{self.api_key_env}, which is not set: export it with the key of "
                              f"{self.base_url}")
        return value


# ---------------------------------------------------------------------- timing
@dataclass
class RequestTiming:
    """When one HTTP request reached each step, from the transport's trace."""

    started: float
    connect_s: float = 0.0  # opening the connection (TCP, TLS); 0 when one was reused
    sent: float | None = None  # the whole request (headers and body) was written
    headers: float | None = None  # the response's headers arrived
    _connect_from: float | None = field(default=None, repr=False)

    def trace(self, name: str, info: dict) -> None:
        now = time.perf_counter()
        if name.endswith(("connect_tcp.started", "start_tls.started")):
            self._connect_from = now
        elif name.endswith(("connect_tcp.complete", "start_tls.complete")) and self._connect_from:
            self.connect_s += now - self._connect_from
            self._connect_from = None
        elif name.endswith("send_request_body.complete"):
            self.sent = now

    @property
    def network_s(self) -> float | None:
        """Connecting plus sending the request: the network's share before the server works."""
        end = self.sent if self.sent is not None else self.headers
        return None if end is None else end - self.started

    @property
    def headers_s(self) -> float | None:
        return None if self.headers is None else self.headers - self.started


def http_library():
    """The HTTP library the installed ``openai`` is built on: ``httpx2`` (openai 3.x) or
    ``httpx`` (1.x); the two share the API used here."""
    import openai._base_client as base

    # openai 3.x has httpx2 and no httpx; 1.x and 2.x the other way round.
    return getattr(base, "httpx2", None) or base.httpx  # pyright: ignore[reportAttributeAccessIssue]


class _ThreadTiming(threading.local):
    """The timing of the calling thread's last request (None before its first)."""

    timing: RequestTiming | None = None


def _timed_transport(inner):
    """A transport that records a RequestTiming per request, kept per calling thread."""
    hx = http_library()

    class TimedTransport(hx.BaseTransport):
        def __init__(self) -> None:
            self._inner = inner
            self._local = _ThreadTiming()

        def handle_request(self, request):
            timing = RequestTiming(time.perf_counter())
            self._local.timing = timing
            request.extensions["trace"] = timing.trace
            response = self._inner.handle_request(request)
            timing.headers = time.perf_counter()
            return response

        def last(self) -> RequestTiming | None:
            return self._local.timing

        def close(self) -> None:
            self._inner.close()

    return TimedTransport()


# ---------------------------------------------------------------------- the client
def require_openai(stage: str) -> None:
    """MissingDependencyError with the pip command unless ``openai`` is installed."""
    import importlib.util

    if importlib.util.find_spec("openai") is None:
        raise MissingDependencyError(f"{stage} backend '{REMOTE_BACKEND}'", "openai", "remote")


class RemoteClient:
    """The ``openai`` client of one endpoint, with per-request timing and error messages.

    Thread-safe: units sharing a remote model share its connection pool; each thread
    reads the timing of its own last request. No retries inside the client: ``Retrier``
    decides, so a streamed reply is never asked for twice.
    """

    def __init__(self, endpoint: Endpoint, timeout_s: float | None = None) -> None:
        require_openai(endpoint.stage)
        import openai

        hx = http_library()
        self.endpoint = endpoint
        key = endpoint.api_key()
        self._secret = key
        wait = float(timeout_s or endpoint.timeout_s)
        self.timeout = hx.Timeout(wait, connect=min(wait, CONNECT_TIMEOUT_S))
        self._transport = _timed_transport(hx.HTTPTransport(retries=0))
        # No proxy variables: a stage's server is named explicitly, and loopback or LAN
        # traffic must not detour through a proxy (nor be timed through one).
        self._http = hx.Client(transport=self._transport, timeout=self.timeout,
                                   trust_env=False, follow_redirects=True)
        self.openai = openai.OpenAI(api_key=key or NO_KEY, base_url=endpoint.base_url,
                                    max_retries=0, timeout=self.timeout, http_client=self._http)

    def __repr__(self) -> str:  # never the key
        return f"RemoteClient({self.endpoint.base_url!r})"

    def timing(self) -> RequestTiming | None:
        """The timing of this thread's last request."""
        return self._transport.last()

    def error(self, exc: BaseException, model: str | None = None) -> RemoteError:
        """``exc`` (from openai or httpx) as a RemoteError for the user."""
        return remote_error(self.endpoint, exc, model=model, secret=self._secret)

    def cut(self, detail: str, retryable: bool) -> RemoteError:
        """The server ended a streamed reply early."""
        return RemoteError(f"{self.endpoint.what} {detail}: the connection was lost or the server "
                           "stopped; check that it is running (and its log)",
                           url=self.endpoint.base_url, stage=self.endpoint.stage, kind="cut",
                           retryable=retryable)

    def close(self) -> None:
        self.openai.close()
        self._http.close()


def _said(body: object, text: str, secret: str | None) -> str:
    """What the server said about an error, short, on one line, without the key."""
    message = ""
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict):
            message = str(inner.get("message") or inner.get("detail") or "")
        elif inner:
            message = str(inner)
        if not message and body.get("detail"):
            message = str(body["detail"])
    elif isinstance(body, str):
        message = body
    if not message:
        message = text
    message = " ".join(message.split())
    if secret:
        message = message.replace(secret, "***")
    if len(message) > 200:
        message = message[:197] + "..."
    return f" (the server said: {message})" if message else ""


def _causes(exc: BaseException) -> Iterator[BaseException]:
    seen = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _retry_after(headers) -> float | None:
    try:
        value = float(headers.get("retry-after", ""))
    except (TypeError, ValueError, AttributeError):
        return None
    return max(0.0, value)


def remote_error(endpoint: Endpoint, exc: BaseException, *, model: str | None = None,
                 secret: str | None = None) -> RemoteError:
    """Any failure of a request to ``endpoint`` as a RemoteError: which server, what
    happened, what to check. ``secret`` (the key) is blanked out of anything the server
    said."""
    if isinstance(exc, RemoteError):
        return exc
    import openai

    stage, url, what = endpoint.stage, endpoint.base_url, endpoint.what

    def make(message: str, kind: str, **kw) -> RemoteError:
        return RemoteError(message, url=url, stage=stage, kind=kind, **kw)

    hx = http_library()
    if isinstance(exc, openai.APITimeoutError | hx.TimeoutException):
        return make(f"{what} did not answer within {endpoint.timeout_s:g} s (timeout): check that "
                    f"the server is up and not overloaded, or raise '{stage}.timeout_s'",
                    "timeout", retryable=True)
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        try:
            phrase = http.HTTPStatus(status).phrase
        except ValueError:
            phrase = ""
        try:
            text = exc.response.text
        except Exception:  # noqa: BLE001 - a streamed body that cannot be read: say less
            text = ""
        said = _said(exc.body, text, secret)
        code = f"{status} {phrase}".strip()
        if status in (401, 403):
            if endpoint.api_key_env:
                check = (f"check the key in the environment variable {endpoint.api_key_env} "
                         f"('{stage}.api_key_env')")
            else:
                check = (f"it wants an API key: set '{stage}.api_key_env' to the name of an "
                         "environment variable that holds it")
            return make(f"{what} refused the request ({code}){said}: {check}", "unauthorized",
                        status=status)
        if status == 404:
            asked = f" for model {model!r}" if model else ""
            return make(f"{what} answered {code}{asked}{said}: check '{stage}.model' (the server "
                        f"lists its models at {url}/models) and that '{stage}.base_url' is the "
                        "API's root (usually ending in /v1)", "not_found", status=status)
        if status == 429:
            return make(f"{what} is busy ({code}){said}: try again later, or lower the load on it",
                        "rate_limited", status=status, retryable=True,
                        retry_after=_retry_after(exc.response.headers))
        if status >= 500:
            return make(f"{what} failed ({code}){said}: check the server's log", "server_error",
                        status=status, retryable=True,
                        retry_after=_retry_after(exc.response.headers))
        return make(f"{what} rejected the request ({code}){said}", "rejected", status=status)
    if isinstance(exc, openai.APIConnectionError | hx.TransportError):
        for cause in _causes(exc):
            if isinstance(cause, ConnectionRefusedError) or "refused" in str(cause).lower():
                return make(f"cannot connect to {what}: connection refused: is the server running, "
                            "on that host and port?", "refused", retryable=True)
            if isinstance(cause, socket.gaierror) or "name or service not known" in str(cause).lower():
                return make(f"cannot connect to {what}: the host name {endpoint.host} does not "
                            f"resolve: check '{stage}.base_url'", "unreachable")
            if isinstance(cause, hx.RemoteProtocolError | hx.ReadError):
                return make(f"{what} closed the connection before answering: check that it is "
                            "running (and its log)", "cut", retryable=True)
        cause = next((c for c in _causes(exc) if c is not exc), exc)
        detail = " ".join(str(cause).split()) or type(cause).__name__
        if secret:
            detail = detail.replace(secret, "***")
        return make(f"cannot connect to {what}: {detail}: check '{stage}.base_url' and the "
                    "network", "unreachable", retryable=True)
    if isinstance(exc, openai.APIError):  # an error event inside a stream, or a bad body
        said = _said(getattr(exc, "body", None), str(exc), secret)
        return make(f"{what} reported an error{said}: check the server's log", "server_error")
    detail = " ".join(str(exc).split())[:200]
    if secret:
        detail = detail.replace(secret, "***")
    return make(f"{what} sent an answer Parley cannot read ({type(exc).__name__}: {detail}): is "
                f"'{stage}.base_url' an OpenAI-compatible API?", "bad_response")


def refused_field(exc: BaseException, sent: Sequence[str]) -> str | None:
    """The request field a server's 400 answer to ``exc`` names, or None.

    Servers say it in different places: OpenAI's ``error.param`` (or its message,
    "Unrecognized request argument supplied: NAME"), a FastAPI/pydantic ``detail`` list
    (``loc`` ``["body", NAME]``), vLLM's message quoting that list. The message is searched
    for the names of the fields ``sent``, in their order, as whole words.
    """
    import openai

    if not isinstance(exc, openai.APIStatusError):
        return None
    body = exc.body
    if isinstance(body, dict):
        param = body.get("param")
        if isinstance(param, str) and param.strip():
            return re.split(r"[.\[]", param.strip(), maxsplit=1)[0]
        detail = body.get("detail")
        for item in detail if isinstance(detail, list) else ():
            loc = item.get("loc") if isinstance(item, dict) else None
            if isinstance(loc, list | tuple) and len(loc) > 1 and loc[0] == "body":
                return str(loc[1])
    try:
        text = exc.response.text
    except Exception:  # noqa: BLE001 - a streamed body that cannot be read: only the parsed one
        text = ""
    text = f"{body if isinstance(body, str) else json.dumps(body, default=str)} {text}"
    return next((name for name in sent if re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text)),
                None)


class Retrier:
    """Bounded retries of one remote call. ``again(error)`` sleeps the back-off and says
    whether to try once more: only for an error worth retrying, while retries are left,
    and while ``should_stop()`` is false (checked during the back-off too)."""

    def __init__(self, endpoint: Endpoint, should_stop: Callable[[], bool] = lambda: False) -> None:
        self.endpoint = endpoint
        self.should_stop = should_stop
        self.left = endpoint.retries
        self.tries = 0  # retries made

    def again(self, error: RemoteError) -> bool:
        if not error.retryable or self.left <= 0 or self.should_stop():
            return False
        delay = min(BACKOFF_MAX_S, BACKOFF_S * 2 ** self.tries)
        if error.retry_after is not None:
            delay = min(BACKOFF_MAX_S, max(delay, error.retry_after))
        self.left -= 1
        self.tries += 1
        log.info("%s stage: %s; retrying in %.2f s (%d retr%s left)", self.endpoint.stage,
                 error.kind, delay, self.left, "y" if self.left == 1 else "ies")
        deadline = time.monotonic() + delay
        while time.monotonic() < deadline:
            if self.should_stop():
                return False
            time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
        return True
