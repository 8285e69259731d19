"""What the EngineController shows: the mode the pipeline runs in and the state in the
window's pill, derived from it (``EngineController.refresh``)."""

from __future__ import annotations

import enum


class ControllerMode(enum.StrEnum):
    """What the running pipeline listens to."""

    IDLE = "idle"  # not running
    MIC = "mic"  # the microphone and the speaker
    TYPED = "typed"  # typed messages only: the speaker, no microphone open
    FILE = "file"  # a recording (or given sources), stopped once it was answered


class ControllerState(enum.StrEnum):
    """The state the window shows in its pill; ``label`` is the text shown."""

    NOT_LOADED = "not loaded"
    LOADING = "loading"
    READY = "ready"
    STARTING = "starting"
    LISTENING = "listening"
    TYPING = "typing"  # running on typed messages alone, the microphone closed
    STOPPING = "stopping"

    @property
    def label(self) -> str:
        """The pill's text: ``Loading models``, ``Starting…``."""
        return _STATE_LABELS[self]


_STATE_LABELS = {
    ControllerState.NOT_LOADED: "Not loaded", ControllerState.LOADING: "Loading models",
    ControllerState.READY: "Ready", ControllerState.STARTING: "Starting…",
    ControllerState.LISTENING: "Listening", ControllerState.TYPING: "Typing (mic off)",
    ControllerState.STOPPING: "Stopping…",
}
#: The transitions a start, stop or switch holds while its command waits or runs.
TRANSITIONS = (ControllerState.STARTING, ControllerState.STOPPING)
