"""Where a language model's files are: a .gguf's converted copy, a folder, or a hub snapshot.

Shared by the local LLM backends: each reads a plain Hugging Face model folder (config,
tokenizer with its chat template, weights), whatever the user named.
"""

from __future__ import annotations

import os
from pathlib import Path

from engine.backends.base import Progress, no_progress
from engine.errors import ModelError
from engine.runtime.hub import offline as hub_offline

_WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                 "pytorch_model.bin.index.json")
_HUB_FILES = ["*.json", "*.safetensors", "*.jinja", "*.txt", "*.model", "*.tiktoken"]


def resolve_model_folder(model: str, progress: Progress = no_progress) -> Path:
    """The local folder holding ``model``: a .gguf's converted copy, a folder, or a hub snapshot."""
    path = Path(model).expanduser()
    if model.lower().endswith(".gguf"):
        from engine.backends.llm.gguf_convert import converted_folder

        return converted_folder(path, progress)
    if path.is_dir():
        _check_folder(path)
        return path
    if path.exists():
        raise ModelError(f"llm.model = {model!r} is a file; give a model folder, a .gguf file or a hub id")
    if _looks_like_path(model):
        raise ModelError(f"model folder not found: {path}")
    return _hub_snapshot(model, progress)


def _looks_like_path(model: str) -> bool:
    return (os.path.isabs(model) or model.startswith((".", "~")) or "\\" in model
            or model.count("/") != 1)


def _check_folder(folder: Path) -> None:
    if not (folder / "config.json").is_file():
        raise ModelError(f"model folder {folder} has no config.json")
    if not any((folder / name).is_file() for name in _WEIGHT_FILES) and not any(folder.glob("*.safetensors")):
        ggufs = sorted(p.name for p in folder.glob("*.gguf"))
        hint = f"; to use {ggufs[0]}, give that file as the model" if ggufs else ""
        raise ModelError(f"model folder {folder} has no weights (model.safetensors or "
                         f"pytorch_model.bin){hint}")


def _hub_snapshot(repo_id: str, progress: Progress) -> Path:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    offline = hub_offline()
    if not offline:
        progress(None, f"fetching {repo_id} from the Hugging Face hub (first time only)")
    try:
        folder = Path(snapshot_download(repo_id, allow_patterns=_HUB_FILES, local_files_only=offline))
    except LocalEntryNotFoundError:
        if offline:
            raise ModelError(f"model {repo_id!r} is not a local folder, is not in the Hugging Face "
                             "cache, and HF_HUB_OFFLINE=1 forbids downloading it; download it where "
                             "the hub is reachable, or give a local folder or .gguf file") from None
        raise ModelError(f"model {repo_id!r} could not be downloaded (no connection to the hub?)") from None
    except HFValidationError:
        raise ModelError(f"llm.model = {repo_id!r} is neither a local folder nor a valid hub id") from None
    except OSError as exc:  # RepositoryNotFoundError, HTTP errors, disk errors
        raise ModelError(f"model {repo_id!r} could not be fetched from the hub: {exc}") from None
    _check_folder(folder)
    return folder
