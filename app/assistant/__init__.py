"""The Assistant tab: voice, speed, who the assistant is, voice preview."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.assistant.panel import AssistantPanel
    from app.core.window_api import WindowApi


def install(window: WindowApi) -> AssistantPanel:
    """Add the Assistant tab and File > New conversation to ``window`` (once); returns
    the ``AssistantPanel``. See ``app.assistant.panel.install``."""
    # Imported here, not at the top: the controller's jobs (``app.assistant.jobs``) can
    # be imported without the panel.
    from app.assistant.panel import install as install_panel

    return install_panel(window)
