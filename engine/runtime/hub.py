"""Is the Hugging Face hub usable: is a model in the local cache, does the hub answer?"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

_TRUE = {"1", "true", "yes", "on"}
_OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")


def offline() -> bool:
    """The one rule for "the hub must not be asked": ``HF_HUB_OFFLINE`` or
    ``TRANSFORMERS_OFFLINE`` set to 1/true/yes/on, or huggingface_hub (when already
    imported) configured offline."""
    if any(os.environ.get(name, "").strip().lower() in _TRUE for name in _OFFLINE_VARIABLES):
        return True
    constants = sys.modules.get("huggingface_hub.constants")
    return bool(getattr(constants, "HF_HUB_OFFLINE", False))


class HubStatus:
    """Answers for ``auto`` model choice. The reachability probe runs at most once."""

    def __init__(self, offline: bool | None = None, host: str = "huggingface.co") -> None:
        self.offline = globals()["offline"]() if offline is None else offline
        self._host = host
        self._reachable: bool | None = None

    def cache_dir(self) -> Path:
        env = os.environ.get("HF_HUB_CACHE")
        if env:
            return Path(env)
        home = os.environ.get("HF_HOME")
        cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
        base = Path(home) if home else cache / "huggingface"
        return base / "hub"

    def is_cached(self, repo_id: str) -> bool:
        """True if a snapshot of ``repo_id`` (``org/name``, optionally ``:file``) is cached."""
        repo = repo_id.split(":", 1)[0]
        if "/" not in repo:
            return False
        snapshots = self.cache_dir() / f"models--{repo.replace('/', '--')}" / "snapshots"
        try:
            return any(any(s.iterdir()) for s in snapshots.iterdir() if s.is_dir())
        except OSError:
            return False

    def reachable(self) -> bool:
        """True if the hub answers a TCP connection (never tried when offline)."""
        if self.offline:
            return False
        if self._reachable is None:
            try:
                with socket.create_connection((self._host, 443), timeout=1.5):
                    self._reachable = True
            except OSError:
                self._reachable = False
        return self._reachable

    def available(self, repo_id: str) -> bool:
        """Can ``repo_id`` be loaded: cached, or the hub answers."""
        return self.is_cached(repo_id) or self.reachable()
