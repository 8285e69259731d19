"""Language-model backends (one module per backend, imported lazily by name)."""

from engine.errors import ModelError


def check_context(prompt_tokens: int, max_new_tokens: int, context_tokens: int | None) -> None:
    """A clear error when prompt plus reply would not fit the model's context."""
    if context_tokens and prompt_tokens + max_new_tokens > context_tokens:
        raise ModelError(f"the prompt has {prompt_tokens} tokens; with {max_new_tokens} new "
                         f"tokens it exceeds the model's context of {context_tokens}; "
                         "lower llm.history_turns or llm.max_new_tokens")
