"""What the command-line tests share."""

import pytest


@pytest.fixture(scope="module")
def stt_model():
    """The bundled faster-whisper tiny.en, to hear what a command spoke into its WAV."""
    from engine.backends.base import LoadRequest, no_progress
    from engine.backends.stt import faster_whisper
    from engine.config import SttConfig
    from engine.runtime.devices import CPU

    return faster_whisper.load(LoadRequest(faster_whisper.bundled_model(), CPU, "auto", SttConfig()),
                               no_progress)
