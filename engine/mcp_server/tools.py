"""The MCP tools of Parley's MCP server, declared on the MCP SDK's ``MCPServer``.

``speak`` says a text on this machine's speaker, ``listen`` returns what the user says
next, ``ask`` does both (an agent's question to its user). They run on the ``Voice``'s
one unit (``parley-cli mcp``), or on a ``Voice`` a ``VoiceLender`` lends for the call
(a server's ``/mcp``: ``engine.server.mcp_route``), one call at a time, each on a worker
thread, so the event loop that serves the protocol never waits for the pipeline. A call
the client cancels (or the server's end) is not waited for: its thread is told to stop
(speech in progress is cut off). A bad argument or a failed stage is a tool error the
agent reads (``ToolError``), never a crash of the server.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Protocol, TypeVar

import anyio
import anyio.to_thread
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

from engine.errors import ParleyError
from engine.mcp_server.voice import LISTEN_MAX_S, LISTEN_MIN_S, Heard, Spoken, Voice

T = TypeVar("T")

#: How long ``listen`` and ``ask`` wait for the user by default, in seconds.
DEFAULT_LISTEN_S = 30.0

_INSTRUCTIONS = (
    "Parley is the user's voice: `speak` says a text aloud on their speaker, `listen` returns "
    "the transcript of what they say next, `ask` says a question and returns their spoken "
    "answer. Keep spoken texts short and plain (no markdown, no code): they are read aloud.")


class SpeakResult(BaseModel):
    """What ``speak`` did."""

    played: bool = Field(description="true when the whole text was played")
    duration_s: float = Field(description="seconds of speech made for the text")
    interrupted: bool = Field(description="true when the user spoke over it and cut it off")


class ListenResult(BaseModel):
    """What ``listen`` heard."""

    transcript: str = Field(description="the words the user said; empty when nobody spoke")
    timed_out: bool = Field(description="true when nobody spoke within timeout_s")
    waited_s: float = Field(description="seconds waited for the user to finish speaking")
    speech_s: float | None = Field(description="how long the user spoke, in seconds")


class AskResult(BaseModel):
    """What ``ask`` said and heard."""

    answer: str = Field(description="the words of the user's spoken answer; empty on a timeout")
    timed_out: bool = Field(description="true when nobody answered within timeout_s")
    question_played: bool = Field(description="true when the whole question was played")
    question_interrupted: bool = Field(description="true when the user answered over the question")
    question_s: float = Field(description="seconds of speech made for the question")
    waited_s: float = Field(description="seconds waited for the answer after the question")


class VoiceLender(Protocol):
    """Lends a ``Voice`` for the length of one tool call; a ``ToolError`` says why not."""

    def lend(self) -> AbstractAsyncContextManager[Voice]:
        """The voice for one call, taken back when the call ends (or is cancelled)."""
        ...


def build_server(voices: Voice | VoiceLender) -> MCPServer:
    """An ``MCPServer`` named "parley" whose tools speak and listen through ``voices``:
    one ``Voice`` for every call, or the one a ``VoiceLender`` lends for each call."""
    lend = _keep(voices) if isinstance(voices, Voice) else voices.lend
    server = MCPServer("parley", title="Parley", instructions=_INSTRUCTIONS,
                       description="Talk with the user by voice through Parley's pipeline")
    wait = (f"timeout_s: how long to wait for the user, in seconds ({LISTEN_MIN_S:g} to "
            f"{LISTEN_MAX_S:g}).")

    async def speak(text: str) -> SpeakResult:
        async with lend() as voice:
            spoken = await _in_thread(lambda stop: voice.speak(text, stop))
        return _speak_result(spoken)

    async def listen(timeout_s: float = DEFAULT_LISTEN_S) -> ListenResult:
        async with lend() as voice:
            heard: Heard = await _in_thread(lambda stop: voice.listen(timeout_s, stop))
        return ListenResult(transcript=heard.transcript, timed_out=heard.timed_out,
                            waited_s=heard.waited_s, speech_s=heard.speech_s)

    async def ask(text: str, timeout_s: float = DEFAULT_LISTEN_S) -> AskResult:
        async with lend() as voice:
            spoken, heard = await _in_thread(lambda stop: voice.ask(text, timeout_s, stop))
        if spoken.error is not None:
            raise ToolError(f"the question could not be spoken: {spoken.error}")
        return AskResult(answer=heard.transcript, timed_out=heard.timed_out,
                         question_played=spoken.played, question_interrupted=spoken.interrupted,
                         question_s=spoken.duration_s,
                         waited_s=heard.waited_s)

    server.add_tool(speak, title="Speak aloud", description=(
        "Say a text aloud on the user's speaker with Parley's voice; returns once it was played "
        "(or the user cut it off by speaking). text: plain words to read aloud (no markdown)."),
        annotations=ToolAnnotations(title="Speak aloud", read_only_hint=False,
                                    destructive_hint=False, idempotent_hint=False,
                                    open_world_hint=True))
    server.add_tool(listen, title="Listen to the user", description=(
        "Wait for the user's next spoken turn and return its transcript (speech to text only: "
        "nothing is said back). " + wait),
        annotations=ToolAnnotations(title="Listen to the user", read_only_hint=True,
                                    open_world_hint=True))
    server.add_tool(ask, title="Ask the user", description=(
        "Ask the user a question aloud and return the transcript of their spoken answer "
        "(an answer that starts while the question plays cuts it off and counts). "
        "text: the question, plain words. " + wait),
        annotations=ToolAnnotations(title="Ask the user", read_only_hint=False,
                                    destructive_hint=False, idempotent_hint=False,
                                    open_world_hint=True))
    return server


def _keep(voice: Voice) -> Callable[[], AbstractAsyncContextManager[Voice]]:
    """``voice`` lent for every call and never taken back (its owner closes it)."""

    @asynccontextmanager
    async def lend() -> AsyncIterator[Voice]:
        yield voice

    return lend


async def _in_thread(call: Callable[[threading.Event], T]) -> T:
    """``call(stop)`` on a worker thread, its Parley errors turned into tool errors the
    agent reads. Cancelled, it sets ``stop`` and returns at once (the thread ends soon)."""
    stop = threading.Event()
    try:
        return await anyio.to_thread.run_sync(call, stop, abandon_on_cancel=True)
    except anyio.get_cancelled_exc_class():
        stop.set()
        raise
    except ParleyError as exc:
        raise ToolError(str(exc)) from None


def _speak_result(spoken: Spoken) -> SpeakResult:
    if spoken.error is not None:
        raise ToolError(f"the text could not be spoken: {spoken.error}")
    return SpeakResult(played=spoken.played, duration_s=spoken.duration_s,
                       interrupted=spoken.interrupted)
