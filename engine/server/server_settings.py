"""ServerSettings: where the realtime server listens, who may use it, its limits, and its
TLS certificate (``engine.server.tls`` reads and makes the files)."""

from __future__ import annotations

import math
import re
import secrets
import socket
from dataclasses import dataclass, field

from engine.errors import ConfigError, ParleyError

#: Hosts that only this machine can reach: serving on them needs no API key.
LOOPBACK_HOSTS = ("127.0.0.1", "::1", "localhost")

#: The transport refuses (closes the socket on) a message this many times the soft limit.
HARD_LIMIT_FACTOR = 4

MIB = 1024 * 1024

#: A key that guards a server other machines reach: at least this long...
MIN_KEY_CHARS = 20
#: ...and with this many different characters (``aaaa...``, ``abab...`` are refused).
MIN_KEY_DISTINCT = 10
#: What a browser can send as the key subprotocol (README "The key in a browser").
_KEY_CHARS = re.compile(r"[A-Za-z0-9._~-]+")
#: How to make a good key, in every message that refuses one.
KEY_RECIPE = ("make one with --api-key generate, or python -c \"import secrets; "
              "print(secrets.token_urlsafe(32))\"")
#: A host name as --allow-host takes it (no scheme, port or path).
_HOST_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*")

#: Default seconds without the user's speech or a client event (other than audio) before
#: a session is closed and its unit freed (not while a reply plays). A voice conversation
#: quiet for five minutes has been left (a forgotten browser tab streams silence): the
#: unit is worth more to the next client than to it.
IDLE_TIMEOUT_S = 300.0
#: Default longest session, in seconds, however active: one client cannot keep a unit
#: for ever. OpenAI's Realtime API ends its sessions at 60 minutes too.
MAX_SESSION_S = 3600.0


def generate_key() -> str:
    """A new random API key (256 bits, URL-safe: a browser can send it)."""
    return secrets.token_urlsafe(32)


def key_problem(key: str) -> str | None:
    """Why ``key`` is too weak to guard a server other machines reach, or None."""
    if len(key) < MIN_KEY_CHARS:
        return f"it has {len(key)} characters; at least {MIN_KEY_CHARS} are needed"
    if len(set(key)) < MIN_KEY_DISTINCT:
        return (f"it uses {len(set(key))} different characters; at least "
                f"{MIN_KEY_DISTINCT} are needed")
    return None


