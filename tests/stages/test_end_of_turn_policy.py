"""The end-of-turn policy driven without a pipeline: the decision from its scores, the text
signal on a model of its own (the bundled SmolLM2-135M beside a reply LLM that gives none,
as mlx-lm and remote servers), and the speculation budget of a remote LLM."""

from __future__ import annotations

import dataclasses
import threading
import time

import numpy as np
import pytest

from engine.backends.base import LlmModel, LlmSession, LlmStep
from engine.config import EndOfTurn, EngineConfig, TextSignal
from engine.measures import Figure
from engine.pipeline.chat_history import ChatHistory
from engine.pipeline.control import CancelReason
from engine.pipeline.messages import Transcript
from engine.pipeline.stage import StageContext
from engine.stages.end_of_turn.policy import EndOfTurnPolicy
from engine.stages.end_of_turn.text_signal import describe, needs_bundled, signal_model
from engine.stages.llm_stage import LlmStage
from tests.support.stage_harness import run_stage, stage_context

JFK = ("And so my fellow Americans, ask not what your country can do for you, ask what you "
       "can do for your country.")
JFK_FIRST_PAUSE = "And so my fellow Americans,"


def settings(**turns) -> EngineConfig:
    config = EngineConfig()
    return dataclasses.replace(config, turns=dataclasses.replace(config.turns, **turns))


class Replies(LlmSession):
    """One short reply per call, each call counted (a request, on a remote model)."""

    def __init__(self, model: ReplyLlm) -> None:
        self.model = model

    def generate(self, messages, options, should_stop):
        self.model.requests.append(messages[-1]["content"])
        yield LlmStep("Sure.", 2, 12, 0.01, 20.0, finished=True)

    def reset(self) -> None:
        pass


class ReplyLlm(LlmModel):
    """A reply LLM that gives no text signal (as mlx-lm and a remote server), on
    ``device`` ("remote": its requests are metered)."""

    def __init__(self, device: str = "remote") -> None:
        self.actual_device = device
        self.requests: list[str] = []

    def new_session(self) -> Replies:
        return Replies(self)


class Policy:
    """A policy over a hand-held turn state and settings."""

    def __init__(self, config: EngineConfig, **models) -> None:
        self.config = config
        self.committed: set[int] = set()
        self.stale: set[tuple[int, int]] = set()
        self.policy = EndOfTurnPolicy(0, lambda: self.config, self.committed.__contains__,
                                      lambda turn, gen: (turn, gen) in self.stale, **models)


class FixedAudio:
    """An audio model whose verdict is scripted."""

    def __init__(self, probability: float) -> None:
        self.p = probability

    def probability(self, audio: np.ndarray) -> float:
        return self.p


def wait_for(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)


@pytest.fixture(scope="module")
def bundled():
    """The bundled SmolLM2-135M on the CPU, as the engine loads it for the text signal."""
    from engine.engine import _load_text_model
    from engine.models.model_registry import ModelRegistry

    registry = ModelRegistry()
    placement, model = _load_text_model(registry, EngineConfig())
    assert placement.bundled and placement.device.kind == "cpu"
    yield model
    registry.release(placement, EngineConfig().llm)


# ------------------------------------------------------------------ the policy alone


def test_silence_never_commits_early_and_learned_commits_when_both_signals_agree():
    held = Policy(settings(end_of_turn=EndOfTurn.SILENCE), audio_model=FixedAudio(0.9))
    policy = held.policy
    policy.board.post_audio(1, 0, 0.9)
    policy.board.post_text(1, 0, 0.6)
    assert not policy.learned and not policy.commit_early(1, 0)
    assert not policy.scores_audio  # silence asks the audio model nothing
    held.config = settings(end_of_turn=EndOfTurn.LEARNED)  # a runtime change: read each time
    assert policy.learned and policy.scores_audio and policy.commit_early(1, 0)
    # jfk's first pause: it sounds finished (0.93), its words are not (0.049).
    policy.board.post_audio(1, 1, 0.93)
    policy.board.post_text(1, 1, 0.049)
    assert not policy.commit_early(1, 1) and not policy.may_end_here(1, 1)
    policy.forget(1)
    assert not policy.commit_early(1, 0) and policy.scores(1, 0).audio is None


def test_the_audio_model_scores_an_offered_revision_on_the_policys_thread():
    held = Policy(settings(end_of_turn=EndOfTurn.LEARNED), audio_model=FixedAudio(0.8))
    policy = held.policy
    policy.start()
    try:
        policy.speculation_started(3, 1)
        assert policy.audio_wanted(3, 1)
        policy.offer_audio(3, 1, np.zeros(1600, np.float32))
        wait_for(lambda: policy.scores(3, 1).audio is not None)
    finally:
        assert policy.stop(5)
    assert policy.scores(3, 1).audio == pytest.approx(0.8) and not policy.audio_wanted(3, 1)
    # A revision the user went on speaking into (stale) or a committed turn is moot.
    held.stale.add((3, 1))
    assert policy.moot(3, 1)
    held.committed.add(4)
    assert policy.moot(4, 0) and not policy.moot(5, 0)


