"""Turn a GGUF file into a cached safetensors folder, once.

transformers reads GGUF by dequantizing every tensor (~27 s for SmolLM2-135M on a 2-core
CPU), and a model loaded that way cannot ``save_pretrained``. So the first load copies
the dequantized weights into a fresh model of the same config and saves that, with the
tokenizer (and its chat template) and the generation config, under
``cache_dir()/models/<stem>-<key>``. Later loads read the folder in well under a second.

The key hashes the file's name, size and its first and last MiB: a copy of the same file
reuses the conversion, and no 100 MB content hash runs on every start. The folder is
written under a temporary name and renamed into place only when complete, so an
interrupted conversion never leaves a folder that looks finished. A built app carries
the conversion made at build time (``engine.runtime.paths.prebuilt_models_dir``), so its
first start converts nothing.
"""

from __future__ import annotations

import hashlib
import threading
import time
from pathlib import Path

from engine.backends.base import Progress, no_progress
from engine.backends.llm.conversion_cache import SOURCE_FILE, cache_folder, find_existing, write_once
from engine.errors import ModelError

__all__ = ["SOURCE_FILE", "cached_folder_path", "converted_folder", "existing_conversion",
           "is_converted"]

_WEIGHTS = "model.safetensors"
_lock = threading.Lock()  # one conversion at a time in this process


_EDGE_BYTES = 1 << 20


def cached_folder_path(gguf_path: str | Path) -> Path:
    """Where the converted copy of ``gguf_path`` lives (whether or not it exists yet)."""
    gguf = Path(gguf_path)
    try:
        st = gguf.stat()
    except FileNotFoundError:
        raise ModelError(f"GGUF model file not found: {gguf}") from None
    # Keyed on content, not mtime: a copy of the same file (a new app build, a fresh
    # venv) reuses the conversion. The first and last MiB tell GGUF files apart.
    digest = hashlib.sha256(f"{gguf.name}:{st.st_size}:".encode())
    with open(gguf, "rb") as fh:
        digest.update(fh.read(_EDGE_BYTES))
        fh.seek(max(0, st.st_size - _EDGE_BYTES))
        digest.update(fh.read(_EDGE_BYTES))
    return cache_folder(f"{gguf.stem}-{digest.hexdigest()[:12]}")


def is_converted(folder: Path) -> bool:
    """True when ``folder`` is a complete conversion."""
    return (folder / SOURCE_FILE).is_file() and (folder / _WEIGHTS).is_file()


def existing_conversion(gguf_path: str | Path) -> Path | None:
    """The finished conversion of ``gguf_path`` if there is one, without converting.

    The user's cache is looked at first, then the conversion a built app carries
    (made at build time, so a packaged app's first start converts nothing).
    """
    return find_existing(cached_folder_path(gguf_path).name, _WEIGHTS)


def converted_folder(gguf_path: str | Path, progress: Progress = no_progress) -> Path:
    """The safetensors folder for ``gguf_path``, converting the GGUF the first time.

    Raises ModelError if the file is missing, is not a GGUF model transformers can read,
    or the cache folder cannot be written.
    """
    gguf = Path(gguf_path).expanduser()
    if not gguf.is_file():
        raise ModelError(f"GGUF model file not found: {gguf}")
    found = existing_conversion(gguf)
    if found is not None:
        return found
    folder = cached_folder_path(gguf)
    with _lock:
        if is_converted(folder):  # another thread converted it while we waited
            return folder
        return _convert(gguf, folder, progress)


def _convert(gguf: Path, folder: Path, progress: Progress) -> Path:
    progress(None, f"converting {gguf.name} to safetensors once, ~30 s")
    started = time.perf_counter()

    def write(temp: Path) -> dict:
        _write_folder(gguf, temp)
        st = gguf.stat()
        return {"gguf": str(gguf), "size": st.st_size, "mtime_ns": st.st_mtime_ns,
                "conversion_seconds": round(time.perf_counter() - started, 2)}

    write_once(folder, write)
    progress(1.0, f"converted {gguf.name} in {time.perf_counter() - started:.1f} s")
    return folder


def _write_folder(gguf: Path, out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name,
                                                      dtype=torch.float32)
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise ModelError(f"cannot read GGUF model {gguf}: {exc}") from None
    config = loaded.config
    # The copy is a plain float model: keep the GGUF marker out of its config, or a later
    # load would look for the .gguf file again.
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = fresh.load_state_dict(loaded.state_dict(), strict=False)
    if missing or unexpected:
        raise ModelError(f"cannot convert GGUF model {gguf}: tensors missing {missing[:5]}, "
                         f"unexpected {unexpected[:5]}")
    fresh.generation_config = loaded.generation_config
    fresh.save_pretrained(out)
    tokenizer.save_pretrained(out)
