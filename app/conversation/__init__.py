"""The conversation: the view, push-to-talk, the Stop talking button, the thinking cue."""


def install(window, player):
    """Add the Conversation tab, its File and View actions and header controls to
    ``window``; returns the ``ConversationTab``. ``player`` (a ``PreviewPlayer``) plays
    the thinking chime."""
    # Imported here, not at the top: a module of the feature (the view, the push-to-talk
    # source) can then be imported alone without building the rest.
    from app.conversation.tab import ConversationTab

    return ConversationTab(window, player)
