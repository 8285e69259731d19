"""``parley-cli mcp``: Parley as an MCP server over stdio, driven by the MCP SDK's own
client as an editor's agent would drive it, on the offline stack (real models) with
jfk.flac in place of the microphone and a WAV file in place of the speaker."""

import asyncio
import sys
import time

import pytest
import soundfile as sf

from tests.support.mcp_servers import check_speak_and_ask
from tests.support.paths import ROOT
from tests.support.transcripts import normalize

pytest.importorskip("mcp")

JFK = ROOT / "resources" / "audio" / "jfk.flac"


def _server(*args: str, env: dict | None = None):
    from mcp.client.stdio import StdioServerParameters

    return StdioServerParameters(command=sys.executable, args=["-m", "engine.cli", "mcp", *args],
                                 cwd=str(ROOT), env=env)


def _client(params):
    from mcp import Client

    return Client(params, raise_exceptions=True)


@pytest.mark.slow
def test_an_mcp_client_speaks_and_asks_through_parley(tmp_path, stt_model):
    spoken_wav = tmp_path / "spoken.wav"
    errlog = (tmp_path / "stderr.txt").open("w")

    async def session():
        from mcp.client.stdio import stdio_client
        from mcp.client.session import ClientSession

        params = _server("--input", str(JFK), "--output", str(spoken_wav),
                         env={"PARLEY_DATA_DIR": str(tmp_path)})
        async with stdio_client(params, errlog=errlog) as (read, write), \
                ClientSession(read, write) as client:
            await client.initialize()
            tools = {t.name: t for t in (await client.list_tools()).tools}
            speak = await client.call_tool("speak", {"text": "Hello from Parley. The build passed."})
            asked = await client.call_tool("ask", {"text": "What did the president say?",
                                                   "timeout_s": 60})
            empty = await client.call_tool("speak", {"text": "   "})
            thanks = await client.call_tool("speak", {"text": "Thank you."})
            return tools, speak, asked, empty, thanks

    tools, speak, asked, empty, thanks = asyncio.run(session())
    errlog.close()
    stderr = (tmp_path / "stderr.txt").read_text()
    assert set(tools) >= {"speak", "listen", "ask"}, stderr
    assert tools["listen"].annotations.read_only_hint is True
    for name in ("speak", "ask"):  # they make sound on the user's speaker: not read-only
        annotations = tools[name].annotations
        assert annotations.read_only_hint is False and annotations.destructive_hint is False
    assert "timeout_s" in tools["listen"].input_schema["properties"]

    check_speak_and_ask(speak, asked)
    answer = asked.structured_content

    assert empty.is_error and "needs words" in empty.content[0].text  # a clear tool error

    # The speaker was a WAV, paced like one and written when the server ended. It holds the
    # three texts and nothing else: the answer heard got no reply from the assistant.
    assert not thanks.is_error and thanks.structured_content["played"] is True
    audio, rate = sf.read(spoken_wav, dtype="float32")
    said_s = (speak.structured_content["duration_s"] + answer["question_s"]
              + thanks.structured_content["duration_s"])
    assert answer["question_s"] > 0.5 and abs(audio.size / rate - said_s) < 0.3, (audio.size / rate, said_s)
    from engine.audio.decode import resample

    heard = normalize(stt_model.transcribe(resample(audio, rate, 16000), "en").text)
    assert "hello from parley" in heard and "president" in heard, heard


@pytest.mark.slow
def test_listen_times_out_when_nobody_speaks_and_a_cancelled_call_frees_the_voice(tmp_path):
    silence = tmp_path / "silence.wav"
    import anyio
    import numpy as np

    sf.write(silence, np.zeros(16000, np.float32), 16000)

    async def session():
        async with _client(_server("--input", str(silence), "--output", str(tmp_path / "o.wav"),
                                   env={"PARLEY_DATA_DIR": str(tmp_path)})) as client:
            heard = await client.call_tool("listen", {"timeout_s": 2})
            with anyio.move_on_after(2) as waiting:  # the client gives up on a long listen
                await client.call_tool("listen", {"timeout_s": 300})
            started = time.monotonic()
            spoken = await client.call_tool("speak", {"text": "Still here."})
            return heard, waiting.cancelled_caught, spoken, time.monotonic() - started

    heard, cancelled, spoken, speak_s = asyncio.run(session())
    assert not heard.is_error, heard.content
    assert heard.structured_content["timed_out"] is True
    assert heard.structured_content["transcript"] == ""
    assert heard.structured_content["waited_s"] >= 2
    # The cancelled listen stopped on the server: the next call did not wait out its 300 s.
    assert cancelled and not spoken.is_error and spoken.structured_content["played"] is True
    assert speak_s < 60, speak_s


def test_a_missing_recording_is_refused_before_any_model_loads(tmp_path):
    from tests.support.cli import run_cli

    result = run_cli("mcp", "--input", str(tmp_path / "nowhere.flac"), timeout=120)
    assert result.returncode != 0
    assert "nowhere.flac" in result.stderr and "Traceback" not in result.stderr
    assert result.stdout == ""  # stdout belongs to the protocol
