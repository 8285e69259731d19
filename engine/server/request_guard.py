"""The checks every request to the realtime server passes before its route runs.

In order:

1. ``Host``: the name the client reached the server by must be one of the machine's own
   (``engine.server.tls.machine_names``: localhost, the host name, its addresses), the
   bound host, any IP address, a ``*.localhost`` name, or a name given with
   ``--allow-host``; else 403 ``host_not_allowed``. A page whose DNS name someone pointed
   at this server (DNS rebinding) sends its own name here, so it cannot read
   ``/v1/pool`` or ``/v1/models`` of a keyless loopback server. A request without a
   ``Host`` header (HTTP/1.0; never a browser) is not refused for it.
2. ``Origin``: a browser origin not allowed with ``--allow-origin`` (nor the page's own,
   ``same_origin``) is refused (403 ``origin_not_allowed``).
3. CORS: a preflight (``OPTIONS`` with ``Access-Control-Request-Method``) from an allowed
   origin to an HTTP route (``/v1/...`` but the WebSocket) is answered 204, allowing
   ``Authorization`` and ``Content-Type``; those routes' answers to an allowed origin
   carry ``Access-Control-Allow-Origin`` (also when streamed: ``install`` hooks the
   response's headers). Another origin gets no CORS header (and step 2's 403).
4. The API key, when one is set (not for the page, which holds no secret): an address
   that sent too many wrong keys is answered 429 with ``Retry-After`` before its key is
   looked at (``engine.server.limits.KeyThrottle``); a missing or wrong key is 401. The
   key is compared in constant time and never logged or echoed.

Every refusal is logged at most once per client address and reason per minute
(``RefusalLog``).
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import time
from collections.abc import Callable

from aiohttp import web

from engine.server.limits import KeyThrottle
from engine.server.server_settings import ServerSettings

log = logging.getLogger("parley.server")

REFUSAL_LOG_PERIOD_S = 60.0
KEY_SUBPROTOCOL = "openai-insecure-api-key"  # a browser's key, as OpenAI's browser clients send it
REALTIME_PATH = "/v1/realtime"
CORS_ALLOW_METHODS = "GET, POST, OPTIONS"
CORS_ALLOW_HEADERS = "Authorization, Content-Type"
CORS_EXPOSE_HEADERS = "Retry-After"
CORS_MAX_AGE_S = 600
_ORIGIN_OK = web.RequestKey("parley_cors_origin", str)  # the allowed origin its answer names


def refusal(status: int, code: str, message: str, kind: str = "invalid_request_error",
            headers: dict[str, str] | None = None) -> web.Response:
    """An answer in OpenAI's error shape (``{"error": {type, code, message, param}}``)."""
    headers = dict(headers or {})
    if status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    return web.json_response({"error": {"type": kind, "code": code, "message": message,
                                        "param": None}}, status=status, headers=headers)


class RefusalLog:
    """Logs a refusal at most once per client address and reason per ``period_s``: a
    client retrying in a loop must not flood the log. The next line says how many were
    held back."""

    def __init__(self, period_s: float = REFUSAL_LOG_PERIOD_S,
                 clock: Callable[[], float] = time.monotonic, max_addresses: int = 4096) -> None:
        self.period_s = period_s
        self._clock = clock
        self._max = max_addresses
        # (address, reason) -> (logged at, refusals held back since)
        self._seen: dict[tuple[str, str], tuple[float, int]] = {}

    def refused(self, address: str, reason: str, message: str, *args,
                exc_info: bool = False) -> bool:
        """Log ``message % args`` unless ``address`` was refused for ``reason`` within the
        period; True if it was logged."""
        now = self._clock()
        key = (address, reason)
        seen = self._seen.get(key)
        if seen is not None and now - seen[0] < self.period_s:
            self._seen[key] = (seen[0], seen[1] + 1)
            return False
        if seen is None and len(self._seen) >= self._max:  # forget addresses quiet for a period
            self._seen = {a: v for a, v in self._seen.items() if now - v[0] < self.period_s}
            if len(self._seen) >= self._max:
                self._seen.clear()
        held = seen[1] if seen is not None else 0
        self._seen[key] = (now, 0)
        more = f" ({held} more from {address} not logged since)" if held else ""
        log.warning(message + "%s", *args, more, exc_info=exc_info)
        return True


def _key_matches(header: str, key: str) -> bool:
    scheme, _, token = header.partition(" ")
    # compare_digest runs in constant time for equal lengths: no timing leak of the key.
    return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), key.encode())


def subprotocol_key(header: str) -> str | None:
    """The key a browser sent in ``Sec-WebSocket-Protocol`` as
    ``openai-insecure-api-key.<key>``; None without one."""
    for token in header.split(","):
        name, dot, value = token.strip().partition(".")
        if dot and name == KEY_SUBPROTOCOL:
            return value
    return None


def has_key(request: web.Request, key: str) -> bool:
    """True if ``request`` carries ``key``: the Authorization header, or (a browser's
    WebSocket) the key subprotocol."""
    if _key_matches(request.headers.get("Authorization", ""), key):
        return True
    sent = subprotocol_key(request.headers.get("Sec-WebSocket-Protocol", ""))
    return sent is not None and hmac.compare_digest(sent.encode(), key.encode())


def _sent_a_key(request: web.Request) -> bool:
    return ("Authorization" in request.headers
            or subprotocol_key(request.headers.get("Sec-WebSocket-Protocol", "")) is not None)


def host_name(host: str) -> str:
    """The name part of a ``Host`` header (no port, no brackets, no final dot), lowercase."""
    host = host.strip()
    if host.startswith("["):  # [IPv6]:port
        name = host[1:].partition("]")[0]
    elif host.count(":") == 1:  # name:port
        name = host.partition(":")[0]
    else:  # a name alone, or a bare IPv6 address
        name = host
    return name.rstrip(".").lower()


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


