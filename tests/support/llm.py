"""LLM test helpers: what the session's SmolLM2 conversion did, generation options, and
one reply run to its end. (The models are fixtures in tests/backends/conftest.py.)"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from engine.backends.base import GenerationOptions
from engine.config import LlmConfig


@dataclass
class Conversion:
    """What the session's one SmolLM2 conversion did."""

    gguf: Path
    folder: Path
    seconds: float
    progress: list[tuple[float | None, str]] = field(default_factory=list)


def options(max_new_tokens: int = 40, **settings) -> GenerationOptions:
    """The app's default generation options (``LlmConfig``) with a token cap."""
    config = dataclasses.replace(LlmConfig(), max_new_tokens=max_new_tokens, **settings)
    return GenerationOptions.from_config(config)


def collect(session, messages, max_new_tokens=40, should_stop=lambda: False, **settings):
    """Run one reply to the end; returns (steps, text)."""
    steps = list(session.generate(messages, options(max_new_tokens, **settings), should_stop))
    return steps, "".join(s.text for s in steps)
