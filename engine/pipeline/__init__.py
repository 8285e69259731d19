"""The streaming core of one pipeline unit: stages, messages, control, playback, metrics."""
