"""Small helpers shared by the engine tests (not fixtures)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def normalize(text: str) -> str:
    """Lower case, letters and spaces only: for comparing transcripts."""
    return " ".join(re.sub(r"[^a-z0-9' ]+", " ", text.lower()).split())


def run_cli(*args: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run ``parley-cli`` as a user would, in a fresh interpreter."""
    import os

    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "engine.cli", *args], cwd=ROOT, env=full_env,
                          capture_output=True, text=True, timeout=timeout)


def speech_with_gap(first: np.ndarray, second: np.ndarray, gap_s: float) -> np.ndarray:
    """Two 16 kHz utterances separated by ``gap_s`` of digital silence."""
    return np.concatenate([first, np.zeros(int(gap_s * 16000), np.float32), second]).astype(np.float32)
