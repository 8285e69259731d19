"""The tool worker thread (``parley-tools``): runs the calls a desktop unit's reply made.

Per ``ToolCallsMade``: each call is announced (``ToolCallStarted``), confirmed when it has
side effects, or would send stored conversations to a remote LLM, and is not trusted
(``asks_first``), acknowledged aloud once ("One moment.", which opens the
turn the answer then comes in: ``PipelineUnit.speak``), run — a
built-in here, a user tool in the worker process with ``tools.timeout_s`` — and ended
(``ToolCallFinished``); its result (or error) goes into the unit's chat history as the
call's output, and the next reply is asked for. A failed call adds a spoken apology. A
barge-in or a new turn while the tools ran leaves the outputs in the history, unanswered:
the user's new words are answered with them.

Stage threads only queue the event (``submit``); nothing here runs on them.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from engine.backends.base import ToolCall
from engine.pipeline.chat_history import HistoryItem, ItemKind
from engine.pipeline.events import EventHub, ToolCallFinished, ToolCallsMade, ToolCallStarted
from engine.pipeline.messages import TextChunk
from engine.tools.registry import Tool, ToolInfo, asks_first
from engine.tools.worker import ToolRaised, ToolTimeout, UserToolWorker, result_text

if TYPE_CHECKING:
    from engine.units.unit import PipelineUnit

log = logging.getLogger("parley.tools")

ACKNOWLEDGEMENT = "One moment."
APOLOGY = "Sorry, that did not work."
APOLOGY_TIMEOUT = "Sorry, that took too long."
DECLINED = "declined by the user"
#: A call that needed the user's yes when nobody could be asked (no confirmer).
NOT_ASKED = ("not run: it needs the user's permission and nobody could be asked (the user "
             "can allow it in advance by naming it in tools.trusted)")
#: Replies in a row that may call tools again; the one after answers without tools.
MAX_ROUNDS = 4
#: A result longer than this is cut (the prompt and the history carry it every turn).
#: The LLM backends do not report their context, so this is fixed: 8000 characters are
#: about 2000 tokens, which leaves a small local model's context room for the prompt,
#: the history and the reply. The model is told that the result was cut, and where.
MAX_RESULT_CHARS = 8000

Confirmer = Callable[[ToolCall, ToolInfo], bool]


class NobodyToAsk(Exception):
    """Raised by a confirmer that cannot ask anyone (a command line with no terminal):
    the call is not run, and the model is told that nobody could be asked, with the
    exception's text (how the user can allow it), not that the user said no."""


@dataclass(frozen=True, slots=True)
class ToolSet:
    """What the runner calls with, replaced whole when the settings change."""

    tools: dict[str, Tool]
    trusted: frozenset[str]
    timeout_s: float
    worker: UserToolWorker | None
    remote_llm: bool = False  # the results go to a remote LLM's server


@dataclass(frozen=True, slots=True)
class _Job:
    unit: PipelineUnit
    event: ToolCallsMade
    generation: int  # the unit's generation when the calls were made


