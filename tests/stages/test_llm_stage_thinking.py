"""The LLM stage drops ``<think>`` reasoning whatever the backend passes on (a remote
server serving a hybrid thinking model sends it in the reply's text): not shown, not
spoken, not kept in the history, whichever pieces the reply streams in."""

from __future__ import annotations

import pytest

from engine.backends.base import LlmSession, LlmStep
from engine.pipeline.chat_history import ItemKind
from engine.pipeline.events import ReplyText
from engine.pipeline.messages import TextChunk
from tests.stages.test_llm_stage_requests import ScriptedLlm, run

ANSWER = "Paris is the capital of France. It has about two million people."
REPLY = "<think>\nThe user asks a capital. Answer briefly.\n</think>\n\n" + ANSWER


class PiecesSession(LlmSession):
    """Streams the model's text in pieces of ``size`` characters (tags split across steps)."""

    def __init__(self, model: PiecesLlm) -> None:
        self.model = model

    def reset(self) -> None:
        pass

    def generate(self, messages, options, should_stop):
        text, size = self.model.text, self.model.size
        pieces = [text[i:i + size] for i in range(0, len(text), size)]
        for n, piece in enumerate(pieces):
            yield LlmStep(piece, n + 1, 10, 0.01, 20.0, finished=n == len(pieces) - 1)


class PiecesLlm(ScriptedLlm):
    def __init__(self, text: str, size: int) -> None:
        super().__init__(text)
        self.size = size

    def new_session(self) -> PiecesSession:
        return PiecesSession(self)


@pytest.mark.parametrize("size", [1, 3, 7, 1000])
def test_reasoning_from_any_backend_is_never_shown_spoken_or_kept(size):
    out, events, history = run(PiecesLlm(REPLY, size), "What is the capital of France?")
    spoken = " ".join(m.text for m in out if isinstance(m, TextChunk))
    shown = " ".join(e.text for e in events if isinstance(e, ReplyText))
    assert " ".join(spoken.split()) == ANSWER
    assert " ".join(shown.split()) == ANSWER
    assert [(i.kind, i.text) for i in history.items()][-1] == (ItemKind.ASSISTANT, ANSWER)
    kept = [i.text for i in history.items()]
    assert not any("think" in t or "briefly" in t for t in (spoken, shown, *kept))


def test_a_reply_without_reasoning_is_unchanged():
    text = "Sure. 2 < 3 and <b> stays."
    out, _events, history = run(PiecesLlm(text, 2), "Compare.")
    assert " ".join(" ".join(m.text for m in out if isinstance(m, TextChunk)).split()) == text
    assert history.items()[-1].text == text
