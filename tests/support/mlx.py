"""MLX test helpers: the device, a question, and a tiny random Whisper in MLX format.
(The MLX models and the tracing lock are fixtures in tests/backends/conftest.py.)"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from engine.config import LlmConfig
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
