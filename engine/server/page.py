"""The web page of realtime mode: ``GET /`` and its files under ``/web/``, from
``engine/server/web/`` (plain JavaScript modules and CSS, package data: no build step).

The page holds no secret, so it is served without the API key (a browser cannot send a
header when it opens a page); the page sends the key itself, on ``fetch`` as
``Authorization: Bearer`` and on the WebSocket as the subprotocol
``openai-insecure-api-key.<key>`` (``engine.server.app``). Only the files in the folder
are served, each read once, with a content security policy that lets the page talk to
its own origin and nothing else.
"""

from __future__ import annotations

from importlib import resources

from aiohttp import web

_TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css",
          ".svg": "image/svg+xml"}

# 'self' in connect-src covers ws:// and wss:// of the page's own origin (CSP level 3).
_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; connect-src 'self'; img-src 'self' data:; "
                               "object-src 'none'; base-uri 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def page_files() -> dict[str, tuple[bytes, str]]:
    """Every file of the page by name: its bytes and content type."""
    folder = resources.files("engine.server").joinpath("web")
    files = {}
    for entry in folder.iterdir():
        suffix = "." + entry.name.rpartition(".")[2]
        if entry.is_file() and suffix in _TYPES:
            files[entry.name] = (entry.read_bytes(), _TYPES[suffix])
    if "index.html" not in files:
        raise FileNotFoundError(f"the web page is missing from {folder} (index.html)")
    return files


def is_page_path(path: str) -> bool:
    """True for the page's own routes, which need no API key (the Origin rule still
    applies)."""
    return path == "/" or path.startswith("/web/")


class WebPage:
    """Serves the page's files; ``register`` adds its routes to an application."""

    def __init__(self) -> None:
        self.files = page_files()

    def register(self, app: web.Application) -> None:
        """Adds ``GET /`` and ``GET /web/<name>`` to ``app``."""
        app.router.add_get("/", self.index)
        app.router.add_get("/web/{name}", self.file)

    def _answer(self, name: str) -> web.Response:
        body, kind = self.files[name]
        charset = None if kind.startswith("image/") else "utf-8"
        return web.Response(body=body, content_type=kind, charset=charset, headers=_HEADERS)

    async def index(self, request: web.Request) -> web.Response:
        """``GET /``: the page."""
        return self._answer("index.html")

    async def file(self, request: web.Request) -> web.Response:
        """``GET /web/<name>``: one of the page's files; 404 for any other name."""
        name = request.match_info["name"]
        if name not in self.files:
            raise web.HTTPNotFound(text=f"no file {name!r} in the web page")
        return self._answer(name)
