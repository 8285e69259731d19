"""``parley-cli serve``: the realtime server in the foreground until Ctrl-C or SIGTERM.

The settings are checked (a non-loopback host needs a strong API key and TLS, or
``--insecure-plaintext``; the port must be free, aiohttp installed) before any model
loads; ``--api-key generate`` makes a key and prints it once; then the engine loads once, with
progress on stderr, and one line says where it serves:
``serving on ws://HOST:PORT/v1/realtime (N pipelines)``. On Ctrl-C or SIGTERM every
connection is closed, every unit stopped and the models released; the exit status is 0.

TLS: ``--tls-cert FILE --tls-key FILE`` (PEM), or ``--tls-self-signed``, which makes a
certificate for this machine's names once and keeps it (``engine.server.tls``). Either is
checked, and the certificate's SHA-256 fingerprint printed (with the CA file clients
verify a self-signed one with), before any model loads; the URL is then ``wss://`` and
the HTTP routes are ``https://``.

``--mcp`` also serves Parley's MCP tools at ``/mcp`` (``engine.server.mcp_route``), each
call on a unit of the pool with this machine's microphone and speaker.

``engine.cli`` builds the subcommand from ``add_serve_arguments`` and calls
``run_serve``; this module never imports the command line back.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time

from collections.abc import Mapping
from typing import TYPE_CHECKING

from engine.cli.output import show_choices, show_progress
from engine.config import EngineConfig
from engine.errors import ConfigError
from engine.server import require_aiohttp
from engine.server.server_settings import (IDLE_TIMEOUT_S, MAX_SESSION_S, MIB, ServerSettings,
                                           check_address, generate_key)

if TYPE_CHECKING:
    from engine.engine import Engine
    from engine.server.tls import TlsCertificate

API_KEY_ENV = "PARLEY_API_KEY"
GENERATE_KEY = "generate"  # --api-key generate: a new random key, printed once


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """The server's own flags (the engine settings are added by the caller)."""
    group = parser.add_argument_group("server")
    group.add_argument("--host", default="127.0.0.1",
                       help="address to listen on (default 127.0.0.1; any other than 127.0.0.1, "
                            "::1 or localhost needs a strong API key and TLS)")
    group.add_argument("--port", type=int, default=8765, help="TCP port (default 8765; 0: any free)")
    group.add_argument("--num-pipelines", type=int, default=1, metavar="N",
                       help="pipeline units over one set of models: at most N clients at once "
                            "(default 1)")
    group.add_argument("--api-key", default=None, metavar="KEY",
                       help=f"require 'Authorization: Bearer KEY' (prefer the {API_KEY_ENV} "
                            "environment variable: a flag shows in the process list); "
                            f"'{GENERATE_KEY}' makes a random key and prints it once. Off "
                            "loopback a key needs 20+ characters, 10+ different ones")
    group.add_argument("--allow-origin", action="append", default=[], metavar="ORIGIN",
                       help="a browser origin allowed to connect, e.g. http://localhost:3000 "
                            "(repeatable; requests with any other Origin header are refused; "
                            "the HTTP routes answer CORS for these)")
    group.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                       help="a host name clients may reach the server by besides this "
                            "machine's own names and addresses, e.g. a reverse proxy's "
                            "(repeatable; a request for any other Host is refused: DNS "
                            "rebinding)")
    group.add_argument("--max-message-bytes", type=int, default=MIB, metavar="BYTES",
                       help="largest client message answered normally (default 1 MiB; bigger "
                            "ones get an error event, 4x this closes the connection)")
    group.add_argument("--max-buffer-s", type=float, default=15.0, metavar="SECONDS",
                       help="input audio a session may have waiting for its pipeline (default 15)")
    group.add_argument("--max-events-per-s", type=float, default=200.0, metavar="RATE",
                       help="client events per second per session (default 200)")
    group.add_argument("--idle-timeout-s", type=float, default=IDLE_TIMEOUT_S, metavar="SECONDS",
                       help="close a session with no speech and no client event (but "
                            f"audio) for this long, freeing its pipeline (default "
                            f"{IDLE_TIMEOUT_S:g}; 0: never)")
    group.add_argument("--max-session-s", type=float, default=MAX_SESSION_S, metavar="SECONDS",
                       help=f"close any session after this long (default {MAX_SESSION_S:g}; "
                            "0: never)")
    group.add_argument("--queue", type=int, default=0, metavar="N",
                       help="a waiting room: up to N clients that connect while every pipeline "
                            "is busy are admitted and wait for one, instead of a 503 (default "
                            "0: refused)")
    group.add_argument("--queue-timeout-s", type=float, default=120.0, metavar="SECONDS",
                       help="how long a client waits in the queue at most before it gets a "
                            "queue_timeout error (default 120)")
    group.add_argument("--tls-cert", default=None, metavar="FILE",
                       help="serve TLS (wss://, https://) with this PEM certificate (chain); "
                            "needs --tls-key")
    group.add_argument("--tls-key", default=None, metavar="FILE",
                       help="the unencrypted PEM private key of --tls-cert")
    group.add_argument("--tls-self-signed", action="store_true",
                       help="serve TLS with a certificate Parley makes once and keeps for this "
                            "machine's names and addresses; prints its fingerprint and the CA "
                            "file clients verify it with")
    group.add_argument("--insecure-plaintext", action="store_true",
                       help="serve plain ws:// and http:// on a host other machines reach: "
                            "INSECURE, anyone on the network can read the API key, the audio "
                            "and the text, and use the key (prefer --tls-self-signed)")
    group.add_argument("--mcp", action="store_true",
                       help="also serve Parley's MCP tools (speak, listen, ask) at /mcp over "
                            "streamable HTTP, on THIS machine's microphone and speaker (the "
                            "audio devices of the engine settings); behind the same API key")


