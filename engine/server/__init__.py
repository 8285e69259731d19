"""Realtime mode: Parley's pipeline units served over the OpenAI Realtime API.

``parley-cli serve`` (``engine.cli.serve``) loads one engine and lends its N pipeline
units to WebSocket clients (``/v1/realtime``), one unit per connection
(``engine.server.pool``). ``engine.server.protocol`` speaks the Realtime protocol and
knows nothing of HTTP; ``engine.server.app`` is the aiohttp application around it (auth,
origins, limits); ``engine.server.runner`` runs it on its own event loop thread, for the
CLI, the GUI and the benchmark.

aiohttp is the optional extra ``parley[server]``: nothing here imports it at module level
except ``app`` and ``runner``, so ``require_aiohttp`` can say how to install it first.
"""

from __future__ import annotations

import importlib.util

from engine.errors import MissingDependencyError


def require_aiohttp() -> None:
    """MissingDependencyError (with the pip command) unless aiohttp is installed."""
    try:
        found = importlib.util.find_spec("aiohttp") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise MissingDependencyError("parley-cli serve (realtime mode)", "aiohttp", "server")
