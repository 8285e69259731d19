"""An OpenAI-compatible chat-completions server on loopback for tests that run Parley's LLM
stage remote (``llm.backend openai``) without a model: the replies are scripted, and every
request is kept so a test can read the prompt the LLM received.

- ``GET /v1/models`` lists one model (``ChatServer.model``).
- ``POST /v1/chat/completions`` streams in OpenAI's SSE chunk format (``stream: true``;
  a plain ``chat.completion`` otherwise), usage last when ``stream_options.include_usage``:
  - the request offers ``tools``, its last message is the user's and a word of an offered
    tool's name (``weather`` of ``get_weather``) is in that message: the recorded
    tool-call stream of that tool, ``tests/server/data/tool_call_<name>.jsonl`` (one
    chunk a line, ``delta.tool_calls`` as OpenAI streams them);
  - the last message is a ``tool`` message: ``tool_reply`` with the tool's output in it;
  - a key of ``replies`` is a word of the last message: that reply (a long one, to talk over);
  - otherwise: ``reply``.

With ``strict=True`` it checks each request against OpenAI's chat-completions schema
as OpenAI's own API does: a field it does not know (at the top level, in
``stream_options``, in a message of its role, in a tool) is a 400 whose error message
names it ("Unrecognized request argument supplied: NAME"), ``param`` null, as OpenAI
answers; so are a bad role, a ``temperature`` outside 0..2 and a ``max_tokens`` below 1.
The refused bodies are kept in ``refused``.

It runs on its own thread and event loop (aiohttp), on 127.0.0.1 with a port the OS picks.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from tests.support.loopback import LoopbackServer
from tests.support.paths import ROOT

RECORDINGS = ROOT / "tests" / "server" / "data"
#: The request fields of OpenAI's chat-completions API (its API reference, 2025).
OPENAI_CHAT_FIELDS = frozenset({
    "messages", "model", "audio", "frequency_penalty", "function_call", "functions",
    "logit_bias", "logprobs", "max_completion_tokens", "max_tokens", "metadata", "modalities",
    "n", "parallel_tool_calls", "prediction", "presence_penalty", "prompt_cache_key",
    "reasoning_effort", "response_format", "safety_identifier", "seed", "service_tier", "stop",
    "store", "stream", "stream_options", "temperature", "tool_choice", "tools", "top_logprobs",
    "top_p", "user", "verbosity", "web_search_options"})
_STREAM_OPTIONS = frozenset({"include_usage", "include_obfuscation"})
_MESSAGE_FIELDS = {
    "system": {"role", "content", "name"}, "developer": {"role", "content", "name"},
    "user": {"role", "content", "name"}, "tool": {"role", "content", "tool_call_id"},
    "assistant": {"role", "content", "name", "tool_calls", "refusal", "audio", "function_call"}}
_TOOL_FIELDS = {"type", "function"}
_FUNCTION_FIELDS = {"name", "description", "parameters", "strict"}


def schema_error(body: dict) -> str | None:
    """What OpenAI's API would refuse in a chat-completions request body, or None."""
    unknown = [key for key in body if key not in OPENAI_CHAT_FIELDS]
    if unknown:
        return f"Unrecognized request argument supplied: {unknown[0]}"
    for key in body.get("stream_options") or {}:
        if key not in _STREAM_OPTIONS:
            return f"Unrecognized request argument supplied: stream_options.{key}"
    for i, message in enumerate(body.get("messages") or []):
        allowed = _MESSAGE_FIELDS.get(message.get("role"))
        if allowed is None:
            return f"Invalid value: {message.get('role')!r}. Supported values are: " + ", ".join(
                f"'{r}'" for r in _MESSAGE_FIELDS) + f" (messages[{i}].role)"
        extra = [key for key in message if key not in allowed]
        if extra:
            return f"Unrecognized request argument supplied: messages[{i}].{extra[0]}"
    for i, tool in enumerate(body.get("tools") or []):
        extra = [k for k in tool if k not in _TOOL_FIELDS]
        extra += [f"function.{k}" for k in tool.get("function") or {} if k not in _FUNCTION_FIELDS]
        if extra:
            return f"Unrecognized request argument supplied: tools[{i}].{extra[0]}"
    temperature = body.get("temperature")
    if temperature is not None and not 0 <= temperature <= 2:
        return f"Invalid 'temperature': decimal above maximum value ({temperature})"
    limit = body.get("max_tokens")
    if limit is not None and limit < 1:
        return f"Invalid 'max_tokens': integer below minimum value ({limit})"
    return None
# Words of a tool's name that say nothing about what it is for.
_VERBS = {"get", "set", "do", "make", "find", "lookup", "fetch", "query"}


def tool_output_text(content: object) -> str:
    """A tool message's content as words: a JSON string unquoted, an object's values."""
    text = content if isinstance(content, str) else json.dumps(content)
    try:
        value = json.loads(text)
    except ValueError:
        return text
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return ", ".join(str(v) for v in value.values())
    return text


def message_text(message: dict) -> str:
    """The text of a chat message (a string, or a list of text parts)."""
    content = message.get("content")
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


