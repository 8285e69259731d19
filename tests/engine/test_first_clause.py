"""The short first clause through the whole pipeline, on the real offline models: the
first piece of a reply that TTS speaks ends at the first natural break after
``tts.first_clause_words`` words, the later ones are sentences, and the setting applies
to a running engine at once."""

from __future__ import annotations

import time

import pytest

from engine.audio.file_sink import FileSink
from engine.config import EngineConfig
from engine.config_diff import Effect
from engine.engine import Engine
from engine.measures import Figure, Mark
from engine.pipeline.events import ReplyText, TurnFinished
from engine.pipeline.messages import ReplyRequest
from engine.runtime.hub import HubStatus
from tests.support.sources import Quiet

pytestmark = pytest.mark.slow
QUESTION = "What color is the sky on a clear day?"
# The same prompt every time (no history in it, none recorded): the greedy reply repeats.
ALONE = ReplyRequest(context=(), record=False)


def _reply(engine: Engine, unit) -> tuple[list[str], object]:
    """Ask QUESTION; the pieces the LLM stage handed to TTS, in order, and the turn."""
    pieces: list[str] = []
    finished: list = []

    def seen(event) -> None:
        if isinstance(event, ReplyText):
            pieces.append(event.text)
        elif isinstance(event, TurnFinished):
            finished.append(event.record)

    unsubscribe = engine.subscribe(seen)
    try:
        unit.say(QUESTION, ALONE)
        deadline = time.monotonic() + 180
        while not finished and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        unsubscribe()
    assert finished, "no reply finished"
    return pieces, finished[0]


def test_the_first_piece_spoken_is_the_first_clause_then_sentences():
    config = EngineConfig().with_overrides({"turns.barge_in": "off"})
    assert config.tts.first_clause_words == 3  # the measured default
    engine = Engine(config, hub=HubStatus(offline=True))
    engine.load()
    try:
        unit = engine.start_unit(Quiet(), FileSink(None, realtime=False), unit=1)
        short, record = _reply(engine, unit)
        # The same prompt prefilled the same way (an empty KV cache both times): greedy
        # decoding then writes the same words, whatever this CPU's rounding.
        assert unit.new_conversation()
        diff = engine.apply(engine.config.with_overrides({"tts.first_clause_words": "0"}))
        assert diff.keys(Effect.RUNTIME) == ("tts.first_clause_words",) and not diff.reload_stages
        whole, _record = _reply(engine, unit)
        assert engine.stop_unit(unit) == []
    finally:
        engine.close()
    reply = " ".join(whole)
    assert " ".join(short) == reply  # the same words, cut elsewhere
    first_sentence = whole[0]
    assert first_sentence.endswith((".", "!", "?")), whole
    words = short[0].split()
    assert len(first_sentence.split()) > len(words) >= 3, (
        f"the reply's first sentence has no break after 3 words to cut at: {reply!r}")
    # The short first piece is the start of the first sentence, cut at a clause mark or
    # before a conjunction; the pieces after it are sentences again.
    assert first_sentence.startswith(short[0])
    assert short[0][-1] in ",;:—–-" or first_sentence[len(short[0]):].split()[0] in (
        "but", "because", "although", "whereas", "unless"), short
    assert short[1:] and all(p.endswith((".", "!", "?")) or p is short[-1] for p in short[1:])
    # It is what TTS was handed first: its first audio came after that first piece.
    assert record.marks[Mark.TTS_FIRST_AUDIO] > record.marks[Mark.TTS_FIRST_TEXT]
    assert record.value(Figure.TTS_FIRST_COMPUTE_S) is not None
