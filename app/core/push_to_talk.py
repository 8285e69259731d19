"""Push-to-talk: a source wrapper that passes the microphone only while the talk key is held.

While the key is up it delivers silence of the same length and time stamps, so the VAD's
clock runs on and a release ends the turn exactly as a pause in speech would. The level
meter still shows the live microphone, so the user can see that it works.
"""

from __future__ import annotations

import numpy as np

from engine.audio.base import AudioBlock, AudioSource, SourceWrapper


class PushToTalkSource(SourceWrapper):
    """An AudioSource that gates ``inner``: open when ``enabled`` is False or ``pressed``.

    Everything but ``read`` is ``inner``'s (``SourceWrapper``): its level, health, buffer.
    """

    def __init__(self, inner: AudioSource, enabled: bool = False) -> None:
        super().__init__(inner)
        self.enabled = enabled  # plain attributes: written by the GUI, read by the VAD thread
        self.pressed = False

    @property
    def passing(self) -> bool:
        """True when the microphone's audio goes through now."""
        return not self.enabled or self.pressed

    def read(self, timeout: float) -> AudioBlock | None:
        """The inner block, or silence of its length while the talk key is up."""
        block = self.inner.read(timeout)
        if block is None or self.passing:
            return block
        return AudioBlock(np.zeros_like(block.samples), block.t_start)