class ChatServer(LoopbackServer):
    """The scripted chat-completions server. ``requests`` holds every request body received
    on ``/v1/chat/completions``, in order (appended from the server's thread)."""

    def __init__(self, model: str = "parley-test-llm",
                 reply: str = "That is a fine question, and here is my short answer to it.",
                 tool_reply: str = "Here is what the tool found: {output}.",
                 replies: dict[str, str] | None = None, delay_s: float = 0.01,
                 recordings: Path = RECORDINGS, *, strict: bool = False) -> None:
        super().__init__()
        self.strict = strict
        self.refused: list[dict] = []
        self.model = model
        self.reply = reply
        self.tool_reply = tool_reply
        self.replies = dict(replies or {})
        self.delay_s = delay_s  # between streamed chunks, as a model writes them
        self.recordings = recordings
        self.requests: list[dict] = []
        self.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def system_prompts(self) -> list[str]:
        """The system message of every request, in order ('' where there was none)."""
        return [next((message_text(m) for m in body.get("messages", []) if m.get("role") == "system"), "")
                for body in self.requests]

    def tool_call_stream(self, name: str) -> list[dict]:
        """The recorded chunks of a call of tool ``name``."""
        path = self.recordings / f"tool_call_{name}.jsonl"
        return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]

    # ------------------------------------------------------------------ choosing the answer
    def _tool_to_call(self, body: dict) -> str | None:
        messages = body.get("messages") or []
        if not body.get("tools") or not messages or messages[-1].get("role") != "user":
            return None
        said = _words(message_text(messages[-1]))
        for tool in body["tools"]:
            name = (tool.get("function") or {}).get("name", "")
            words = set(name.lower().split("_")) - _VERBS
            if words & said and (self.recordings / f"tool_call_{name}.jsonl").is_file():
                return name
        return None

    def _answer(self, body: dict) -> tuple[list[dict], str]:
        """The chunks' deltas (without the envelope) and the finish reason."""
        tool = self._tool_to_call(body)
        if tool is not None:
            chunks = self.tool_call_stream(tool)
            deltas = [c["choices"][0]["delta"] for c in chunks if c.get("choices")]
            finish = next((c["choices"][0]["finish_reason"] for c in chunks
                           if c.get("choices") and c["choices"][0].get("finish_reason")), "tool_calls")
            return deltas, finish
        messages = body.get("messages") or []
        if messages and messages[-1].get("role") == "tool":
            text = self.tool_reply.format(output=tool_output_text(messages[-1].get("content", "")))
        else:
            said = _words(message_text(messages[-1])) if messages else set()
            text = next((r for word, r in self.replies.items() if word in said), self.reply)
        words = text.split(" ")
        deltas = [{"role": "assistant", "content": ""}]
        deltas += [{"content": (w if i == 0 else " " + w)} for i, w in enumerate(words)]
        return deltas, "stop"

    # ------------------------------------------------------------------ the server
    def routes(self, app) -> None:
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/chat/completions", self._completions)

    async def _models(self, _request):
        from aiohttp import web

        return web.json_response({"object": "list", "data": [
            {"id": self.model, "object": "model", "created": 0, "owned_by": "parley-tests"}]})

    async def _completions(self, request):
        from aiohttp import web

        body = await request.json()
        self.requests.append(body)
        refusal = schema_error(body) if self.strict else None
        if refusal is not None:
            self.refused.append(body)
            return web.json_response({"error": {"message": refusal, "type": "invalid_request_error",
                                                "param": None, "code": None}}, status=400)
        deltas, finish = self._answer(body)
        envelope = {"id": f"chatcmpl-test{len(self.requests)}", "created": int(time.time()),
                    "model": body.get("model", self.model), "system_fingerprint": None}
        completion_tokens = len(deltas)
        usage = {"prompt_tokens": sum(len(message_text(m).split()) for m in body.get("messages", [])),
                 "completion_tokens": completion_tokens}
        usage["total_tokens"] = usage["prompt_tokens"] + completion_tokens
        if not body.get("stream"):
            return web.json_response({**envelope, "object": "chat.completion", "usage": usage,
                                      "choices": [{"index": 0, "finish_reason": finish,
                                                   "message": _merge(deltas), "logprobs": None}]})
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                               "Cache-Control": "no-cache"})
        await response.prepare(request)

        async def send(chunk: dict) -> None:
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())

        try:
            for delta in deltas:
                await send({**envelope, "object": "chat.completion.chunk", "choices": [
                    {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}]})
                await asyncio.sleep(self.delay_s)
            await send({**envelope, "object": "chat.completion.chunk", "choices": [
                {"index": 0, "delta": {}, "logprobs": None, "finish_reason": finish}]})
            if (body.get("stream_options") or {}).get("include_usage"):
                await send({**envelope, "object": "chat.completion.chunk", "choices": [], "usage": usage})
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
        except (ConnectionError, RuntimeError):  # the client closed the stream (a barge-in)
            pass
        return response


def _words(text: str) -> set[str]:
    return set("".join(c if c.isalnum() else " " for c in text.lower()).split())


def _merge(deltas: list[dict]) -> dict:
    """Streamed deltas folded into one assistant message (the non-streaming answer)."""
    message: dict = {"role": "assistant", "content": None}
    calls: dict[int, dict] = {}
    for delta in deltas:
        if delta.get("content"):
            message["content"] = (message["content"] or "") + delta["content"]
        for part in delta.get("tool_calls") or ():
            call = calls.setdefault(part["index"], {"id": "", "type": "function",
                                                    "function": {"name": "", "arguments": ""}})
            call["id"] = part.get("id") or call["id"]
            function = part.get("function") or {}
            call["function"]["name"] += function.get("name") or ""
            call["function"]["arguments"] += function.get("arguments") or ""
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return message
