"""Where Parley keeps its data (``$PARLEY_DATA_DIR`` or the user data folder) and converted
models (``$PARLEY_CACHE_DIR`` or the user cache folder),
and, in a built app, the models converted when it was built."""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

#: The folder of a built app that holds the models converted at build time
#: (``packaging/build.py`` fills it; ``gguf_convert`` looks there before converting).
PREBUILT_MODELS = "prebuilt-models"


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


def prebuilt_models_dir() -> Path | None:
    """The built app's folder of models converted at build time; None when running from
    source (or a build without them)."""
    bundle = sys.__dict__.get("_MEIPASS")  # set by PyInstaller's bootloader only
    if not bundle:
        return None
    folder = Path(bundle) / PREBUILT_MODELS
    return folder if folder.is_dir() else None


def data_dir() -> Path:
    """The folder for Parley's own data (timers, the history): ``$PARLEY_DATA_DIR`` or the
    user data folder (created on first use by whoever writes)."""
    env = os.environ.get("PARLEY_DATA_DIR")
    if env:
        return Path(env)
    if platform.system() == "Darwin":
        return Path.home() / "Library" / "Application Support" / "Parley"
    if platform.system() == "Windows":
        return Path(os.environ.get("APPDATA", Path.home())) / "Parley"
    return Path(os.environ.get("XDG_DATA_HOME", Path.home() / ".local" / "share")) / "parley"
