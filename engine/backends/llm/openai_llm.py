"""The remote LLM backend: streaming chat completions from an OpenAI-compatible server.

Every turn sends the whole conversation (system prompt first, the history the stage
chose, the new user text) and standard OpenAI chat-completions fields only (``model``,
``messages``, ``stream``, ``stream_options``, ``max_tokens``, ``temperature``, and the
tools): a strict server (OpenAI's own) refuses any field it does not know. Fields beyond
those go out only when the user names them in ``llm.extra_body``; the anti-repetition
settings (``llm.repetition_penalty``, ``llm.no_repeat_ngram_size``) are not OpenAI's, so
a value other than their default is a ConfigError pointing there (at their defaults they
are the model's to decide, and a server applies its model's own). A server that refuses
a field (400) gets an error naming it, and the setting it came from. The reply streams
back one delta per token, and the LLM stage cuts it into clauses exactly as it does for
a local model, so the first clause reaches TTS as soon as it is complete.

Failures are ``RemoteError``s naming the server. A request that fails before its first
token is retried (``llm.retries``, with a short back-off) when that can help (refused,
timeout, 429, 5xx, a connection lost); once a token was handed on, a lost stream ends
the turn with an error and is never asked for again, so no reply is heard twice.
When ``should_stop()`` turns true (barge-in, a reopened turn) the stream is closed at
the next delta, which closes the connection: the server sees the client go and stops.

Tools: offered tools go out as the request's ``tools`` and ``tool_choice`` (OpenAI chat
format; the server enforces "required" and a named function). The call deltas
(``delta.tool_calls``: index, id, name, argument pieces) are joined per index and checked
like a local model's calls (an offered name, arguments a JSON object), and arrive on the
last step; content text still streams as steps. Messages carrying ``tool_calls`` or with
role ``tool`` are sent as they are.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.backends.base import (ChatMessage, GenerationOptions, LlmModel, LlmSession, LlmStep, LoadRequest,
                                  Progress, ToolCall, ToolSpec, no_progress)
from engine.backends.llm.tool_calls import call_from_json_text, offered_tools
from engine.backends.remote import Endpoint, RemoteClient, RemoteError, Retrier, refused_field
from engine.runtime.devices import Device
from engine.config import LLM_REQUEST_FIELDS, LlmConfig
from engine.errors import ConfigError, DeviceError
from engine.measures import Figure


def load(request: LoadRequest, progress: Progress = no_progress) -> RemoteLlm:
    """A client of the server the ``llm`` section names, for ``request.model``."""
    _check_device(request.device)
    config = request.options_as(LlmConfig)
    endpoint = Endpoint.of("llm", config)
    check_standard(GenerationOptions.from_config(config))
    progress(None, f"using {request.model} on {endpoint.base_url}")
    return RemoteLlm(RemoteClient(endpoint), request.model, config.extra_fields())


def check_standard(options: GenerationOptions) -> None:
    """ConfigError when ``options`` set an anti-repetition value of the user's: a remote
    request carries only OpenAI's fields, and the user's extras go in ``llm.extra_body``.
    Their defaults (None, or ``LlmConfig``'s own values) are left to the server's model;
    off (1.0, 0) asks for nothing to be sent."""
    defaults = LlmConfig()
    for name, value, default, off in (
            ("repetition_penalty", options.repetition_penalty, defaults.repetition_penalty, 1.0),
            ("no_repeat_ngram_size", options.no_repeat_ngram_size, defaults.no_repeat_ngram_size, 0)):
        if value is None or value in (default, off):
            continue
        raise ConfigError(f"'llm.{name}' = {value} is not an OpenAI chat-completions field, and "
                          "a remote LLM (llm.backend openai) gets only those: set it back to "
                          f"{default} (the server's model decides), or send it in "
                          f"llm.extra_body ({name} = {value}) if your server takes it")


def _check_device(device: Device) -> None:
    if device.kind != "remote":
        raise DeviceError(f"llm backend 'openai' cannot run on {device}; it runs on remote "
                          "(a server named by llm.base_url)")


class RemoteLlm(LlmModel):
    """A model on a server, shared by every pipeline unit (the client's pool is thread-safe)."""

    actual_device = "remote"

    def __init__(self, client: RemoteClient, model: str, extra_body: dict[str, Any] | None = None) -> None:
        self.client = client
        self.model = model
        self.endpoint = client.endpoint
        #: ``llm.extra_body``: the fields beyond OpenAI's the user asked to send.
        self.extra_body = dict(extra_body or {})

    def new_session(self) -> RemoteLlmSession:
        return RemoteLlmSession(self)

    def tool_support(self) -> str | None:
        """None: the request carries the tools; whether the model behind the server can
        use them is the server's to say (it refuses the request, or never calls one)."""
        return None

    def close(self) -> None:
        self.client.close()


class RemoteLlmSession(LlmSession):
    """One unit's conversation: stateless on this side (the server gets the whole history
    each turn). ``figures`` holds the network figures of the last reply."""

    def __init__(self, llm: RemoteLlm) -> None:
        self.llm = llm
        self.figures = {}

    def reset(self) -> None:
        """A new conversation: nothing to forget here (the server keeps no cache of ours)."""
        self.figures = {}

    def _request(self, messages: list[ChatMessage], options: GenerationOptions):
        # Chat messages as plain dicts: the client's TypedDicts per role would add nothing.
        request: dict[str, Any] = {
            "model": self.llm.model, "messages": messages, "stream": True,
            "max_tokens": options.max_new_tokens, "temperature": options.temperature,
            "stream_options": {"include_usage": True}, "extra_body": self.llm.extra_body or None}
        if options.tools:
            request["tools"] = [t.as_openai() for t in options.tools]
            request["tool_choice"] = _openai_tool_choice(options.tool_choice)
        return self.llm.client.openai.chat.completions.create(**request)

    def _refused(self, exc: BaseException, error: RemoteError) -> RemoteError:
        """A 400 that names a field of the request: the error says which, and where the
        field came from (``llm.extra_body`` or Parley's own request)."""
        if error.status != 400:
            return error
        extra = self.llm.extra_body
        name = refused_field(exc, [*extra, *LLM_REQUEST_FIELDS])
        if name is None:
            return error
        if name in extra:
            fix = "from llm.extra_body: remove it there (this server does not take it)"
        else:
            fix = ("a standard OpenAI chat-completions field Parley sends: check that "
                   "llm.base_url is an OpenAI-compatible chat-completions API")
        return RemoteError(f"{error}: the refused field is {name!r}, {fix}", url=error.url,
                           stage=error.stage, kind=error.kind, status=error.status)

    def generate(self, messages: list[ChatMessage], options: GenerationOptions,
                 should_stop: Callable[[], bool]) -> Iterator[LlmStep]:
        """Stream the reply to ``messages``: a step per delta, the last one ``finished``
        (with the calls the model made, ``tool_calls``, when tools were offered)."""
        client = self.llm.client
        offered_tools(options)  # a tool_choice that names no offered tool: ConfigError, no request
        check_standard(options)  # an anti-repetition value of the user's: ConfigError, no request
        retrier = Retrier(client.endpoint, should_stop)
        self.figures = {}
        while True:
            if should_stop():
                return
            started = time.perf_counter()
            try:
                stream = self._request(messages, options)
            except Exception as exc:  # noqa: BLE001 - every failure is translated for the user
                error = self._refused(exc, client.error(exc, self.llm.model))
                if retrier.again(error):
                    continue
                raise error from None
            self._network(client)
            try:
                yield from self._steps(stream, started, should_stop, retrier, options.tools)
                return
            except _Retry:
                continue
            finally:
                stream.close()  # a reply cut short (barge-in, a cap) closes the connection

    def _network(self, client: RemoteClient) -> None:
        timing = client.timing()
        figures: dict[Figure, float] = {}
        if timing is not None:
            if timing.network_s is not None:
                figures[Figure.LLM_NETWORK_S] = timing.network_s
            if timing.headers_s is not None:
                figures[Figure.LLM_HEADERS_S] = timing.headers_s
        self.figures = figures

    def _steps(self, stream, started: float, should_stop: Callable[[], bool],
               retrier: Retrier, tools: Sequence[ToolSpec]) -> Iterator[LlmStep]:
        client = self.llm.client
        calls: dict[int, _CallParts] = {}
        tokens = 0
        prompt_tokens = 0
        usage_tokens = None
        finish = None
        t_first = 0.0
        prefill = 0.0
        try:
            for chunk in stream:
                usage = getattr(chunk, "usage", None)
                if usage is not None:
                    prompt_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
                    usage_tokens = getattr(usage, "completion_tokens", None)
                for choice in chunk.choices or ():
                    delta = getattr(choice, "delta", None)
                    text = (getattr(delta, "content", None) or "") if delta is not None else ""
                    for part in (getattr(delta, "tool_calls", None) or ()) if delta is not None else ():
                        calls.setdefault(int(part.index or 0), _CallParts()).add(part)
                    if choice.finish_reason:
                        finish = choice.finish_reason
                    if not text:
                        continue
                    now = time.perf_counter()
                    if tokens == 0:
                        t_first, prefill = now, now - started
                    tokens += 1
                    rate = (tokens - 1) / (now - t_first) if tokens > 1 and now > t_first else 0.0
                    yield LlmStep(text=text, tokens=tokens, prompt_tokens=prompt_tokens,
                                  prefill_seconds=prefill, tokens_per_second=rate)
                    if should_stop():
                        return
        except Exception as exc:  # noqa: BLE001 - every failure is translated for the user
            error = client.error(exc, self.llm.model)
            if tokens == 0:
                if retrier.again(error):
                    raise _Retry from None
                raise error from None
            raise client.cut(f"stopped sending the reply after {tokens} token"
                             f"{'s' if tokens != 1 else ''} ({error.kind})", False) from None
        if finish is None:
            if should_stop():
                return
            if tokens == 0:
                error = client.cut("ended the reply before its first token", True)
                if retrier.again(error):
                    raise _Retry
                raise error
            raise client.cut(f"stopped sending the reply after {tokens} token"
                             f"{'s' if tokens != 1 else ''} (no end of reply)", False)
        now = time.perf_counter()
        count = int(usage_tokens) if usage_tokens else tokens
        rate = (tokens - 1) / (now - t_first) if tokens > 1 and now > t_first else 0.0
        yield LlmStep(text="", tokens=count, prompt_tokens=prompt_tokens,
                      prefill_seconds=prefill or (now - started), tokens_per_second=rate,
                      finished=True, tool_calls=tuple(calls[i].call(tools) for i in sorted(calls)))


def _openai_tool_choice(choice: str) -> str | dict[str, Any]:
    """``tool_choice`` in the request: "auto", "none", "required", or the named function."""
    if choice in ("auto", "none", "required"):
        return choice
    return {"type": "function", "function": {"name": choice}}


@dataclass
class _CallParts:
    """One streamed call (``delta.tool_calls`` of one index): its id, name and argument
    pieces as they arrive (the id and name usually in the first delta)."""

    call_id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)

    def add(self, part) -> None:
        self.call_id = self.call_id or (part.id or "")
        function = part.function
        if function is not None:
            self.name += function.name or ""
            self.arguments.append(function.arguments or "")

    def call(self, tools: Sequence[ToolSpec]) -> ToolCall:
        """The joined call, checked against the offered ``tools`` (ToolCallError if not)."""
        return call_from_json_text(self.name, "".join(self.arguments), tools, self.call_id or None)


class _Retry(Exception):
    """Internal: the request failed before its first token and will be made again."""