def same_origin(request: web.Request, origin: str, own_names: frozenset[str]) -> bool:
    """True if ``origin`` is the server's own (the page it served), reached by one of
    ``own_names`` or an IP address: a DNS name that is not this machine's could be a
    rebinding (another site's name pointed at this server), so it needs --allow-origin."""
    if origin != f"{request.scheme}://{request.host}":
        return False
    name = host_name(request.host)
    return _is_address(name) or name in own_names


def host_allowed(name: str, allowed: frozenset[str]) -> bool:
    """Whether a client may reach the server by ``name`` (``host_name`` of its ``Host``):
    an IP address, a ``localhost`` name (browsers resolve those to loopback themselves),
    or one of ``allowed``."""
    return (_is_address(name) or name == "localhost" or name.endswith(".localhost")
            or name in allowed)


def _is_http_route(path: str) -> bool:
    """The routes CORS applies to: the HTTP API, not the WebSocket nor the page."""
    return path.startswith("/v1/") and path != REALTIME_PATH


def _add_cors(headers, origin: str) -> None:
    headers["Access-Control-Allow-Origin"] = origin
    headers["Access-Control-Expose-Headers"] = CORS_EXPOSE_HEADERS
    vary = headers.get("Vary")
    if not vary:
        headers["Vary"] = "Origin"
    elif "origin" not in vary.lower():
        headers["Vary"] = f"{vary}, Origin"


class RequestGuard:
    """The checks of the module doc for one server's settings. ``install`` puts them on an
    application; ``middleware`` alone checks but cannot label a streamed answer for CORS."""

    def __init__(self, settings: ServerSettings, throttle: KeyThrottle | None = None,
                 refusals: RefusalLog | None = None,
                 own_names: tuple[str, ...] | None = None) -> None:
        self.settings = settings
        self.throttle = KeyThrottle() if throttle is None else throttle
        self.refusals = RefusalLog() if refusals is None else refusals
        if own_names is None:
            from engine.server.tls import machine_names

            own_names = machine_names()
        self.own_names = frozenset(host_name(n) for n in (*own_names, settings.host))
        self.allowed_hosts = self.own_names | {host_name(n) for n in settings.allow_hosts}

    def install(self, app: web.Application) -> None:
        """Check every request of ``app`` and label its CORS answers, streamed ones too."""
        app.middlewares.append(self.middleware)
        app.on_response_prepare.append(self._label_cors)

    async def _label_cors(self, request: web.Request, response: web.StreamResponse) -> None:
        origin = request.get(_ORIGIN_OK)
        if origin is not None:
            _add_cors(response.headers, origin)

    @web.middleware
    async def middleware(self, request: web.Request, handler):
        """The checks, in the module doc's order; then the route."""
        address = request.remote or "unknown"
        host = request.headers.get("Host")
        if host is not None and not host_allowed(host_name(host), self.allowed_hosts):
            self.refusals.refused(address, "host_not_allowed", "refused a request from %s for "
                                  "host %r (not this machine's; --allow-host NAME allows it)",
                                  address, host[:200])
            return refusal(403, "host_not_allowed", f"this server does not answer to the name "
                           f"{host_name(host)[:200]!r}; start it with --allow-host NAME to allow it")
        origin = request.headers.get("Origin")
        if (origin is not None and origin not in self.settings.allow_origins
                and not same_origin(request, origin, self.own_names)):
            self.refusals.refused(address, "origin_not_allowed", "refused a request from origin "
                                  "%r (not allowed by --allow-origin)", origin[:200])
            return refusal(403, "origin_not_allowed", "this origin may not use the server; "
                           "start it with --allow-origin ORIGIN")
        if origin is not None and _is_http_route(request.path):
            request[_ORIGIN_OK] = origin
            if request.method == "OPTIONS" and "Access-Control-Request-Method" in request.headers:
                response = web.Response(status=204, headers={
                    "Access-Control-Allow-Methods": CORS_ALLOW_METHODS,
                    "Access-Control-Allow-Headers": CORS_ALLOW_HEADERS,
                    "Access-Control-Max-Age": str(CORS_MAX_AGE_S)})
                return response
        refused = self._check_key(request, address)
        if refused is not None:
            return refused
        return await handler(request)

    def _check_key(self, request: web.Request, address: str) -> web.Response | None:
        """None if the request may go on; else its 429 or 401."""
        from engine.server.page import is_page_path

        key = self.settings.api_key
        if not key or is_page_path(request.path):
            return None
        wait = self.throttle.retry_after(address)
        if wait is None:
            if has_key(request, key):
                self.throttle.succeeded(address)
                return None
            # Only a key that was sent and wrong counts as a guess (not a page that has
            # no key yet).
            if _sent_a_key(request):
                wait = self.throttle.failed(address)
            if wait is None:
                self.refusals.refused(address, "invalid_api_key", "refused a request from %s: "
                                      "missing or wrong API key", address)
                return refusal(401, "invalid_api_key", "missing or wrong API key: send "
                               "'Authorization: Bearer <key>' (a browser's WebSocket: the "
                               f"subprotocol '{KEY_SUBPROTOCOL}.<key>')")
        self.refusals.refused(address, "too_many_wrong_keys", "refused %s for %d s: too many "
                              "wrong API keys", address, wait)
        return refusal(429, "too_many_wrong_keys", f"too many wrong API keys from this address: "
                       f"try again in {wait} s", headers={"Retry-After": str(wait)})


def guard(settings: ServerSettings):
    """The middleware of a ``RequestGuard`` over ``settings`` (``RequestGuard.install``
    also labels streamed CORS answers)."""
    return RequestGuard(settings).middleware
