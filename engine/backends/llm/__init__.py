"""Language-model backends (one module per backend, imported lazily by name)."""

import json
import re
from pathlib import Path

from engine.errors import ModelError


def check_context(prompt_tokens: int, max_new_tokens: int, context_tokens: int | None) -> None:
    """A clear error when prompt plus reply would not fit the model's context."""
    if context_tokens and prompt_tokens + max_new_tokens > context_tokens:
        raise ModelError(f"the prompt has {prompt_tokens} tokens; with {max_new_tokens} new "
                         f"tokens it exceeds the model's context of {context_tokens}; "
                         "lower llm.history_turns or llm.max_new_tokens")


def reusable_prefix(cached: list[int], prompt: list[int]) -> int:
    """How many leading tokens of ``prompt`` the KV cache of ``cached`` already holds.

    At least one prompt token is always left to run: its logits choose the first token
    of the reply.
    """
    limit = min(len(cached), len(prompt) - 1)
    common = 0
    while common < limit and cached[common] == prompt[common]:
        common += 1
    return common


_QUANT_SUFFIX = re.compile(r"\.(?:I?Q\d\w*|F16|F32|BF16)$", re.IGNORECASE)


def display_name(folder: Path) -> str:
    """The model's name for messages, from the folder it was loaded from.

    A hub snapshot (``models--org--Name/snapshots/<sha>``) is ``Name``; a converted GGUF
    (``Name.Q4_1-<hash>`` beside ``parley_source.json``) is ``Name``; any other folder is
    its own name.
    """
    if folder.parent.name == "snapshots" and folder.parent.parent.name.startswith("models--"):
        return folder.parent.parent.name.split("--")[-1]
    from engine.backends.llm.gguf_convert import SOURCE_FILE

    source = folder / SOURCE_FILE
    if source.is_file():
        try:
            gguf = json.loads(source.read_text(encoding="utf-8")).get("gguf", "")
        except (OSError, ValueError):
            gguf = ""
        if gguf:
            return _QUANT_SUFFIX.sub("", Path(gguf).stem)
    return folder.name