def settings_from_args(args: argparse.Namespace, environ: Mapping[str, str] | None = None
                       ) -> ServerSettings:
    """ServerSettings from the flags; the API key falls back to PARLEY_API_KEY, and
    ``--api-key generate`` makes one (which ``run_serve`` prints)."""
    env: Mapping[str, str] = os.environ if environ is None else environ
    key = args.api_key if args.api_key is not None else env.get(API_KEY_ENV) or None
    if args.api_key == GENERATE_KEY:
        key = generate_key()
    return ServerSettings(host=args.host, port=args.port, num_pipelines=args.num_pipelines,
                          api_key=key, allow_origins=tuple(args.allow_origin),
                          max_message_bytes=args.max_message_bytes, max_buffer_s=args.max_buffer_s,
                          max_events_per_s=args.max_events_per_s, tls_cert=args.tls_cert,
                          tls_key=args.tls_key, tls_self_signed=args.tls_self_signed,
                          insecure_plaintext=args.insecure_plaintext,
                          allow_hosts=tuple(args.allow_host), idle_timeout_s=args.idle_timeout_s,
                          max_session_s=args.max_session_s, queue=args.queue,
                          queue_timeout_s=args.queue_timeout_s)


def show_tls(cert: TlsCertificate) -> None:
    """Say which certificate the server uses and how a client trusts it (stderr)."""
    if cert.ca_file is None:
        print(f"TLS: certificate {cert.cert_file}", file=sys.stderr)
    else:
        kept = "made now" if cert.made else "kept"
        print(f"TLS: self-signed certificate ({kept} in {cert.cert_file.parent}) for "
              f"{', '.join(cert.names)}", file=sys.stderr)
    print(f"TLS certificate SHA-256 fingerprint: {cert.fingerprint}", file=sys.stderr)
    if cert.ca_file is not None:
        print(f"clients verify it with the CA file {cert.ca_file}", file=sys.stderr, flush=True)
    for note in cert.notes:  # e.g. an address the certificate lacks: `parley-cli tls rotate`
        print(note, file=sys.stderr, flush=True)


def server_config(config: EngineConfig, args: argparse.Namespace, units: int) -> EngineConfig:
    """The engine settings of a server: ``units`` pipelines, live transcription on (the
    Realtime API streams the user's words) unless the flag turned it off."""
    asked = getattr(args, "units", None)
    if asked is not None and int(asked) != units:
        raise ConfigError(f"--units {asked}: a server's units are its pipelines; use "
                          f"--num-pipelines {asked}")
    overrides: dict = {"units": units}
    if getattr(args, "turns.live_transcription", None) is None:
        overrides["turns.live_transcription"] = True
    return config.with_overrides(overrides)


