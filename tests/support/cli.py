"""``parley-cli`` run as a user runs it."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support.paths import ROOT


def run_cli(*args: str, env: dict | None = None, timeout: float = 600, input: str | None = None,
            close_stdin: bool = False) -> subprocess.CompletedProcess:
    """Run ``parley-cli`` as a user would, in a fresh interpreter. ``input`` is written to
    its stdin (then closed); ``close_stdin`` starts it with no stdin at all (fd 0 closed)."""
    full_env = {**os.environ, **(env or {})}
    extra: dict = {"input": input} if input is not None else {}
    if close_stdin:
        extra["preexec_fn"] = lambda: os.close(0)
    return subprocess.run([sys.executable, "-m", "engine.cli", *args], cwd=ROOT, env=full_env,
                          capture_output=True, text=True, timeout=timeout, **extra)
