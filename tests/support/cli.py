"""``parley-cli`` run as a user runs it."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support.paths import ROOT


def run_cli(*args: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run ``parley-cli`` as a user would, in a fresh interpreter."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "engine.cli", *args], cwd=ROOT, env=full_env,
                          capture_output=True, text=True, timeout=timeout)
