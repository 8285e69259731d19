"""Spoken turns with a realtime client under test, read from the wire: a ``Microphone``
feeds the client, a ``WsTap`` between it and ``parley-cli serve`` shows what came back.

``Talk.ask`` speaks a question and waits until a reply was spoken and has played out (at
real time from its first audio, as a speaker would play it), so the next question is not a
barge-in; ``Talk.barge_in`` speaks over a reply while it plays. On a timeout the error
names what was awaited and lists the server's error events and the last events both ways.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Callable

from tests.support.speech import RATE, Microphone
from tests.support.ws_tap import Frame, WsTap

PLAYOUT_MARGIN_S = 0.6  # after a reply's last audio would have played, before speaking again
INTO_REPLY_S = 0.8  # how far into a reply's audio a barge-in starts


def spoken_items(response: dict) -> list[dict]:
    """The assistant message items of a response that carry a spoken transcript."""
    return [item for item in response.get("output") or [] if isinstance(item, dict)
            and item.get("type") == "message" and item.get("role") == "assistant"
            and any(part.get("transcript") for part in item.get("content") or [])]


def transcript(response: dict) -> str:
    """What a response said: the transcripts of its spoken items, joined."""
    return " ".join(part.get("transcript") or "" for item in spoken_items(response)
                    for part in item.get("content") or [])


class Talk:
    """Questions spoken into ``mic`` (started by the caller), answers read from ``tap``."""

    def __init__(self, tap: WsTap, mic: Microphone, speech: dict[str, bytes],
                 timeout_s: float = 45.0) -> None:
        self.tap = tap
        self.mic = mic
        self.speech = speech
        self.timeout_s = timeout_s

    # ------------------------------------------------------------------ reading the wire
    def frames_after(self, mark: int) -> list[Frame]:
        """The frames the tap recorded from index ``mark`` on."""
        return list(self.tap.frames)[mark:]

    def audio_seconds(self, item_id: str) -> float:
        """How long the audio the server sent for ``item_id`` lasts."""
        pcm = sum(len(base64.b64decode(f.event.get("delta", ""))) for f in list(self.tap.frames)
                  if f.sender == "server" and f.type == "response.output_audio.delta"
                  and f.event.get("item_id") == item_id)
        return pcm / 2 / RATE

    def first_audio(self, item_id: str) -> Frame | None:
        """The first audio delta of ``item_id``, if any came."""
        return next((f for f in list(self.tap.frames) if f.sender == "server"
                     and f.type == "response.output_audio.delta" and f.event.get("item_id") == item_id), None)

    def playout_end(self, response: dict) -> float:
        """When the last of a response's audio would have played (monotonic clock)."""
        ends = []
        for item in spoken_items(response):
            first = self.first_audio(item["id"])
            if first is not None:
                ends.append(first.at + self.audio_seconds(item["id"]))
        return max(ends, default=time.monotonic())

    def spoken_reply_after(self, mark: int, skip_item: str | None = None) -> dict | None:
        """The first completed response after frame ``mark`` that spoke (not ``skip_item``)."""
        for frame in self.frames_after(mark):
            if frame.sender == "server" and frame.type == "response.done":
                response = frame.event.get("response") or {}
                items = [i for i in spoken_items(response) if i.get("id") != skip_item]
                if response.get("status") == "completed" and items:
                    return response
        return None

    # ------------------------------------------------------------------ waiting
    def diagnosis(self) -> str:
        """The server's errors and the last events both ways, for a failure message."""
        errors = self.tap.errors()
        return (f"server error events: {errors}\n"
                f"last client events: {_runs(self.tap.kinds('client'))[-12:]}\n"
                f"last server events: {_runs(self.tap.kinds('server'))[-25:]}")

    async def until(self, check: Callable[[], object], what: str, timeout_s: float | None = None):
        """Poll ``check`` until it returns something truthy; its value."""
        deadline = time.monotonic() + (timeout_s or self.timeout_s)
        while True:
            value = check()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}\n{self.diagnosis()}")
            await asyncio.sleep(0.05)

    async def played_out(self, response: dict) -> None:
        """Wait until ``response``'s audio would have played out, and a moment more."""
        await asyncio.sleep(max(0.0, self.playout_end(response) + PLAYOUT_MARGIN_S - time.monotonic()))

    # ------------------------------------------------------------------ speaking
    async def say(self, text: str) -> int:
        """Speak ``text``; the frame index when it started."""
        mark = len(self.tap.frames)
        self.mic.say(text, self.speech[text])
        await self.mic.said()
        return mark

    async def ask(self, text: str) -> dict:
        """Speak ``text``, wait for a spoken reply and its playout; the reply's response."""
        mark = await self.say(text)
        response = await self.until(lambda: self.spoken_reply_after(mark), f"a spoken reply to {text!r}")
        await self.played_out(response)
        return response

    async def barge_in(self, over: str, text: str) -> tuple[str, dict]:
        """Speak ``over``, then ``text`` INTO_REPLY_S into the reply's audio; the id of the
        reply item talked over and the response that answered ``text``."""
        mark = await self.say(over)
        first = await self.until(lambda: next((f for f in self.frames_after(mark) if f.sender == "server"
                                               and f.type == "response.output_audio.delta"), None),
                                 f"the first audio of the reply to {over!r}")
        item_id = str(first.event.get("item_id"))
        await asyncio.sleep(max(0.0, first.at + INTO_REPLY_S - time.monotonic()))
        mark = await self.say(text)
        response = await self.until(lambda: self.spoken_reply_after(mark, skip_item=item_id),
                                    f"a spoken reply to the barge-in {text!r}")
        await self.played_out(response)
        return item_id, response


def _runs(kinds: list[str]) -> list[str]:
    """``kinds`` with each run of one kind written once with its count: a stream of
    appends would otherwise push the client's last control event out of sight."""
    runs: list[list] = []
    for kind in kinds:
        if runs and runs[-1][0] == kind:
            runs[-1][1] += 1
        else:
            runs.append([kind, 1])
    return [kind if count == 1 else f"{kind} x{count}" for kind, count in runs]
