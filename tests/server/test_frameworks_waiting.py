"""Realtime clients that connect to a full server with a waiting room (``--queue``) wait
for their session instead of failing: the official ``openai`` client, openai-agents
(``RealtimeRunner``) and pipecat (``OpenAIRealtimeLLMService``), their code unchanged.

Against a full server without a queue each of them fails (a 503 before the upgrade, which
none of them retries). Here ``parley-cli serve`` has one pipeline and ``--queue 2``: a raw
client holds the unit, the framework connects through a ``WsTap`` (which keeps every
event both ways), sets its session up and asks for a reply. While it waits the pool shows
it in line and it hears nothing; once the holder leaves it gets ``session.created``, its
session set up as it asked, and a spoken reply, with no ``error`` event at any point. The
LLM stage is remote, on the scripted chat server (``tests.support.chat_server``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time

import pytest
from websockets.asyncio.client import connect

from tests.support.chat_server import ChatServer, message_text
from tests.support.realtime_talk import transcript
from tests.support.server import LOOPBACK, ServeProcess, free_port, pool_when, recv_json
from tests.support.ws_tap import WsTap

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("loopback_without_proxy")]

INSTRUCTIONS = "You are Juniper, the test assistant of Parley. Answer in one short sentence."
QUESTION = "Hello there, who are you?"
QUIET_S = 1.5  # how long a waiting client is watched: nothing may reach it
@pytest.fixture(scope="module")
def chat():
    server = ChatServer()
    yield server
    server.close()


@pytest.fixture(scope="module")
def served(chat):
    port = free_port()
    server = ServeProcess("--port", str(port), "--num-pipelines", "1", "--queue", "2",
                          "--llm-backend", "openai", "--llm-base-url", chat.url,
                          "--llm-model", chat.model,
                          env={"PARLEY_CACHE_DIR": os.environ["PARLEY_CACHE_DIR"], "NO_PROXY": LOOPBACK})
    server.wait_ready(300)
    yield port
    assert server.stop() == 0, server.stderr
    assert "Traceback" not in server.stderr, server.stderr


@pytest.fixture
def tap(served):
    relay = WsTap(f"ws://127.0.0.1:{served}")
    yield relay
    relay.close()


def idle(pool: dict) -> bool:
    return pool["units"][0]["state"] == "free" and pool["queue"]["length"] == 0


async def until(check, what: str, tap: WsTap, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}: errors {tap.errors()}, "
                                 f"server events {tap.kinds('server')[-20:]}")
        await asyncio.sleep(0.05)


class Holder:
    """A raw client holding the server's only unit until ``leave``."""

    def __init__(self, port: int) -> None:
        self.port = port
        self._conn = None

    async def take(self) -> None:
        await pool_when(self.port, idle, timeout=30.0)
        self._conn = await connect(f"ws://127.0.0.1:{self.port}/v1/realtime", proxy=None)
        assert (await recv_json(self._conn))["type"] == "session.created"

    async def leave(self) -> None:
        assert self._conn is not None
        await self._conn.close()


async def waited_in_line(port: int, tap: WsTap) -> dict:
    """Once the framework's connection is in line, watch it for ``QUIET_S``: it must hear
    nothing. Returns the pool as it showed the line."""
    pool = await pool_when(port, lambda p: p["queue"]["length"] == 1, timeout=30.0)
    await asyncio.sleep(QUIET_S)
    assert tap.kinds("server") == [], "a waiting client got events before its session"
    return pool


def check_served_after_waiting(tap: WsTap, pool: dict, chat: ChatServer, first_request: int) -> None:
    """The framework waited in line, then got its session first, as it asked, and a reply."""
    assert tap.connections == 1  # one connection: it waited, it did not retry
    assert pool["queue"]["waiting"][0]["position"] == 1
    assert tap.kinds("server")[0] == "session.created"
    assert tap.sent("server", "session.created")[0]["session"]["parley"]["queue"]["waited_s"] >= QUIET_S
    assert tap.errors() == []
    updated = tap.sent("server", "session.updated")
    assert updated and INSTRUCTIONS in updated[-1]["session"]["instructions"]
    done = tap.sent("server", "response.done")
    assert done and done[-1]["response"]["status"] == "completed", done
    assert transcript(done[-1]["response"]).strip()
    systems = [next((message_text(m) for m in body["messages"] if m.get("role") == "system"), "")
               for body in chat.requests[first_request:]]
    assert systems and all(INSTRUCTIONS in s for s in systems), systems