def load_server_engine(config: EngineConfig) -> Engine:
    """Resolve placements (errors before anything loads), show them, load the models once."""
    # Imported here: building the parser (every parley-cli command) imports this module.
    from engine.engine import Engine

    engine = Engine(config)
    show_choices(engine)
    if engine.mlx_in_use and config.units > 1 and config.turns.live_transcription:
        print(f"note: live transcription is off: {config.units} pipeline units share the MLX "
              "lock, and partial transcripts would hold it while the other units wait",
              file=sys.stderr)
    started = time.perf_counter()
    engine.load(show_progress)
    print(f"models ready in {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    return engine


def _wait_for_signal() -> None:
    """Block until Ctrl-C or SIGTERM."""
    stop = threading.Event()
    handlers = {sig: signal.signal(sig, lambda *_: stop.set())
                for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        while not stop.wait(0.5):
            pass
    finally:
        for sig, old in handlers.items():
            signal.signal(sig, old)


def _require_mcp() -> None:
    """MissingDependencyError (with the pip command) unless the MCP SDK is installed."""
    import importlib.util

    from engine.errors import MissingDependencyError

    if importlib.util.find_spec("mcp") is None:
        raise MissingDependencyError("parley-cli serve --mcp", "mcp", "mcp")


def _machine_devices(config: EngineConfig):
    """What ``--mcp``'s tool calls hear and speak on: this machine's microphone and
    speaker, opened for each call (``engine.server.mcp_route.McpDevices``)."""
    from engine.server.mcp_route import McpDevices

    def devices() -> McpDevices:
        from engine.audio.mic import MicSource
        from engine.audio.speaker import SpeakerSink

        return McpDevices(MicSource(config.audio.input_device, config.audio.capture_buffer_s),
                          SpeakerSink(config.audio.output_device))

    return devices


def run_serve(args: argparse.Namespace, config: EngineConfig) -> int:
    """Serve until interrupted; returns the exit status."""
    settings = settings_from_args(args)
    settings.check()
    if args.api_key == GENERATE_KEY:  # shown once, here: the only place it is ever printed
        print(f"API key (generated; clients send 'Authorization: Bearer <key>'): "
              f"{settings.api_key}", file=sys.stderr, flush=True)
    if settings.insecure_plaintext and not settings.loopback and not settings.tls:
        print(f"warning: serving plain ws:// and http:// on {settings.host} "
              "(--insecure-plaintext): the API key, the audio and the text cross the network "
              "in clear", file=sys.stderr, flush=True)
    require_aiohttp()
    if args.mcp:
        _require_mcp()
    check_address(settings)
    from engine.server.tls import resolve_tls  # imports ssl: only when serving

    tls = resolve_tls(settings)  # a bad file fails here, before minutes of loading
    if tls is not None:
        show_tls(tls)
    engine = load_server_engine(server_config(config, args, settings.num_pipelines))
    from engine.server.runner import ServerThread  # imports aiohttp

    server = ServerThread(engine, settings, mcp_devices=_machine_devices(engine.config)
                          if args.mcp else None)
    try:
        server.start()
        if args.mcp:
            mcp_url = settings.page_url(server.port) + "mcp"
            print(f"MCP tools: {mcp_url} (speak, listen and ask on this machine's microphone "
                  "and speaker)", file=sys.stderr, flush=True)
        # Before 'serving on', the line that says the server is ready.
        print(f"web page: {settings.page_url(server.port)} (open it in a browser to talk)",
              file=sys.stderr, flush=True)
        print(f"serving on {server.url} ({settings.num_pipelines} "
              f"pipeline{'s' if settings.num_pipelines != 1 else ''})", file=sys.stderr, flush=True)
        _wait_for_signal()
        print("stopping: closing connections", file=sys.stderr, flush=True)
    finally:
        if not server.stop(15.0):
            print("warning: the server thread did not stop in time", file=sys.stderr)
        engine.close()
    return 0
