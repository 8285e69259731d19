"""Converted models in Parley's cache: found by name, written once, never half-written.

A conversion (a GGUF to safetensors, a model folder to ONNX) is slow and happens once per
source. Its folder lives under ``cache_dir()/models/<name>``, where the name carries a
key of the source's content, and is complete only when its marker file
(``SOURCE_FILE``, written last, naming the source) is there. It is written under a
temporary name and renamed into place, so an interrupted conversion never leaves a
folder that looks finished; temporary folders of killed conversions are swept after an
hour. A built app carries the conversions made at build time
(``engine.runtime.paths.prebuilt_models_dir``), looked at after the user's cache.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from engine.errors import ModelError
from engine.runtime.paths import cache_dir, prebuilt_models_dir

#: Written last into a converted folder; its presence means the folder is complete.
SOURCE_FILE = "parley_source.json"
_STALE_TEMP_SECONDS = 3600


def cache_folder(name: str) -> Path:
    """Where the conversion called ``name`` lives in the user's cache (existing or not)."""
    return cache_dir() / "models" / name


def is_complete(folder: Path, weights: str) -> bool:
    """True when ``folder`` is a finished conversion holding the file ``weights``."""
    return (folder / SOURCE_FILE).is_file() and (folder / weights).is_file()


def find_existing(name: str, weights: str) -> Path | None:
    """The finished conversion called ``name``: in the user's cache, else the one a built
    app carries; None when neither has it."""
    folder = cache_folder(name)
    if is_complete(folder, weights):
        return folder
    prebuilt = prebuilt_models_dir()
    if prebuilt is not None and is_complete(prebuilt / name, weights):
        return prebuilt / name
    return None


def write_once(folder: Path, write: Callable[[Path], dict]) -> Path:
    """Fill ``folder`` by calling ``write(temp_folder)``, then mark and rename it into place.

    ``write`` returns what the marker records about the source (JSON-able). Whatever it
    raises propagates and leaves nothing behind. A concurrent writer that finished first
    wins; its folder is kept.
    """
    parent = folder.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ModelError(f"cannot create the model cache folder {parent}: {exc.strerror}") from None
    _remove_stale_temps(parent, folder.name)
    if folder.exists() and not (folder / SOURCE_FILE).is_file():
        shutil.rmtree(folder, ignore_errors=True)  # not finished by us: replace it
    temp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.tmp-", dir=parent))
    try:
        source = write(temp)
        (temp / SOURCE_FILE).write_text(json.dumps(source, indent=2), encoding="utf-8")
        try:
            os.rename(temp, folder)
        except OSError:
            if not (folder / SOURCE_FILE).is_file():  # not a concurrent winner: a real failure
                raise
            shutil.rmtree(temp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    return folder


def _remove_stale_temps(parent: Path, name: str) -> None:
    """Drop temp folders left by conversions that were killed (older than an hour)."""
    now = time.time()
    for temp in parent.glob(f".{name}.tmp-*"):
        try:
            if now - temp.stat().st_mtime > _STALE_TEMP_SECONDS:
                shutil.rmtree(temp, ignore_errors=True)
        except OSError:
            pass
