"""Where Parley keeps converted models: ``$PARLEY_CACHE_DIR`` or the user cache folder."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def cache_dir() -> Path:
    """The folder for Parley's own caches (created on first use by whoever writes)."""
    env = os.environ.get("PARLEY_CACHE_DIR")
    if env:
        return Path(env)
    if platform.system() == "Darwin":
        return Path.home() / "Library" / "Caches" / "Parley"
    if platform.system() == "Windows":
        return Path(os.environ.get("LOCALAPPDATA", Path.home())) / "Parley" / "Cache"
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "parley"