class ToolRunner:
    """The tool worker thread over the attached units; see the module doc."""

    def __init__(self, events: EventHub, next_turn_id: Callable[[], int],
                 tools: Callable[[], ToolSet], confirmer: Callable[[], Confirmer | None]) -> None:
        self._events = events
        self._next_turn_id = next_turn_id
        self._tools = tools
        self._confirmer = confirmer
        self._jobs: queue.Queue[_Job | None] = queue.Queue()
        self._rounds: dict[tuple[int, int], int] = {}  # (unit, turn) -> tool rounds before it
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the thread (once; again after ``stop``)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="parley-tools", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 2.0) -> bool:
        """End the thread after the call in flight (a user tool's is bounded by its
        timeout); True when it ended within ``timeout``."""
        thread, self._thread = self._thread, None
        if thread is None:
            return True
        self._jobs.put(None)
        thread.join(timeout)
        return not thread.is_alive()

    def submit(self, unit: PipelineUnit, event: ToolCallsMade) -> None:
        """Queue a reply's calls (called on a stage thread: returns at once)."""
        self._jobs.put(_Job(unit, event, unit.control.generation))

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            try:
                self._handle(job)
            except Exception:  # one bad job must not end the thread (logged)
                log.exception("running the tool calls of turn %s failed", job.event.turn_id)

    def _handle(self, job: _Job) -> None:
        unit, event, tools = job.unit, job.event, self._tools()
        follow: int | None = None  # the turn that answers: the acknowledgement opens it
        failed = False
        apology = APOLOGY
        for call in event.calls:
            self._events.emit(ToolCallStarted(event.unit, event.turn_id, call))
            start = time.perf_counter()
            tool = tools.tools.get(call.name)
            error: str | None = None
            result = ""
            if tool is None:
                error = f"there is no tool {call.name!r}"
            elif (refusal := self._refusal(call, tool, tools)) is not None:
                error = refusal
            else:
                if follow is None and not unit.ctx.stopping.is_set():
                    follow = unit.speak(ACKNOWLEDGEMENT)
                try:
                    result = self._call(tool, call, tools)
                except ToolTimeout as exc:
                    error, apology = str(exc), APOLOGY_TIMEOUT
                except Exception as exc:  # noqa: BLE001 - the tool's failure is the model's to hear of
                    error = exc.args[0] if isinstance(exc, ToolRaised) and exc.args else \
                        f"{type(exc).__name__}: {exc}"
                failed = failed or error is not None
            if error is not None:
                result = json.dumps({"error": error}, ensure_ascii=False)
            else:
                result = cut_for_model(result)
            seconds = time.perf_counter() - start
            unit.chat_history.add(HistoryItem(ItemKind.FUNCTION_OUTPUT, result, event.turn_id,
                                              call_id=call.call_id))
            self._events.emit(ToolCallFinished(event.unit, event.turn_id, call, result, error, seconds))
        if unit.control.generation != job.generation or unit.ctx.stopping.is_set():
            # Cut off meanwhile: the outputs wait in the history for the next turn.
            self._close(unit, follow)
            return
        if failed:
            follow = unit.speak(apology, follow)
        rounds = self._rounds.pop((event.unit, event.turn_id), 0) + 1
        request = unit.ctx.reply
        if rounds >= MAX_ROUNDS:
            request = replace(request, tool_choice="none")
        follow = unit.say("", request, turn=follow)
        self._rounds[(event.unit, follow)] = rounds
        if len(self._rounds) > 64:
            for key in sorted(self._rounds)[:-32]:
                del self._rounds[key]

    @staticmethod
    def _close(unit: PipelineUnit, turn: int | None) -> None:
        """End the acknowledgement's turn that will get no reply, unless it was cut off
        (a cut-off turn is over already)."""
        if turn is None or unit.ctx.stopping.is_set():
            return
        record = unit.ctx.metrics.turn(unit.unit, turn)
        if record is not None and not record.cancelled:
            unit.tts.put(TextChunk(turn, unit.control.generation, "", True))

    def _refusal(self, call: ToolCall, tool: Tool, tools: ToolSet) -> str | None:
        """None when the call may run; else why not, as the model is told it."""
        if not asks_first(tool.info, remote_llm=tools.remote_llm) or tool.info.name in tools.trusted:
            return None
        confirm = self._confirmer()
        if confirm is None:
            return NOT_ASKED
        try:
            return None if confirm(call, tool.info) else DECLINED
        except NobodyToAsk as exc:
            return f"not run: it needs the user's permission and nobody could be asked ({exc})"
        except Exception:  # a confirmer that fails has not said yes (logged)
            log.exception("the tool confirmer failed on %s", call.name)
            return "not run: asking the user for permission failed"

    def _call(self, tool: Tool, call: ToolCall, tools: ToolSet) -> str:
        return call_tool(tool, call.arguments, tools)


def cut_for_model(result: str, limit: int = MAX_RESULT_CHARS) -> str:
    """``result`` as the model gets it: at most ``limit`` characters, and a cut said."""
    if len(result) <= limit:
        return result
    return (result[:limit] + f" … (cut: the result had {len(result)} characters; only the "
            f"first {limit} are shown)")


def call_tool(tool: Tool, arguments: str, tools: ToolSet) -> str:
    """Run ``tool`` with ``arguments`` (JSON text) on this thread; its result as text.
    Raises ToolRaised (bad arguments, the tool failed) or ToolTimeout."""
    name = tool.info.name
    if tool.run is None:
        if tools.worker is None:
            raise ToolRaised(f"the worker process for {name} is not running")
        return tools.worker.call(name, arguments, tools.timeout_s)
    try:
        values = json.loads(arguments or "{}")
    except ValueError:
        raise ToolRaised(f"the arguments are not JSON: {arguments[:200]!r}") from None
    if not isinstance(values, dict):
        raise ToolRaised("the arguments must be a JSON object")
    return result_text(tool.run(values))
