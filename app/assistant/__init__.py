"""The Assistant tab: voice, speed, who the assistant is, voice preview."""


def install(window):
    """Add the Assistant tab and File > New conversation to ``window`` (once); returns
    the ``AssistantPanel``. See ``app.assistant.panel.install``."""
    # Imported here, not at the top: the controller's jobs (``app.assistant.jobs``) can
    # be imported without the panel.
    from app.assistant.panel import install as install_panel

    return install_panel(window)
