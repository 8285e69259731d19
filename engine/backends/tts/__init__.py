"""Text-to-speech backends (one module per backend, imported lazily by name).

Also the one helper both TTS backends share: fetching a file from the model hub (or its
local cache) with every failure turned into a ModelError that says what to do.
"""

from __future__ import annotations

from pathlib import Path

from engine.errors import MissingDependencyError, ModelError


def hub_file(repo_id: str, filename: str, what: str, extra: str) -> Path:
    """``filename`` of hub repo ``repo_id``, from the hub or the local hub cache.

    ``what`` names the model in error messages ("TTS voice ..."). Offline
    (``HF_HUB_OFFLINE=1`` or no network) a file that is not cached is a ModelError.
    """
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        raise MissingDependencyError(f"downloading {what}", "huggingface-hub", extra) from None
    try:
        return Path(hf_hub_download(repo_id=repo_id, filename=filename))
    except Exception as exc:  # noqa: BLE001 - huggingface_hub's errors share no other base
        raise _hub_error(repo_id, filename, what, exc) from None


def _hub_error(repo_id: str, filename: str, what: str, exc: Exception) -> ModelError:
    kinds = {cls.__name__ for cls in type(exc).__mro__}
    where = f"{filename} in hub repo {repo_id!r}"
    if "LocalEntryNotFoundError" in kinds or "OfflineModeIsEnabled" in kinds:
        return ModelError(f"{what}: {where} is not in the local hub cache and the model hub "
                          "is unreachable (or HF_HUB_OFFLINE=1); download it while online "
                          "or give a local path")
    if "RepositoryNotFoundError" in kinds or "RevisionNotFoundError" in kinds:
        return ModelError(f"{what}: hub repo {repo_id!r} does not exist (or needs a login)")
    if "EntryNotFoundError" in kinds:
        return ModelError(f"{what}: hub repo {repo_id!r} has no file {filename}")
    return ModelError(f"{what}: cannot download {where}: {exc}")
