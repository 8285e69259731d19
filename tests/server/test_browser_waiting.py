"""The web page on a busy server with a waiting room (``--queue``), in a real browser
(Debian's headless Chromium, ``tests.support.browser``): it is admitted, says which place
in line it has while another client holds the only pipeline, and gets its session when
that client leaves. Skips without Chromium, except under CI (``PARLEY_REQUIRE_BROWSER=1``).
"""

from __future__ import annotations

import asyncio
import json
import os
import urllib.request

import pytest
from websockets.asyncio.client import connect

from tests.support.browser import Chromium
from tests.support.paths import ROOT
from tests.support.server import ServeProcess, free_port, recv_json

pytestmark = pytest.mark.slow

MIC = ROOT / "resources" / "audio" / "jfk.flac"



@pytest.fixture(scope="module")
def served(chromium_path):
    port = free_port()
    server = ServeProcess("--port", str(port), "--num-pipelines", "1", "--queue", "1",
                          env={"PARLEY_CACHE_DIR": os.environ["PARLEY_CACHE_DIR"]})
    server.wait_ready(300)
    yield port
    server.stop()


@pytest.fixture
def mic_wav(tmp_path):
    import soundfile as sf
    import soxr

    audio, rate = sf.read(MIC, dtype="float32")
    path = tmp_path / "mic.wav"
    sf.write(path, soxr.resample(audio, rate, 48000), 48000, subtype="PCM_16")
    return path


def queue_length(port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/pool", timeout=10) as response:
        return json.loads(response.read())["queue"]["length"]


def test_the_page_waits_in_line_showing_its_place_and_gets_in(served, chromium_path, mic_wav):
    chromium = Chromium(mic_wav, executable=chromium_path)

    async def run():
        holder = await connect(f"ws://127.0.0.1:{served}/v1/realtime", proxy=None)
        assert (await recv_json(holder))["type"] == "session.created"
        page = chromium.open(f"http://127.0.0.1:{served}/")
        page.evaluate("document.getElementById('connect').click()")
        await asyncio.to_thread(page.wait, "window.parley.stats.problem === 'queued'", 30,
                                "the page's place in line")
        shown = page.text("message")
        waiting = await asyncio.to_thread(queue_length, served)
        connected_while_waiting = page.evaluate("window.parley.stats.connected")
        await holder.close()
        await asyncio.to_thread(page.wait, "window.parley.stats.connected", 40,
                                "the page to get the freed pipeline")
        return shown, waiting, connected_while_waiting, page.text("message"), page.evaluate(
            "window.parley.stats.errors")

    try:
        shown, waiting, connected_while_waiting, after, errors = asyncio.run(
            asyncio.wait_for(run(), 120))
    finally:
        chromium.close()
    assert shown == "Every pipeline is in use: waiting for a free one (place 1 in line)."
    assert waiting == 1 and not connected_while_waiting
    assert after == "" and errors == []
