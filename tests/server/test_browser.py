"""The web page in a real browser: Debian's headless Chromium (DevTools protocol,
``tests.support.browser``) opens ``/`` of a real ``parley-cli serve`` on the offline
models, with a recording of ``resources/audio/`` as its fake microphone. Two spoken turns
are transcribed, answered in text and played (the page counts the samples it played); a
reply spoken over is flushed; a full server, a wrong key and a lost connection show their
messages; the page works over ``wss://`` with ``--tls-self-signed``, the certificate
passed to the browser. ``make screenshots`` keeps the page's pictures
(``PARLEY_SCREENSHOTS_DIR``).

Without Chromium the tests skip, except under CI (``PARLEY_REQUIRE_BROWSER=1``).
One server with a key and one pipeline serves the module; the TLS test has its own.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import time
from pathlib import Path

import numpy as np
import pytest

from tests.support.browser import Chromium
from tests.support.paths import ROOT
from tests.support.server import ServeProcess, free_port

pytestmark = pytest.mark.slow

KEY = "browser-test-key"
# A reply short enough to leave the next turn room, long enough to be heard.
INSTRUCTIONS = "You are Parley, a friendly voice assistant. Answer in one short, polite sentence."
TURNS = ROOT / "resources" / "audio" / "librispeech_four_turns.flac"
# Where librispeech_four_turns.flac's first two turns lie (resources/audio/turns.json).
FIRST, SECOND = (0.1, 2.9), (5.4, 8.8)



def _wav(path: Path, parts: list[tuple[float, float] | float]) -> Path:
    """A 48 kHz 16-bit WAV of ``parts``: (start, end) stretches of the recording, or
    seconds of silence."""
    import soundfile as sf
    import soxr

    audio, rate = sf.read(TURNS, dtype="float32")
    pieces = [np.zeros(int(p * rate), np.float32) if isinstance(p, (int, float))
              else audio[int(p[0] * rate):int(p[1] * rate)] for p in parts]
    sf.write(path, soxr.resample(np.concatenate(pieces), rate, 48000), 48000, subtype="PCM_16")
    return path


@pytest.fixture(scope="module")
def recordings(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("mic")
    return {
        # Two turns far enough apart that the first reply has been played.
        "two_turns": _wav(folder / "two_turns.wav", [1.0, FIRST, 18.0, SECOND, 20.0]),
        # Looped: the question again a moment after it ended, over the reply.
        "again": _wav(folder / "again.wav", [0.5, FIRST, 3.0]),
        # A microphone in a quiet room.
        "silence": _wav(folder / "silence.wav", [4.0]),
    }


def _serve(*args: str, port: int | None = None) -> tuple[ServeProcess, int]:
    port = port or free_port()
    server = ServeProcess("--port", str(port), *args,
                          env={"PARLEY_CACHE_DIR": os.environ["PARLEY_CACHE_DIR"]})
    server.wait_ready(300)
    return server, port


@pytest.fixture(scope="module")
def served(chromium_path):
    server, port = _serve("--api-key", KEY, "--num-pipelines", "1")
    yield f"http://127.0.0.1:{port}/"
    server.stop()


@pytest.fixture
def browser(chromium_path, recordings, request):
    """A browser whose microphone plays ``recordings[request.param]`` (once for
    two_turns, looped otherwise)."""
    name = getattr(request, "param", "again")
    chromium = Chromium(recordings[name], loop=name != "two_turns", executable=chromium_path)
    yield chromium
    chromium.close()


def connect(page, key: str | None = KEY, instructions: str = INSTRUCTIONS) -> None:
    page.evaluate(f"document.getElementById('key').value = {json.dumps(key or '')}")
    page.evaluate(f"document.getElementById('instructions').value = {json.dumps(instructions)}")
    page.evaluate("document.getElementById('connect').click()")


def stats(page) -> dict:
    return page.evaluate("window.parley.stats")


def _folder(tmp_path: Path) -> Path:
    chosen = os.environ.get("PARLEY_SCREENSHOTS_DIR")
    folder = ROOT / chosen if chosen else tmp_path / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _screenshots(page, folder: Path) -> None:
    """The page at desktop and phone width, light and dark, its settings open."""
    page.evaluate("document.getElementById('settings').open = true")
    for name, width, height in (("desktop", 1280, 900), ("phone", 390, 844)):
        for scheme in ("light", "dark"):
            page.call("Emulation.setDeviceMetricsOverride", width=width, height=height,
                      deviceScaleFactor=1, mobile=width < 600)
            page.call("Emulation.setEmulatedMedia", features=[
                {"name": "prefers-color-scheme", "value": scheme}])
            background = page.evaluate("getComputedStyle(document.body).backgroundColor")
            assert background == ("rgb(247, 247, 245)" if scheme == "light" else "rgb(20, 20, 23)")
            # Nothing wider than the screen: usable at phone width.
            assert page.evaluate("document.documentElement.scrollWidth") <= width
            page.screenshot(folder / f"web_page-{name}-{scheme}.png")


@pytest.mark.parametrize("browser", ["two_turns"], indirect=True)
def test_two_spoken_turns_are_shown_answered_and_played(served, browser, tmp_path):
    page = browser.open(served)
    connect(page)
    page.wait("window.parley.stats.connected", 30, "the page to connect")
    first = page.wait("window.parley.stats.replies.length >= 1 && window.parley.stats.played > 0",
                      90, "the first reply, played")
    assert first
    after_first = stats(page)
    assert "testing routine" in after_first["transcripts"][0].lower()
    shown = page.text("transcript")
    assert after_first["transcripts"][0] in shown and after_first["replies"][0] in shown
    assert after_first["replies"][0].strip()
    # The turn's figures from response.done: beside the reply, and its stages.
    assert "voice-to-voice" in page.text("turn") and "speech to text" in page.text("turn")
    assert re.search(r"Parley · \d+ ms voice-to-voice", shown), shown
    page.wait("window.parley.stats.transcripts.length >= 2 && window.parley.stats.replies.length >= 2",
              90, "the second turn, answered")
    done = stats(page)
    assert "poison" in done["transcripts"][1].lower()
    assert done["replies"][1] in page.text("transcript")
    # The language each turn was heard in (the transcription event's): the first turn's
    # is marked on its bubble, the second's is not, as it did not change.
    assert done["languages"] == ["en", "en"]
    assert page.text("transcript").count("You · English") == 1
    page.wait(f"window.parley.stats.played > {after_first['played']}", 30, "the second reply, played")
    assert stats(page)["errors"] == []
    _screenshots(page, _folder(tmp_path))
    page.evaluate("window.parley.disconnect()")
    page.wait("!window.parley.stats.connected", 10)
    assert page.text("state") == "Not connected"


def test_speaking_over_the_reply_flushes_its_playback(served, browser):
    page = browser.open(served)
    connect(page, instructions="You are a storyteller. Tell a long story of at least five sentences.")
    page.wait("window.parley.stats.flushes >= 1", 120, "a flush of the reply spoken over")
    flushed = stats(page)
    assert flushed["flushed"] > 0  # audio that was waiting to be played was dropped
    # Marked interrupted: by the flush (the server had written the whole reply already)
    # or by the cancelled response.done (it was still writing it).
    page.wait("document.getElementById('transcript').textContent.includes('interrupted')", 30,
              "the reply marked interrupted")


def test_the_jitter_buffer_waits_for_its_target_and_flushes(served, browser):
    page = browser.open(served)
    result = page.evaluate("""(async () => {
      const { JitterBuffer } = await import('/web/jitter.js');
      const b = new JitterBuffer(480);  // 20 ms at 24 kHz
      const out = new Float32Array(128), reads = [];
      const read = () => reads.push(b.read(out));
      b.push(new Float32Array(300).fill(0.5)); read();  // below the target: silence
      const silent = out.every((v) => v === 0);
      b.push(new Float32Array(300).fill(0.5));  // 600 waiting: it plays
      for (let i = 0; i < 5; i++) read();  // 4 x 128 + 88, then dry: an underrun
      const dry = b.stats();
      b.push(new Float32Array(100).fill(0.5)); b.end(); read();  // the reply's end plays at once
      b.push(new Float32Array(1000).fill(0.5)); read(); b.flush(); read();  // barge-in
      return { reads, silent, dry, last: b.stats() };
    })()""")
    assert result["reads"] == [0, 128, 128, 128, 128, 88, 100, 128, 0]
    assert result["silent"]
    assert (result["dry"]["played"], result["dry"]["underruns"], result["dry"]["playing"]) == (600, 1, False)
    last = result["last"]
    assert (last["played"], last["underruns"], last["flushes"], last["flushed"], last["queued"]) == \
        (828, 1, 1, 872, 0)


def _space(page, down: bool) -> None:
    page.call("Input.dispatchKeyEvent", type="keyDown" if down else "keyUp", key=" ", code="Space",
              windowsVirtualKeyCode=32, nativeVirtualKeyCode=32)


def test_push_to_talk_held_on_the_space_bar_is_one_turn(served, browser):
    page = browser.open(served)
    page.evaluate("document.querySelector('input[value=push-to-talk]').click()")
    connect(page)
    page.wait("window.parley.stats.connected", 30, "the page to connect")
    assert page.evaluate("document.getElementById('talk').disabled") is False
    _space(page, True)
    assert page.evaluate("document.getElementById('talk').getAttribute('aria-pressed')") == "true"
    time.sleep(7.0)  # longer than a loop of the recording: the question is heard whole
    _space(page, False)
    page.wait("window.parley.stats.replies.length >= 1", 90, "the reply to the held turn")
    heard = stats(page)
    assert len(heard["transcripts"]) == 1 and "testing routine" in heard["transcripts"][0].lower()
    assert heard["errors"] == []


def test_a_full_server_says_so_and_gets_in_when_a_pipeline_frees(served, browser):
    holder = browser.open(served)
    connect(holder)
    holder.wait("window.parley.stats.connected", 30, "the first page to connect")
    second = browser.open(served)
    connect(second)
    second.wait("window.parley.stats.problem === 'full'", 30, "the server-full message")
    assert "The server is full" in second.text("message")
    assert not stats(second)["connected"]
    holder.evaluate("window.parley.disconnect()")
    # It tries again by itself (back-off) and gets the freed pipeline.
    second.wait("window.parley.stats.connected", 40, "the second page to get in")
    assert second.text("message") == ""


def test_a_wrong_key_says_so(served, browser):
    page = browser.open(served)
    connect(page, key="not-the-key")
    page.wait("window.parley.stats.problem === 'wrong_key'", 30, "the wrong-key message")
    assert "refused the API key" in page.text("message")
    assert page.text("state") == "Not connected" and not stats(page)["connected"]


def test_a_denied_microphone_says_so(served, chromium_path, recordings):
    chromium = Chromium(recordings["again"], executable=chromium_path, allow_microphone=False)
    try:
        page = chromium.open(served)
        page.call("Browser.setPermission", permission={"name": "microphone"}, setting="denied",
                  origin=served.rstrip("/"))
        connect(page)
        page.wait("window.parley.stats.problem === 'mic_denied'", 30, "the microphone-denied message")
        assert "may not use the microphone" in page.text("message")
        assert page.text("state") == "Not connected"
    finally:
        chromium.close()


def test_a_session_the_server_ends_for_idleness_stays_ended(chromium_path, recordings):
    import urllib.request

    server, port = _serve("--idle-timeout-s", "3")
    chromium = Chromium(recordings["silence"], executable=chromium_path)
    try:
        page = chromium.open(f"http://127.0.0.1:{port}/")
        connect(page, key=None)
        page.wait("window.parley.stats.connected", 60, "the page to connect")
        page.wait("window.parley.stats.problem === 'ended'", 30, "the server's idle end")
        assert "idle" in page.text("message") and "Press Connect" in page.text("message")
        assert page.text("state") == "Not connected"
        # It does not reconnect by itself: the pipeline stays free for someone else.
        time.sleep(4)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/pool", timeout=10) as answer:
            pool = json.load(answer)
        assert [unit["state"] for unit in pool["units"]] == ["free"]
        assert not stats(page)["connected"]
    finally:
        chromium.close()
        server.stop()


def _spki(cert_file: Path) -> str:
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    cert = x509.load_pem_x509_certificate(cert_file.read_bytes())
    der = cert.public_key().public_bytes(serialization.Encoding.DER,
                                         serialization.PublicFormat.SubjectPublicKeyInfo)
    return base64.b64encode(hashlib.sha256(der).digest()).decode()


def test_the_page_works_over_wss_and_reconnects_after_a_loss(chromium_path, recordings):
    server, port = _serve("--tls-self-signed")
    cert = Path(os.environ["PARLEY_CACHE_DIR"]) / "tls" / "server.pem"
    chromium = Chromium(recordings["two_turns"], loop=False, spki=_spki(cert),
                        executable=chromium_path)
    try:
        page = chromium.open(f"https://127.0.0.1:{port}/")
        assert page.evaluate("location.protocol") == "https:" and page.evaluate("isSecureContext")
        connect(page, key=None)
        page.wait("window.parley.stats.replies.length >= 1 && window.parley.stats.played > 0", 90,
                  "a reply over wss://")
        assert "testing routine" in stats(page)["transcripts"][0].lower()
        server.stop()
        page.wait("['lost', 'unreachable'].includes(window.parley.stats.problem)", 30,
                  "the connection-lost message")
        assert "Trying again" in page.text("message") or "Reconnecting" in page.text("message")
        server, _ = _serve("--tls-self-signed", port=port)
        page.wait("window.parley.stats.connected", 60, "the page to reconnect")
    finally:
        chromium.close()
        server.stop()
