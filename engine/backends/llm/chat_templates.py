"""The published chat templates of the model families on the ladder, kept in
``resources/chat_templates/`` (sources and licences in its ``SOURCES.md``).

A rung of ``resources/ladder.toml`` names its ``family`` (qwen2.5, qwen3, llama3.2,
smollm2); ``family_template`` is that family's template as its makers publish it, for the
tests that render tools and thinking off on the real text, and for any code that must
know a family's template without its model folder. A family whose models ship no tool
template of their own (smollm2) has none here.
"""

from __future__ import annotations

from pathlib import Path

from engine.errors import ConfigError

TEMPLATES = Path(__file__).resolve().parents[3] / "resources" / "chat_templates"
#: family (the ladder's ``family`` field) -> its template's file in ``TEMPLATES``.
FAMILY_FILES: dict[str, str] = {"qwen2.5": "qwen2.5.jinja", "qwen3": "qwen3.jinja",
                                "llama3.2": "llama3.2.jinja"}


def template_path(family: str) -> Path:
    """The file of ``family``'s chat template; ConfigError naming the families that have one."""
    name = FAMILY_FILES.get(family)
    if name is None:
        raise ConfigError(f"no chat template is kept for the model family {family!r}; "
                          f"families with one: {', '.join(sorted(FAMILY_FILES))}")
    return TEMPLATES / name


def family_template(family: str) -> str:
    """The text of ``family``'s chat template (``template_path``)."""
    return template_path(family).read_text(encoding="utf-8")
