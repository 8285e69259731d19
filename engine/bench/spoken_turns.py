"""Spoken turns against ``parley-cli serve``, each followed to its end (``TurnLedger``).

The questions are the turns of the bundled LibriSpeech recordings, cut where
``resources/audio/turns.json`` says each one's speech starts and ends. A ``SpokenSession``
is one connection (one unit) whose client streams them at real time and can:

- ``ask``: speak one question and wait until it was answered and its audio would have
  played out (so the next question is not a barge-in);
- ``speak_run``: speak a recording of several questions straight through (the three-turn
  one leaves 1.35 s between its first two questions: the next one starts moments after
  the server committed the previous turn, often before its reply);
- ``barge_in``: speak a question, then another one ``into_s`` into the reply's audio;
- ``drop``: speak (part of) a question and close the connection mid-turn.

Waiting never raises for a turn that does not end: ``settle`` gives up after its timeout
and the ledger then says which turns were lost and how.
"""

from __future__ import annotations

import asyncio
import json
import random
from dataclasses import replace
from pathlib import Path

import numpy as np

from engine.bench.clients import CLIENT_RATE, BenchRunError, Utterance
from engine.bench.realtime_client import RealtimeClient
from engine.bench.turn_ledger import TurnLedger

AUDIO_DIR = Path(__file__).resolve().parents[2] / "resources" / "audio"
QUESTION_RECORDINGS = ("librispeech_four_turns.flac", "librispeech_three_turns.flac")
THREE_QUESTIONS = "librispeech_three_turns.flac"
LEAD_S = 0.05  # from now to the first chunk's capture
BEFORE_S, AFTER_S = 0.2, 0.25  # kept around a question's speech when it is cut out
PLAYOUT_MARGIN_S = 0.4  # after a reply would have played, before speaking again
VAD_LAG_S = 0.5  # after a stream ended, before looking for turns still open


def load_questions(audio_dir: Path = AUDIO_DIR) -> list[Utterance]:
    """Every turn of ``QUESTION_RECORDINGS`` as its own utterance (with the usual tail of
    silence that ends a turn)."""
    from engine.audio.decode import load_audio

    turns = json.loads((audio_dir / "turns.json").read_text(encoding="utf-8"))["recordings"]
    questions = []
    for name in QUESTION_RECORDINGS:
        audio = load_audio(audio_dir / name, CLIENT_RATE)
        for k, turn in enumerate(turns[name]["turns"]):
            start = max(0, round((turn["start_s"] - BEFORE_S) * CLIENT_RATE))
            end = min(audio.size, round((turn["end_s"] + AFTER_S) * CLIENT_RATE))
            questions.append(Utterance.from_audio(f"{name}#{k + 1}", np.asarray(audio[start:end])))
    return questions


def load_run(name: str = THREE_QUESTIONS, audio_dir: Path = AUDIO_DIR) -> tuple[Utterance, int]:
    """A recording of several questions, whole, and how many turns it holds."""
    turns = json.loads((audio_dir / "turns.json").read_text(encoding="utf-8"))["recordings"]
    return Utterance.load(audio_dir / name), len(turns[name]["turns"])


class SpokenSession:
    """One connection to the server whose every turn a ``TurnLedger`` follows."""

    def __init__(self, url: str, client: int, connect_timeout: float = 30.0,
                 turn_timeout: float = 60.0, transcript_wait_s: float = 10.0) -> None:
        self.client = RealtimeClient(url, client, connect_timeout)
        self.ledger = TurnLedger()
        self.client.tracker = self.ledger
        self.turn_timeout = turn_timeout
        self.transcript_wait_s = transcript_wait_s
        self.spoken = 0  # questions streamed
        self.timeouts = 0  # waits that gave up (their turns are classified as they stand)

    async def connect(self) -> None:
        await self.client.connect()

    async def close(self) -> None:
        await self.client.close()

    async def drop_now(self) -> None:
        """Close the connection on purpose (the ledger counts what was open as dropped)."""
        self.ledger.note_drop(self.client.clock())
        await self.client.close()

    async def speak(self, utterance: Utterance) -> float:
        """Stream ``utterance`` at real time; when its first chunk was due."""
        start = self.client.clock() + LEAD_S
        await self.client.stream(utterance, start)
        self.spoken += 1
        return start

    async def _wait(self, done, timeout: float, what: str) -> bool:
        """``client.wait_until``, but a timeout is an answer (False), not an error; a
        server error or a closed socket still raises."""
        try:
            await self.client.wait_until(done, timeout, what)
            return True
        except BenchRunError:
            if self.ledger.errors or self.client.close_code is not None:
                raise
            self.timeouts += 1
            return False

    def _no_open_turn(self) -> bool:
        return all(turn.committed_t is not None for turn in self.ledger.items.values())

    def _responses_done(self) -> bool:
        for turn in self.ledger.committed():
            response = self.ledger.responses.get(turn.response_id or "")
            if response is None or response.done_t is None:
                return False
        return True

    async def settle(self) -> bool:
        """Until every turn heard so far was committed, answered or cut, and transcribed
        (the transcript is waited for ``transcript_wait_s`` more); False if it gave up."""
        await asyncio.sleep(VAD_LAG_S)
        ok = await self._wait(self._no_open_turn, self.turn_timeout, "the end of the user's turn")
        ok = ok and await self._wait(self._responses_done, self.turn_timeout, "the replies")
        return ok and await self._wait(self.ledger.settled, self.transcript_wait_s, "the transcripts")

    async def played_out(self) -> None:
        """Until the audio of every reply so far would have played at real time."""
        ends = [r.first_audio_t + r.audio_s for r in self.ledger.responses.values()
                if r.first_audio_t is not None]
        if ends:
            await asyncio.sleep(max(0.0, max(ends) + PLAYOUT_MARGIN_S - self.client.clock()))

    async def ask(self, question: Utterance) -> None:
        """Speak ``question``; wait for its answer and its playout."""
        await self.speak(question)
        await self.settle()
        await self.played_out()

    async def speak_run(self, recording: Utterance) -> None:
        """Speak a recording of several questions straight through; wait as ``ask``."""
        await self.ask(recording)

    async def barge_in(self, over: Utterance, question: Utterance, into_s: float) -> None:
        """Speak ``over``; ``into_s`` after its reply's audio began, speak ``question``."""
        started = await self.speak(over)
        if await self._wait(lambda: self.ledger.answered_after(started), self.turn_timeout,
                            "the reply to talk over"):
            first = min(r.first_audio_t for r in self.ledger.responses.values()
                        if r.first_audio_t is not None and r.first_audio_t >= started)
            await asyncio.sleep(max(0.0, first + into_s - self.client.clock()))
        await self.ask(question)

    async def drop(self, question: Utterance, rng: random.Random) -> str:
        """Leave mid-turn: while speaking (a random part of ``question``), or once the
        reply's audio began. Returns which."""
        if rng.random() < 0.5:
            chunks = rng.randint(1, question.speech_end_chunk() + 1)
            await self.speak(replace(question, pcm=question.pcm[:chunks * 2 * question.chunk_samples()]))
            await self.drop_now()
            return "speaking"
        started = await self.speak(question)
        await self._wait(lambda: self.ledger.answered_after(started), self.turn_timeout,
                         "the reply to leave during")
        await self.drop_now()
        return "replying"

