"""ServerSettings: where the realtime server listens, who may use it, its limits, and its
TLS certificate (``engine.server.tls`` reads and makes the files)."""

from __future__ import annotations

import math
import socket
from dataclasses import dataclass, field

from engine.errors import ConfigError, ParleyError

#: Hosts that only this machine can reach: serving on them needs no API key.
LOOPBACK_HOSTS = ("127.0.0.1", "::1", "localhost")

#: The transport refuses (closes the socket on) a message this many times the soft limit.
HARD_LIMIT_FACTOR = 4

MIB = 1024 * 1024


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
                "127.0.0.1)")
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
