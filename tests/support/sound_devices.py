"""The sound devices present, and markers that skip a test without them.

The markers skip a test only when the machine has no sound device at all; CI runs
``.ci/start_audio.sh`` first (a JACK dummy server, or ALSA null devices), so there the
tests always run.
"""

from __future__ import annotations

import pytest


def _devices():
    from engine.audio.sd_devices import list_audio_devices

    return list_audio_devices()


INPUTS, OUTPUTS = _devices()
_NO_DEVICE = "no sound device at all (run .ci/start_audio.sh: JACK dummy or ALSA null)"
needs_input = pytest.mark.skipif(not INPUTS, reason=f"no input device: {_NO_DEVICE}")
needs_output = pytest.mark.skipif(not OUTPUTS, reason=f"no output device: {_NO_DEVICE}")