def test_which_model_gives_the_text_signal():
    mlx, remote, local, small = ReplyLlm("mlx"), ReplyLlm("remote"), _Signals("cpu"), _Signals("cpu")
    assert signal_model(TextSignal.AUTO, local, small) is local  # the reply model's, as before
    assert signal_model(TextSignal.AUTO, mlx, small) is small
    assert signal_model(TextSignal.AUTO, remote, small) is small
    assert signal_model(TextSignal.REPLY, remote, small) is None
    assert signal_model(TextSignal.BUNDLED, local, small) is small
    assert signal_model(TextSignal.OFF, local, small) is None
    assert needs_bundled(TextSignal.AUTO, remote) and not needs_bundled(TextSignal.AUTO, local)
    assert needs_bundled(TextSignal.BUNDLED, local) and not needs_bundled(TextSignal.REPLY, remote)
    assert "turns wait for the reopen grace" in describe(TextSignal.REPLY, remote, None)
    assert "bundled small model on cpu" in describe(TextSignal.AUTO, remote, small)


class _Signals(LlmModel):
    """A reply LLM that gives a text signal (as onnx-genai and transformers)."""

    def __init__(self, device: str) -> None:
        self.actual_device = device

    def new_session(self) -> LlmSession:
        raise AssertionError("not used")

    def end_of_turn_signal(self) -> bool:
        return True


@pytest.mark.parametrize("device", ["mlx", "remote"])
def test_a_reply_llm_without_a_signal_commits_early_on_the_bundled_models(bundled, device):
    # mlx-lm and remote LLMs give no text signal: before, their turns never committed
    # early. The bundled SmolLM2 reads jfk's real words: the whole sentence may end (the
    # turn commits with Smart Turn's 0.90), its first pause may not (0.93 from Smart Turn).
    reply = ReplyLlm(device)
    held = Policy(settings(end_of_turn=EndOfTurn.LEARNED), text_model=bundled)
    policy = held.policy
    assert policy.wants_text(1, reply) and policy.text_model(reply) is bundled
    whole = policy.score_text(1, 0, (JFK,), reply)
    policy.board.post_audio(1, 0, 0.90)
    pause = policy.score_text(2, 0, (JFK_FIRST_PAUSE,), reply)
    policy.board.post_audio(2, 0, 0.93)
    assert whole is not None and pause is not None and whole > 0.3 > 0.07 > pause
    assert policy.commit_early(1, 0) and not policy.commit_early(2, 0)
    assert reply.requests == []  # the reply LLM was asked nothing
    held.config = settings(end_of_turn=EndOfTurn.LEARNED, text_signal=TextSignal.REPLY)
    assert not policy.wants_text(3, reply) and policy.score_text(3, 0, (JFK,), reply) is None


# ------------------------------------------------------------------ speculation


def _stage(model: LlmModel, **turns):
    ctx = stage_context(config=settings(end_of_turn=EndOfTurn.SILENCE, **turns))
    return LlmStage(ctx, model, ChatHistory()), ctx


def _revision(stage: LlmStage, ctx: StageContext, turn: int, text: str) -> threading.Thread:
    """The stage processes a speculative revision on a thread of its own (it may wait)."""
    msg = Transcript(turn, ctx.control.generation, text, True, 0.0)
    thread = threading.Thread(target=lambda: run_stage(stage, [msg]), daemon=True)
    thread.start()
    return thread


def test_a_remote_llm_gets_one_speculative_request_per_turn_and_the_rest_wait():
    model = ReplyLlm("remote")
    stage, ctx = _stage(model)
    first = _revision(stage, ctx, 1, "And so my fellow Americans.")
    first.join(5)
    assert model.requests == ["And so my fellow Americans."]  # the budget's one request
    ctx.control.cancel_turn(1, CancelReason.REOPENED)
    second = _revision(stage, ctx, 1, "And so my fellow Americans, ask not.")
    second.join(0.2)
    assert second.is_alive()  # past the budget: it waits for the commit
    ctx.control.cancel_turn(1, CancelReason.REOPENED)  # the user went on: dropped unsent
    second.join(5)
    assert not second.is_alive() and len(model.requests) == 1
    last = _revision(stage, ctx, 1, JFK)
    last.join(0.2)
    assert last.is_alive() and len(model.requests) == 1
    ctx.held.commit(1)  # committed: the reply is requested now
    last.join(5)
    assert model.requests == ["And so my fellow Americans.", JFK]
    record = ctx.metrics.turn(0, 1)
    assert record is not None and record.figures[Figure.LLM_REQUESTS] == 2
    assert record.figures[Figure.LLM_TURN_PROMPT_TOKENS] == 24
    assert record.figures[Figure.LLM_TURN_COMPLETION_TOKENS] == 4


