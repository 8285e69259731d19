"""Where the checkout and its recordings are."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The recordings are part of the checkout (resources/audio/SOURCES.md), never looked up
# beside it: a fresh clone runs its own tests.
AUDIO_DIR = ROOT / "resources" / "audio"