@dataclass(frozen=True)
class ServerSettings:
    """The realtime server's settings; ``check`` says what is wrong before anything loads.

    ``max_message_bytes`` is a soft limit: a bigger client message is answered with an
    ``error`` event and the connection stays usable; the transport closes the socket only
    at ``HARD_LIMIT_FACTOR`` times it. ``max_buffer_s``: seconds of input audio a session
    may have waiting for its pipeline. ``max_events_per_s``: a token bucket per session,
    refilled at that rate, holding at most one second's worth.

    TLS: ``tls_cert`` and ``tls_key`` name PEM files (``--tls-cert``/``--tls-key``, both or
    neither), or ``tls_self_signed`` has Parley make and keep a certificate for this
    machine's names (``--tls-self-signed``). With either, the WebSocket and the HTTP
    routes are served over TLS only (``wss://``, ``https://``).

    Off loopback, plain ``ws://``/``http://`` is refused unless ``insecure_plaintext``
    (``--insecure-plaintext``) says the user accepts that the key, the audio and the
    text cross the network readable by anyone on it; the API key must then be strong
    (``key_problem``). ``allow_hosts``: names besides the machine's own that a client may
    reach the server by (the ``Host`` header; ``--allow-host``, e.g. a reverse proxy's
    name). ``idle_timeout_s`` and ``max_session_s`` (0: no limit) close a session that is
    idle that long, or has lasted that long, and free its unit.
    """

    host: str = "127.0.0.1"
    port: int = 8765
    num_pipelines: int = 1
    api_key: str | None = field(default=None, repr=False)  # never printed, never logged
    allow_origins: tuple[str, ...] = ()
    max_message_bytes: int = MIB
    max_buffer_s: float = 15.0
    max_events_per_s: float = 200.0
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_self_signed: bool = False
    insecure_plaintext: bool = False
    allow_hosts: tuple[str, ...] = ()
    idle_timeout_s: float = IDLE_TIMEOUT_S
    max_session_s: float = MAX_SESSION_S
    # The waiting room (engine.server.waiting_room): clients that find every unit busy
    # wait for one, at most queue of them and each at most queue_timeout_s; 0: refused (503).
    queue: int = 0
    queue_timeout_s: float = 120.0

    @property
    def loopback(self) -> bool:
        """True when only this machine can connect."""
        return self.host in LOOPBACK_HOSTS

    @property
    def tls(self) -> bool:
        """True when the server speaks TLS (its own files, or a self-signed certificate)."""
        return self.tls_self_signed or bool(self.tls_cert or self.tls_key)

    @property
    def hard_message_bytes(self) -> int:
        """The transport's cap: a message this big closes the connection."""
        return self.max_message_bytes * HARD_LIMIT_FACTOR

    def check(self) -> None:
        """ConfigError naming the flag, for any value the server cannot run with."""
        if not self.host:
            raise ConfigError("--host must not be empty")
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"--port must be from 0 to 65535; got {self.port}")
        if not 1 <= self.num_pipelines <= 64:
            raise ConfigError(f"--num-pipelines must be from 1 to 64; got {self.num_pipelines}")
        if self.api_key is not None and not self.api_key.strip():
            raise ConfigError("the API key is empty: pass a non-empty --api-key (or PARLEY_API_KEY)")
        if not self.loopback and not self.api_key:
            raise ConfigError(
                f"serving on {self.host} lets other machines connect: set an API key with "
                "--api-key KEY or the environment variable PARLEY_API_KEY (or serve on "
                f"127.0.0.1); {KEY_RECIPE}")
        if self.api_key is not None and not _KEY_CHARS.fullmatch(self.api_key):
            raise ConfigError("the API key may hold only letters, digits and -_.~ (what a "
                              f"browser can send as a WebSocket subprotocol); {KEY_RECIPE}")
        if not self.loopback and self.api_key and (weak := key_problem(self.api_key)):
            raise ConfigError(f"the API key is too easy to guess for a server on {self.host}: "
                              f"{weak}; {KEY_RECIPE}")
        if not self.loopback and not self.tls and not self.insecure_plaintext:
            raise ConfigError(
                f"serving on {self.host} without TLS sends the API key, the audio and the "
                "text across the network in clear: serve TLS with --tls-self-signed (or "
                "--tls-cert FILE --tls-key FILE), or accept the risk with --insecure-plaintext")
        if self.max_message_bytes < 1024:
            raise ConfigError(f"--max-message-bytes must be at least 1024; got {self.max_message_bytes}")
        if not (math.isfinite(self.max_buffer_s) and 0.1 <= self.max_buffer_s <= 3600):
            raise ConfigError(f"--max-buffer-s must be from 0.1 to 3600; got {self.max_buffer_s}")
        if not (math.isfinite(self.max_events_per_s) and 1 <= self.max_events_per_s <= 100000):
            raise ConfigError(f"--max-events-per-s must be from 1 to 100000; got {self.max_events_per_s}")
        if self.tls_self_signed and (self.tls_cert or self.tls_key):
            raise ConfigError("--tls-self-signed makes its own certificate: pass it alone, or "
                              "--tls-cert FILE --tls-key FILE without it")
        if bool(self.tls_cert) != bool(self.tls_key):
            given, missing = ("--tls-cert", "--tls-key") if self.tls_cert else ("--tls-key", "--tls-cert")
            raise ConfigError(f"{given} needs {missing} too: TLS takes the certificate and its "
                              "private key (PEM files), or --tls-self-signed")
        for origin in self.allow_origins:
            if not origin or origin != origin.strip():
                raise ConfigError(f"--allow-origin {origin!r}: expected an origin such as "
                                  "http://localhost:3000")
        for host in self.allow_hosts:
            if not _HOST_NAME.fullmatch(host.rstrip(".")):
                raise ConfigError(f"--allow-host {host!r}: expected a host name such as "
                                  "parley.example.org (no scheme, port or path)")
        for value, flag in ((self.idle_timeout_s, "--idle-timeout-s"),
                            (self.max_session_s, "--max-session-s")):
            if not (math.isfinite(value) and (value == 0 or 1 <= value <= 7 * 86400)):
                raise ConfigError(f"{flag} must be 0 (no limit) or from 1 to 604800 seconds; "
                                  f"got {value}")
        if not 0 <= self.queue <= 1000:
            raise ConfigError(f"--queue must be from 0 (no waiting room) to 1000; got {self.queue}")
        if not (math.isfinite(self.queue_timeout_s) and 1 <= self.queue_timeout_s <= 3600):
            raise ConfigError(f"--queue-timeout-s must be from 1 to 3600 seconds; got "
                              f"{self.queue_timeout_s}")

    def url(self, port: int | None = None) -> str:
        """The WebSocket URL clients connect to (``wss://`` with TLS)."""
        return f"{'wss' if self.tls else 'ws'}://{self._netloc(port)}/v1/realtime"

    def http_url(self, port: int | None = None) -> str:
        """The root of the HTTP routes (``https://host:port/v1``, ``http://`` without TLS)."""
        return f"{'https' if self.tls else 'http'}://{self._netloc(port)}/v1"

    def page_url(self, port: int | None = None) -> str:
        """The web page's address (``engine.server.page``): ``https://host:port/`` with TLS."""
        return f"{'https' if self.tls else 'http'}://{self._netloc(port)}/"

    def _netloc(self, port: int | None) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port if port is None else port}"


def check_address(settings: ServerSettings) -> None:
    """ParleyError if the server could not listen on its address now (the port is in use,
    the host is not this machine's): run it before models load, so that fails at once.
    Port 0 (any free port) is not checked; the server's own bind checks again."""
    if settings.port == 0:
        return
    try:
        infos = socket.getaddrinfo(settings.host, settings.port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ConfigError(f"host {settings.host!r} cannot be resolved: {exc.strerror}") from None
    for family, _type, _proto, _name, address in infos:
        try:
            # create_server sets SO_REUSEADDR as aiohttp does: only a live listener fails.
            with socket.create_server(address[:2], family=family):
                pass
        except OSError as exc:
            raise ParleyError(f"cannot listen on {settings.host} port {settings.port}: "
                              f"{exc.strerror or exc}") from None
