"""Language-model backends (one module per backend, imported lazily by name)."""

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
