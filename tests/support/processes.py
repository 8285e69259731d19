"""Ending a child process a test started (a server, a browser)."""

from __future__ import annotations

import subprocess


def end_process(proc: subprocess.Popen, timeout: float = 10.0) -> None:
    """SIGTERM, up to ``timeout`` seconds for it to end, then SIGKILL. Idempotent."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
