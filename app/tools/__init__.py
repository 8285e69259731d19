"""The assistant's tools in the window: asking before a tool with side effects runs, the
timers and reminders it set (listed, cancellable), and a notification when one is due."""


def install(window, beside):
    """Give every engine of ``window`` the confirmation dialog, and list its timers where
    ``beside(widget)`` places them (beside the conversation); returns the ``ToolsFeature``."""
    # Imported here, not at the top: a module of the feature (the dialog, the timers
    # list) can then be imported alone.
    from app.tools.feature import ToolsFeature

    return ToolsFeature(window, beside)
