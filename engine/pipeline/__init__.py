"""The streaming core: the stage base, messages, control, playback, events, metrics, chat history."""