def test_a_local_llm_speculates_on_every_revision_and_the_budget_is_a_setting():
    local = ReplyLlm("cpu")
    stage, ctx = _stage(local)
    for text in ("One.", "One, two.", "One, two, three."):
        _revision(stage, ctx, 1, text).join(5)
        ctx.control.cancel_turn(1, CancelReason.REOPENED)
    assert len(local.requests) == 3
    remote = ReplyLlm("remote")
    stage, ctx = _stage(remote, remote_speculation=3)
    for text in ("One.", "One, two.", "One, two, three."):
        _revision(stage, ctx, 1, text).join(5)
        ctx.control.cancel_turn(1, CancelReason.REOPENED)
    assert len(remote.requests) == 3
    stage, ctx = _stage(ReplyLlm("remote"), remote_speculation=0)
    never = _revision(stage, ctx, 1, "One.")
    never.join(0.2)
    assert never.is_alive()
    ctx.held.commit(1)
    never.join(5)
    assert isinstance(stage.model, ReplyLlm) and stage.model.requests == ["One."]


def test_under_learned_end_of_turn_words_that_cannot_end_the_turn_do_not_spend_the_budget():
    model = ReplyLlm("remote")
    stage, ctx = _stage(model)
    ctx.config = settings(end_of_turn=EndOfTurn.LEARNED)
    policy = ctx.end_of_turn
    policy.board.post_text(1, ctx.control.generation, 0.049)  # jfk's first pause
    waiting = _revision(stage, ctx, 1, JFK_FIRST_PAUSE)
    waiting.join(0.2)
    assert waiting.is_alive() and model.requests == []
    ctx.control.cancel_turn(1, CancelReason.REOPENED)
    waiting.join(5)
    policy.board.post_text(1, ctx.control.generation, 0.6)
    _revision(stage, ctx, 1, JFK).join(5)
    assert model.requests == [JFK]  # the one speculative request went to the likely end


def test_the_setting_is_validated_with_its_choices():
    from engine.errors import ConfigError

    with pytest.raises(ConfigError, match=r"turns\.text_signal.*auto.*reply.*bundled.*off"):
        EngineConfig().with_overrides({"turns.text_signal": "llm"})
    with pytest.raises(ConfigError, match=r"turns\.remote_speculation"):
        EngineConfig().with_overrides({"turns.remote_speculation": "-1"})
    assert EngineConfig().with_overrides({"turns.text_signal": "bundled"}).turns.text_signal \
        is TextSignal.BUNDLED


# ------------------------------------------------------------------ a remote LLM, end to end


@pytest.mark.slow
def test_a_remote_llm_commits_jfk_early_on_the_bundled_signal_with_one_speculative_request(jfk_path):
    from engine.audio.decode import load_audio
    from engine.audio.file_sink import FileSink
    from engine.audio.file_source import FileSource
    from engine.engine import Engine
    from engine.runtime.hub import HubStatus
    from tests.stages.test_turn_end import _jfk_turn
    from tests.support.chat_server import ChatServer
    from tests.support.transcripts import normalize

    chat = ChatServer()
    # A wait far longer than a busy machine needs for both signals (15 s of silence), and
    # silence after the words for longer still: only the learned decision can commit
    # before it. The end of turn is the default (auto); the run stops once the reply is done.
    config = EngineConfig().with_overrides({
        "turns.barge_in": "off", "vad.min_silence_ms": "10000", "turns.reopen_grace_ms": "5000",
        "llm.backend": "openai", "llm.base_url": chat.url, "llm.model": chat.model})
    engine = Engine(config, hub=HubStatus(offline=True))
    try:
        engine.load()
        assert engine.text_model is not None
        assert any("text signal of the bundled small model on cpu" in n for n in engine.notes)
        sent = len(chat.requests)
        source = FileSource(load_audio(jfk_path), realtime=True, trailing_silence_s=30.0)
        engine.start([source], [FileSink(None, realtime=True)])
        wait_for(lambda: any(t.finished for t in engine.metrics.turns()), timeout=120)
        assert engine.stop() == []
        turn = _jfk_turn([t for t in engine.metrics.turns() if t.finished])
        requests = len(chat.requests) - sent
    finally:
        engine.close()
        chat.close()
    assert normalize(turn.transcript).endswith("for your country")
    assert turn.figures[Figure.EOT_EARLY] == 1 and turn.figures[Figure.EOT_TEXT_P] >= 0.07
    assert turn.figures[Figure.DROPPED_REVISIONS] >= 2  # jfk's two long pauses
    # At most one speculative request, and the reply's own once committed.
    assert requests == turn.figures[Figure.LLM_REQUESTS] <= 2
