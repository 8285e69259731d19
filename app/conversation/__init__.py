"""The conversation: the view, push-to-talk, the Stop talking button, the thinking cue."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.conversation.tab import ConversationTab
    from app.conversation.thinking_sound import ChimePlayer
    from app.core.window_api import WindowApi


def install(window: WindowApi, player: ChimePlayer) -> ConversationTab:
    """Add the Conversation tab, its File and View actions and header controls to
    ``window``; returns the ``ConversationTab``. ``player`` (a ``PreviewPlayer``) plays
    the thinking chime."""
    # Imported here, not at the top: a module of the feature (the view, the push-to-talk
    # source) can then be imported alone without building the rest.
    from app.conversation.tab import ConversationTab

    return ConversationTab(window, player)
