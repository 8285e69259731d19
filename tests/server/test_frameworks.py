"""Two agent frameworks drive ``parley-cli serve`` as they would OpenAI's Realtime API, their
code unchanged: openai-agents (``RealtimeAgent`` and ``RealtimeRunner`` with their default
settings) and pipecat (``OpenAIRealtimeLLMService`` in a pipeline, as its realtime example
builds it). Each gets instructions and a function tool, and spoken questions (the bundled
Piper voice) streamed at real time: a question for the tool, and a barge-in over a long reply.

Parley runs with its real local VAD, STT and TTS and its LLM stage remote, on a scripted
chat-completions server (``tests.support.chat_server``) that records every prompt: the
instructions must be its system prompt. A ``WsTap`` relays the framework's WebSocket to the
server and keeps every event both ways: no ``error`` event may pass it. One server for the
module; each test is one client.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os

import pytest

from engine.bench.words import word_errors
from tests.support.chat_server import ChatServer, message_text
from tests.support.realtime_talk import Talk, transcript
from tests.support.server import LOOPBACK, ServeProcess, free_port
from tests.support.speech import Microphone, piper_voice, speak
from tests.support.transcripts import normalize
from tests.support.ws_tap import WsTap

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("loopback_without_proxy")]

INSTRUCTIONS = "You are Juniper, the test assistant of Parley. Answer in one short sentence."
FORECAST = "sunny and 23 degrees"
WEATHER_Q = "What is the weather in Paris today?"
STORY_Q = "Please tell me a short story about a cat."
DINNER_Q = "What should I cook for dinner tonight?"
BARGE_Q = "Wait, tell me a joke instead."
STORY = ("Once upon a time a small grey cat lived by the river, and every morning she watched "
         "the boats go by. One day a fisherman gave her a silver fish, and she followed him home. "
         "From then on the two of them sat together on the bank until the sun went down.")


@pytest.fixture(scope="module")
def chat():
    server = ChatServer(replies={"story": STORY})
    yield server
    server.close()


@pytest.fixture(scope="module")
def served(chat):
    port = free_port()
    server = ServeProcess("--port", str(port), "--llm-backend", "openai", "--llm-base-url", chat.url,
                          "--llm-model", chat.model,
                          env={"PARLEY_CACHE_DIR": os.environ["PARLEY_CACHE_DIR"], "NO_PROXY": LOOPBACK})
    server.wait_ready(300)
    yield port
    assert server.stop() == 0, server.stderr
    assert "Traceback" not in server.stderr, server.stderr


@pytest.fixture(scope="module")
def speech():
    voice = piper_voice()
    # Steady (no random noise): with it, one run in a few voiced the barge-in question so
    # that tiny.en heard "wait tell me the joke can sted" (3 words wrong), failing both
    # framework tests of that run; without it all four are heard within one word here.
    return {q: speak(voice, q, steady=True) for q in (WEATHER_Q, STORY_Q, DINNER_Q, BARGE_Q)}


@pytest.fixture
def tap(served):
    relay = WsTap(f"ws://127.0.0.1:{served}")
    yield relay
    relay.close()


def heard(tap: WsTap) -> list[str]:
    """What the server transcribed of the user, in order."""
    return [normalize(e.get("transcript", ""))
            for e in tap.sent("server", "conversation.item.input_audio_transcription.completed")]


def check_heard(tap: WsTap, questions: list[str]) -> None:
    """One transcript per spoken question, in order, each at most one word wrong: tiny.en
    hears Piper's noisy "Paris" as "pairs" now and then, which is not what these tests are
    about; a turn cut in two, or a garbled one, still fails."""
    said = heard(tap)
    assert len(said) == len(questions), said
    for question, text in zip(questions, said):
        errors, _words = word_errors(question, text)
        assert errors <= 1, (question, text, said)


def check_tool_round_trip(tap: WsTap, requests: list[dict]) -> None:
    """The tool call went out as a function_call item, the client answered it, the LLM got
    the output as a tool message and the spoken reply says it."""
    calls = [e["item"] for e in tap.sent("server", "response.output_item.done")
             if e.get("item", {}).get("type") == "function_call"]
    assert [c.get("name") for c in calls] == ["get_weather"], calls
    assert json.loads(calls[0]["arguments"]) == {"city": "Paris"}
    outputs = [e["item"] for e in tap.sent("client", "conversation.item.create")
               if e.get("item", {}).get("type") == "function_call_output"]
    assert [o.get("call_id") for o in outputs] == [calls[0]["call_id"]], outputs
    assert FORECAST in outputs[0]["output"]
    tool_messages = [m for body in requests for m in body["messages"] if m.get("role") == "tool"]
    assert tool_messages and FORECAST in message_text(tool_messages[-1]), tool_messages
    assert any(call.get("function", {}).get("name") == "get_weather"
               for body in requests for m in body["messages"] if m.get("role") == "assistant"
               for call in m.get("tool_calls") or []), "the tool call is not in the LLM's history"


def check_barge_in(tap: WsTap, item_id: str, story_seconds: float) -> None:
    """The reply talked over was cut where the user came in: truncated by the client, and
    the server confirmed it."""
    truncated = [e for e in tap.sent("server", "conversation.item.truncated") if e.get("item_id") == item_id]
    assert truncated, f"no conversation.item.truncated for {item_id}: {tap.kinds('server')[-30:]}"
    assert 0 < truncated[-1]["audio_end_ms"] < story_seconds * 1000, (truncated, story_seconds)


def check_instructions(requests: list[dict]) -> None:
    systems = [next((message_text(m) for m in body["messages"] if m.get("role") == "system"), "")
               for body in requests]
    assert systems and all(INSTRUCTIONS in s for s in systems), systems


# ---------------------------------------------------------------------- openai-agents
def test_openai_agents_realtime_runner_three_spoken_turns_with_tool_and_barge_in(served, chat, tap, speech):
    from agents import function_tool
    from agents.realtime import RealtimeAgent, RealtimeRunner

    called: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """Get the current weather in a city."""
        called.append(city)
        return FORECAST

    agent = RealtimeAgent(name="Juniper", instructions=INSTRUCTIONS, tools=[get_weather])
    first_request = len(chat.requests)

    async def run():
        session = await RealtimeRunner(agent).run(
            model_config={"url": f"{tap.url}/v1/realtime", "api_key": "unused-on-loopback"})
        events = []
        async with session:
            mic = Microphone(session.send_audio)
            talk = Talk(tap, mic, speech)

            async def collect():
                async for event in session:
                    events.append(event)

            tasks = [asyncio.create_task(mic.run()), asyncio.create_task(collect())]
            try:
                await talk.until(lambda: "session.updated" in tap.kinds("server"), "session.updated")
                weather = await talk.ask(WEATHER_Q)
                item_id, after_barge = await talk.barge_in(STORY_Q, BARGE_Q)
                story_seconds = talk.audio_seconds(item_id)
            finally:
                for task in tasks:
                    task.cancel()
                for task in tasks:
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
        return events, weather, item_id, after_barge, story_seconds

    events, weather, item_id, after_barge, story_seconds = asyncio.run(asyncio.wait_for(run(), 240))
    requests = chat.requests[first_request:]
    assert tap.errors() == []
    assert [e for e in events if e.type == "error"] == []
    assert called == ["Paris"]
    assert [e.output for e in events if e.type == "tool_end"] == [FORECAST]
    check_heard(tap, [WEATHER_Q, STORY_Q, BARGE_Q])
    check_instructions(requests)
    check_tool_round_trip(tap, requests)
    assert FORECAST in transcript(weather), weather
    assert transcript(after_barge).strip()
    assert "audio_interrupted" in [e.type for e in events]
    check_barge_in(tap, item_id, story_seconds)


# ---------------------------------------------------------------------- pipecat
def test_pipecat_openai_realtime_three_spoken_turns_then_barge_in(served, chat, tap, speech):
    from pipecat.adapters.llm.schemas.function_schema import FunctionSchema
    from pipecat.adapters.llm.schemas.tools_schema import ToolsSchema
    from pipecat.frames.frames import EndFrame, InputAudioRawFrame, LLMRunFrame
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.pipeline.worker import PipelineParams, PipelineWorker
    from pipecat.processors.aggregators.llm_context import LLMContext
    from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair
    from pipecat.services.openai.realtime.llm import OpenAIRealtimeLLMService
    from pipecat.workers.runner import WorkerRunner

    called: list[dict] = []
    errors: list = []

    async def get_weather(params) -> None:
        called.append(dict(params.arguments))
        await params.result_callback(FORECAST)

    weather_tool = FunctionSchema(name="get_weather", description="Get the current weather in a city.",
                                  properties={"city": {"type": "string", "description": "The city"}},
                                  required=["city"])
    first_request = len(chat.requests)

    async def run():
        llm = OpenAIRealtimeLLMService(api_key="unused-on-loopback", base_url=f"{tap.url}/v1/realtime",
                                       settings=OpenAIRealtimeLLMService.Settings(
                                           system_instruction=INSTRUCTIONS))
        llm.register_function("get_weather", get_weather)
        context = LLMContext([{"role": "developer", "content": "Say hello!"}],
                             ToolsSchema(standard_tools=[weather_tool]))
        user, assistant = LLMContextAggregatorPair(context)
        worker = PipelineWorker(Pipeline([user, llm, assistant]), params=PipelineParams(),
                                idle_timeout_secs=None)

        @worker.event_handler("on_pipeline_error")
        async def on_error(_worker, frame):
            errors.append(frame.error)

        async def send(pcm: bytes) -> None:
            await worker.queue_frame(InputAudioRawFrame(audio=pcm, sample_rate=24000, num_channels=1))

        mic = Microphone(send)
        talk = Talk(tap, mic, speech)
        runner = WorkerRunner(handle_sigint=False)
        await runner.add_workers(worker)
        running = asyncio.create_task(runner.run())
        mic_task = None
        try:
            await worker.queue_frames([LLMRunFrame()])  # as pipecat's example starts: a greeting
            greeting = await talk.until(lambda: talk.spoken_reply_after(0), "the greeting")
            mic_task = asyncio.create_task(mic.run())
            await talk.played_out(greeting)
            answers = [await talk.ask(q) for q in (WEATHER_Q, DINNER_Q)]
            item_id, after_barge = await talk.barge_in(STORY_Q, BARGE_Q)
            story_seconds = talk.audio_seconds(item_id)
        finally:
            if mic_task is not None:
                mic_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await mic_task
            await worker.queue_frame(EndFrame())
            try:
                await asyncio.wait_for(asyncio.shield(running), 20)
            except TimeoutError:
                await runner.cancel()
                await running
        return greeting, answers, item_id, after_barge, story_seconds

    greeting, answers, item_id, after_barge, story_seconds = asyncio.run(asyncio.wait_for(run(), 300))
    requests = chat.requests[first_request:]
    assert tap.errors() == []
    assert errors == []
    assert called == [{"city": "Paris"}]
    check_heard(tap, [WEATHER_Q, DINNER_Q, STORY_Q, BARGE_Q])
    check_instructions(requests)
    check_tool_round_trip(tap, requests)
    assert transcript(greeting).strip()
    assert FORECAST in transcript(answers[0]), answers[0]
    assert transcript(answers[1]).strip() and transcript(after_barge).strip()
    check_barge_in(tap, item_id, story_seconds)
