"""The Server tab: realtime mode served from the app."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.core.window_api import WindowApi
    from app.server.panel import ServerPanel


def install(window: WindowApi) -> ServerPanel:
    """Add the Server tab to ``window``: the realtime API served by an engine of its own
    on the desktop's models (shared, not reloaded). Its tables are drawn only while the
    tab is shown; closing the window stops serving. Returns the ``ServerPanel``."""
    # Imported here, not at the top: the controller's module can be imported alone.
    from app.server.controller import ServerController
    from app.server.panel import ServerPanel

    c = window.controller
    server = ServerController(lambda: c.config, c.registry, window.widget)
    panel = ServerPanel(server, window.settings)
    window.add_tab("Server", panel)
    window.on_tick(lambda _snap: panel.tick(), shown=panel)
    window.on_close(server.shutdown)
    return panel
