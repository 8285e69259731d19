"""A model folder's tokenizer and chat template without transformers (and so without torch).

Importing transformers' ``AutoTokenizer`` pulls in torch: ~2.5 s of a 2-core machine's
start. A backend whose runtime needs neither (onnxruntime-genai) reads the folder's
``tokenizer.json`` with the ``tokenizers`` library and renders the chat template with
jinja2 the way transformers does (the same sandboxed environment, ``tojson`` filter,
``raise_exception`` and ``strftime_now``, and the special tokens as variables), so a
prompt is the same text, and the same token ids, whichever backend renders it
(``tests/backends/test_chat_tokenizer.py`` checks that against transformers).

It offers the part of the transformers tokenizer interface that the shared LLM code uses
(``tool_calls.render_chat``, ``text_stream.TextStream``), under the same names.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

from engine.errors import ModelError

_SPECIAL_NAMES = ("bos_token", "eos_token", "unk_token", "pad_token")


def _token_text(value: object) -> str | None:
    """A special token as tokenizer_config.json stores it: a string or an AddedToken dict."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("content"), str):
        return value["content"]
    return None


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot read {path}: {exc}") from None
    return data if isinstance(data, dict) else {}


def _template(folder: Path, config: dict) -> str | None:
    """The chat template: chat_template.jinja, else tokenizer_config.json's (the default
    one where it stores several by name)."""
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    template = config.get("chat_template")
    if isinstance(template, list):  # [{"name": "default", "template": ...}, ...]
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default") or next(iter(named.values()), None)
    return template if isinstance(template, str) else None


class ChatTokenizer:
    """``tokenizer.json`` plus the chat template of one model folder."""

    def __init__(self, folder: Path) -> None:
        from tokenizers import Tokenizer

        path = folder / "tokenizer.json"
        if not path.is_file():
            raise ModelError(f"the model in {folder} has no tokenizer.json")
        try:
            self._tokenizer = Tokenizer.from_file(str(path))
        except Exception as exc:  # noqa: BLE001 - tokenizers raises a bare Exception on a bad file
            raise ModelError(f"cannot read the tokenizer in {path}: {exc}") from None
        config = _read_json(folder / "tokenizer_config.json")
        self.chat_template = _template(folder, config)
        self.special_tokens_map = {name: text for name in _SPECIAL_NAMES
                                   if (text := _token_text(config.get(name))) is not None}
        self.added_tokens_decoder = self._tokenizer.get_added_tokens_decoder()
        self.all_special_ids = sorted(i for i, token in self.added_tokens_decoder.items()
                                      if token.special)
        self.eos_token_id = self.convert_tokens_to_ids(self.special_tokens_map.get("eos_token"))
        self.unk_token_id = self.convert_tokens_to_ids(self.special_tokens_map.get("unk_token"))
        self._compiled = None

    def encode(self, text: str) -> list[int]:
        """The token ids of ``text`` as it stands (no special tokens added)."""
        return self._tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        """The text of ``ids``."""
        return self._tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)

    def convert_tokens_to_ids(self, token: str | None) -> int | None:
        """The id of one token's text, or None when the vocabulary lacks it."""
        return None if token is None else self._tokenizer.token_to_id(token)

    def convert_ids_to_tokens(self, token_id: int) -> str | None:
        """The text of one token id."""
        return self._tokenizer.id_to_token(token_id)

    def apply_chat_template(self, messages: list[Any], tools: list[dict] | None = None,
                            add_generation_prompt: bool = False, tokenize: bool = False,
                            **variables: Any) -> str:
        """``messages`` rendered by the chat template, as transformers renders them.

        Only text comes back (``tokenize`` must be false): the caller encodes it.
        ``variables`` reach the template as transformers passes its extra keyword
        arguments (``enable_thinking=False``). jinja2's TemplateError propagates
        (``render_chat`` words it for the user).
        """
        if tokenize:
            raise ValueError("ChatTokenizer.apply_chat_template renders text only")
        if self.chat_template is None:
            raise ModelError("the model has no chat template")
        if self._compiled is None:
            self._compiled = _compile(self.chat_template)
        return self._compiled.render(**{**self.special_tokens_map, **_plain(variables)},
                                     messages=_plain(messages), tools=_plain(tools), documents=None,
                                     add_generation_prompt=add_generation_prompt)


def _plain(value: Any) -> Any:
    """Only JSON types reach the sandboxed template (as transformers does)."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return str(value)


def _compile(template: str):
    import jinja2
    import jinja2.ext
    import jinja2.nodes
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class _Generation(jinja2.ext.Extension):
        """``{% generation %}`` blocks (used for training masks) render their body."""

        tags: ClassVar[set[str]] = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        # Jinja's own tojson escapes HTML characters; templates expect plain JSON.
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[_Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    try:
        return env.from_string(template)
    except jinja2.exceptions.TemplateSyntaxError as exc:
        raise ModelError(f"the model's chat template is not valid jinja: {exc}") from None