# ---------------------------------------------------------------------- the openai client
def test_openai_client_waits_for_a_unit(served, chat, tap):
    from openai import AsyncOpenAI

    first_request = len(chat.requests)

    async def run():
        holder = Holder(served)
        await holder.take()
        client = AsyncOpenAI(api_key="unused-on-loopback", base_url=f"http://127.0.0.1:{served}/v1",
                             websocket_base_url=f"{tap.url}/v1")
        async with client.realtime.connect(model="parley",
                                           websocket_connection_options={"proxy": None}) as conn:
            await conn.session.update(session={"type": "realtime", "instructions": INSTRUCTIONS})
            await conn.conversation.item.create(item={
                "type": "message", "role": "user",
                "content": [{"type": "input_text", "text": QUESTION}]})
            await conn.response.create()
            pool = await waited_in_line(served, tap)
            await holder.leave()
            kinds = []
            async for event in conn:
                kinds.append(event.type)
                if event.type in ("response.done", "error"):
                    break
        return pool, kinds

    pool, kinds = asyncio.run(asyncio.wait_for(run(), 180))
    assert kinds[0] == "session.created" and kinds[-1] == "response.done", kinds
    check_served_after_waiting(tap, pool, chat, first_request)


# ---------------------------------------------------------------------- openai-agents
def test_openai_agents_realtime_runner_waits_for_a_unit(served, chat, tap):
    from agents.realtime import RealtimeAgent, RealtimeRunner

    agent = RealtimeAgent(name="Juniper", instructions=INSTRUCTIONS)
    first_request = len(chat.requests)

    async def run():
        holder = Holder(served)
        await holder.take()
        session = await RealtimeRunner(agent).run(
            model_config={"url": f"{tap.url}/v1/realtime", "api_key": "unused-on-loopback"})
        events = []
        async with session:
            async def collect():
                async for event in session:
                    events.append(event)

            collecting = asyncio.create_task(collect())
            try:
                await session.send_message(QUESTION)
                pool = await waited_in_line(served, tap)
                await holder.leave()
                await until(lambda: tap.sent("server", "response.done"), "response.done", tap)
            finally:
                collecting.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await collecting
        return pool, events

    pool, events = asyncio.run(asyncio.wait_for(run(), 180))
    assert [e for e in events if e.type == "error"] == []
    check_served_after_waiting(tap, pool, chat, first_request)


# ---------------------------------------------------------------------- pipecat
def test_pipecat_openai_realtime_waits_for_a_unit(served, chat, tap):
    from pipecat.frames.frames import EndFrame, LLMRunFrame
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.pipeline.worker import PipelineParams, PipelineWorker
    from pipecat.processors.aggregators.llm_context import LLMContext
    from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair
    from pipecat.services.openai.realtime.llm import OpenAIRealtimeLLMService
    from pipecat.workers.runner import WorkerRunner

    errors: list = []
    first_request = len(chat.requests)

    async def run():
        holder = Holder(served)
        await holder.take()
        llm = OpenAIRealtimeLLMService(api_key="unused-on-loopback", base_url=f"{tap.url}/v1/realtime",
                                       settings=OpenAIRealtimeLLMService.Settings(
                                           system_instruction=INSTRUCTIONS))
        context = LLMContext([{"role": "developer", "content": QUESTION}])
        user, assistant = LLMContextAggregatorPair(context)
        worker = PipelineWorker(Pipeline([user, llm, assistant]), params=PipelineParams(),
                                idle_timeout_secs=None)

        @worker.event_handler("on_pipeline_error")
        async def on_error(_worker, frame):
            errors.append(frame.error)

        runner = WorkerRunner(handle_sigint=False)
        await runner.add_workers(worker)
        running = asyncio.create_task(runner.run())
        try:
            await worker.queue_frames([LLMRunFrame()])  # as pipecat's example starts: a greeting
            pool = await waited_in_line(served, tap)
            await holder.leave()
            await until(lambda: tap.sent("server", "response.done"), "response.done", tap)
        finally:
            await worker.queue_frame(EndFrame())
            try:
                await asyncio.wait_for(asyncio.shield(running), 20)
            except TimeoutError:
                await runner.cancel()
                await running
        return pool

    pool = asyncio.run(asyncio.wait_for(run(), 180))
    assert errors == []
    check_served_after_waiting(tap, pool, chat, first_request)
