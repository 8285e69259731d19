"""The LLM stage with a scripted model: a turn's ReplyRequest (instructions, text only,
out of band, its own context, tools) and the tool calls a reply makes."""

from __future__ import annotations

from engine.backends.base import LlmModel, LlmSession, LlmStep, ToolCall, ToolSpec
from engine.config import EngineConfig
from engine.pipeline.chat_history import ChatHistory, ItemKind
from engine.pipeline.events import ReplyText, ToolCallsMade
from engine.pipeline.messages import ReplyRequest, TextChunk, Transcript
from engine.stages.llm_stage import LlmStage
from tests.support.stage_harness import run_stage, stage_context


class ScriptedSession(LlmSession):
    """Replies with ``text`` (one step per word), then the ``calls``; records each prompt."""

    def __init__(self, model: ScriptedLlm) -> None:
        self.model = model

    def generate(self, messages, options, should_stop):
        self.model.prompts.append((messages, options))
        words = self.model.text.split()
        for i, word in enumerate(words):
            last = i == len(words) - 1
            yield LlmStep(("" if i == 0 else " ") + word, i + 1, 10, 0.01, 20.0, finished=last,
                          tool_calls=self.model.calls if last else ())
        if not words:
            yield LlmStep("", 0, 10, 0.01, 0.0, finished=True, tool_calls=self.model.calls)

    def reset(self) -> None:
        pass


class ScriptedLlm(LlmModel):
    actual_device = "cpu"

    def __init__(self, text: str, calls: tuple[ToolCall, ...] = ()) -> None:
        self.text, self.calls = text, calls
        self.prompts: list = []

    def new_session(self) -> ScriptedSession:
        return ScriptedSession(self)


def run(model: ScriptedLlm, text: str, request: ReplyRequest | None = None,
        history: ChatHistory | None = None):
    history = history or ChatHistory()
    stage = LlmStage(stage_context(), model, history)
    out, events = run_stage(stage, [Transcript(1, 0, text, True, 0.0, request=request)],
                            commit=True)
    return out, events, history


def test_instructions_replace_the_system_prompt_for_this_reply_only():
    model = ScriptedLlm("Ahoy there.")
    run(model, "Hello.", ReplyRequest(instructions="Talk like a pirate."))
    messages, _options = model.prompts[-1]
    assert messages[0] == {"role": "system", "content": "Talk like a pirate."}
    run(model, "Hello.")
    assert model.prompts[-1][0][0]["content"] == EngineConfig().llm.system_prompt


def test_a_text_only_reply_is_not_spoken_and_an_out_of_band_one_is_not_recorded():
    model = ScriptedLlm("Just text.")
    out, events, history = run(model, "Hi.", ReplyRequest(speak=False, record=False))
    chunks = [m for m in out if isinstance(m, TextChunk)]
    assert chunks and all(not c.speak for c in chunks)
    assert [e.text for e in events if isinstance(e, ReplyText)] == ["Just text."]
    assert history.items() == ()


def test_an_empty_typed_turn_answers_the_conversation_as_it_stands():
    model = ScriptedLlm("Welcome!")
    history = ChatHistory()
    out, _events, history = run(model, "", ReplyRequest(), history)
    assert [m["role"] for m in model.prompts[-1][0]] == ["system"]  # a greeting
    assert [(i.kind, i.text) for i in history.items()] == [(ItemKind.ASSISTANT, "Welcome!")]
    assert "".join(c.text for c in out if isinstance(c, TextChunk)).strip() == "Welcome!"


def test_a_spoken_turn_with_nothing_said_gets_no_reply():
    model = ScriptedLlm("Never.")
    out, _events, history = run(model, "")
    assert model.prompts == [] and history.items() == ()
    assert [c.last for c in out if isinstance(c, TextChunk)] == [True]


def test_tools_are_offered_and_the_calls_reach_the_history_and_the_listeners():
    tool = ToolSpec("get_weather", "The weather.", {"type": "object", "properties": {}})
    call = ToolCall("call_9", "get_weather", '{"city":"Oslo"}')
    model = ScriptedLlm("", (call,))
    _out, events, history = run(model, "Weather in Oslo?", ReplyRequest(tools=(tool,)))
    assert model.prompts[-1][1].tools == (tool,)
    assert [e.calls for e in events if isinstance(e, ToolCallsMade)] == [(call,)]
    kinds = [(i.kind, i.call_id) for i in history.items()]
    assert kinds == [(ItemKind.USER, ""), (ItemKind.FUNCTION_CALL, "call_9")]
    # tool_choice none offers nothing.
    run(model, "Again?", ReplyRequest(tools=(tool,), tool_choice="none"))
    assert model.prompts[-1][1].tools == ()


def test_a_request_with_its_own_context_answers_that_instead_of_the_history():
    model = ScriptedLlm("Sure.")
    history = ChatHistory()
    history.append_turn(5, "An old question.", "An old answer.")
    context = ({"role": "user", "content": "Only this."},)
    run(model, "", ReplyRequest(context=context, record=False), history)
    assert model.prompts[-1][0][1:] == [{"role": "user", "content": "Only this."}]


def test_a_turn_that_wants_no_answer_ends_without_the_model():
    # Parley's MCP `listen`: the words are heard (transcribed) and the turn ends, unanswered.
    model = ScriptedLlm("This must not be said.")
    out, events, history = run(model, "Ask not what your country can do for you.",
                               ReplyRequest(answer=False))
    assert model.prompts == []
    assert out == [TextChunk(1, 0, "", True, False)]  # the turn's end, nothing to speak
    assert [e for e in events if isinstance(e, ReplyText)] == [] and history.items() == ()
