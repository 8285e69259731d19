"""Push-to-talk: a source wrapper that passes the microphone only while the talk key is held.

While the key is up it delivers silence of the same length and time stamps, so the VAD's
clock runs on and a release ends the turn exactly as a pause in speech would. The level
meter still shows the live microphone, so the user can see that it works.
"""

from __future__ import annotations

import numpy as np

from engine.audio.base import PIPELINE_RATE, AudioBlock, AudioSource


class PushToTalkSource:
    """An AudioSource that gates ``inner``: open when ``enabled`` is False or ``pressed``."""

    sample_rate = PIPELINE_RATE

    def __init__(self, inner: AudioSource, enabled: bool = False) -> None:
        self.inner = inner
        self.enabled = enabled  # plain attributes: written by the GUI, read by the VAD thread
        self.pressed = False

    @property
    def passing(self) -> bool:
        """True when the microphone's audio goes through now."""
        return not self.enabled or self.pressed

    def open(self) -> None:
        """Open the wrapped source."""
        self.inner.open()

    def close(self) -> None:
        """Close the wrapped source. Idempotent."""
        self.inner.close()

    def read(self, timeout: float) -> AudioBlock | None:
        """The inner block, or silence of its length while the talk key is up."""
        block = self.inner.read(timeout)
        if block is None or self.passing:
            return block
        return AudioBlock(np.zeros_like(block.samples), block.t_start)

    @property
    def finished(self) -> bool:
        """True once a finite inner source has delivered its last block."""
        return self.inner.finished

    @property
    def overflow_count(self) -> int:
        """The inner source's dropped blocks."""
        return self.inner.overflow_count

    @property
    def buffered_blocks(self) -> int:
        """Blocks the inner source captured and nobody read yet."""
        return int(getattr(self.inner, "buffered_blocks", 0))

    @property
    def buffer_capacity(self) -> int:
        """How many blocks the inner source buffers."""
        return int(getattr(self.inner, "buffer_capacity", 0))

    @property
    def level(self) -> float:
        """The live input level, gated or not."""
        return self.inner.level
