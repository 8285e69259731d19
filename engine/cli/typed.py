"""What ``parley-cli ask`` and ``parley-cli chat`` share: an engine answering typed
messages on the offline (or configured) stack, with no microphone.

``TypedConversation`` loads the engine, starts one unit on a silent source and the sink
the command chose (a WAV file, the speaker, or one that keeps nothing), records its turns
in the history (as typed, ``TurnKind.TYPED``), and answers one message at a time
(``answer``), streaming the reply's clauses to a callback as they are written. A reply
that calls the assistant's tools is followed into the turn the tool worker opens for the
answer; the command's ``TerminalConfirmer`` (``engine/cli/confirm.py``) is asked first
where a tool needs the user's yes.
"""

from __future__ import annotations

import queue
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from engine.audio.base import AudioSink
from engine.audio.silent import SilentInput
from engine.config import EngineConfig
from engine.errors import ParleyError
from engine.pipeline.events import (EngineError, Event, ReplyText, ToolCallFinished, ToolCallsMade,
                                    TurnCancelled, TurnFinished)
from engine.pipeline.metrics import TurnRecord

if TYPE_CHECKING:
    from engine.cli.confirm import TerminalConfirmer
    from engine.models.model_registry import ModelRegistry

#: The longest one reply may take before the command gives up on it.
REPLY_TIMEOUT_S = 600.0
#: How long a failed turn's end (its TurnCancelled) is waited for after its error.
_AFTER_ERROR_S = 10.0


def stdin_text(command: str) -> str:
    """All of stdin, for ``ask -``; a ParleyError when stdin is closed or cannot be read."""
    if sys.stdin is None or sys.stdin.closed:
        raise ParleyError(f"{command} - reads the message from stdin, which is closed; pipe the "
                          f"message in (echo 'What time is it?' | parley-cli {command} -) or give "
                          "it as an argument")
    try:
        return sys.stdin.read()
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise ParleyError(f"{command} - could not read the message from stdin: {exc}") from None


@dataclass
class Answer:
    """One typed message's outcome: the last turn's record (texts, marks, figures;
    cancelled when it was cut off or failed), the stage errors reported on it, the tool
    calls its reply made (``ToolCallFinished``) and the records of the turns before the
    last (the one that called the tools, when the answer came in the next)."""

    turn_id: int
    record: TurnRecord | None
    errors: list[str] = field(default_factory=list)
    tool_calls: list[ToolCallFinished] = field(default_factory=list)
    earlier: list[TurnRecord] = field(default_factory=list)

    @property
    def reply(self) -> str:
        """Every word the model wrote for the message, the turns of its tool calls included."""
        records = [*self.earlier, *([] if self.record is None else [self.record])]
        return " ".join(r.reply.strip() for r in records if r.reply.strip())


def _turn_of(event: Event) -> int | None:
    """The turn a reply's event belongs to (None: not such an event)."""
    if isinstance(event, TurnFinished):
        return event.record.turn_id
    if isinstance(event, ReplyText | ToolCallsMade | TurnCancelled):
        return event.turn_id
    return None


class TypedConversation:
    """A loaded engine that answers typed messages, one at a time. Close it (or use it as
    a context manager) to stop the unit, write the sink's file and store the history."""

    def __init__(self, config: EngineConfig, sink: AudioSink, *, history: str | None,
                 registry: ModelRegistry | None = None,
                 confirmer: TerminalConfirmer | None = None) -> None:
        """``history``: the conversation's source label in the history (None: not stored);
        ``registry``: models to share (a test's); ``confirmer``: who is asked before a
        tool that needs the user's yes (None: such a call is not run). Loads the models
        (with progress on stderr): blocks for seconds."""
        from engine.cli.converse import prepare_engine
        from engine.history.recorder import record_history
        from engine.history.store import HistoryStore

        self.sink = sink
        self._store = HistoryStore() if history else None  # a broken history fails before loading
        if self._store is not None and self._store.notice:
            print(f"parley-cli: note: {self._store.notice}", file=sys.stderr)
        self._recorder = None
        self._confirmer = confirmer
        try:
            self.engine = prepare_engine(config, registry)
            if self._store is not None and history:
                self._recorder = record_history(self.engine, history, self._store)
            self.engine.set_tool_confirmer(confirmer)
            self.engine.start([SilentInput()], [sink])
        except BaseException:
            self.close()
            raise

    def answer(self, text: str, *, speak: bool,
               on_text: Callable[[str], None] | None = None) -> Answer:
        """Type ``text`` (``Engine.say``) and wait for its reply to end; ``on_text`` gets
        each clause as it is written, on this thread. Ctrl-C cuts the reply off (as
        Interrupt does) and is raised again once the turn ended."""
        events: queue.SimpleQueue = queue.SimpleQueue()
        unsubscribe = self.engine.subscribe(events.put)
        try:
            turn = self.engine.say(text, speak=speak)
            try:
                return self._wait(turn, events, on_text, REPLY_TIMEOUT_S)
            except KeyboardInterrupt:
                self.engine.interrupt()
                if self._confirmer is not None:
                    self._confirmer.cancel()  # a question on the terminal is answered "no"
                record = self.engine.metrics.turn(0, turn)
                if record is None or not (record.finished or record.cancelled):
                    self._wait(turn, events, None, _AFTER_ERROR_S)  # its end, cut off
                raise
        finally:
            unsubscribe()

    def _wait(self, turn: int, events: queue.SimpleQueue,
              on_text: Callable[[str], None] | None, timeout_s: float) -> Answer:
        """Until ``turn`` ends; when its reply called tools, until the turn after it
        (the tool worker's answer) ends, and so on."""
        answer = Answer(turn, None)
        deadline = time.monotonic() + timeout_s
        calling: set[int] = set()  # turns whose reply called tools
        after: int | None = None  # the answer is the next turn after this one
        while True:
            try:
                event = events.get(timeout=0.1)
            except queue.Empty:
                if time.monotonic() > deadline:
                    raise ParleyError(f"no reply to the message within {timeout_s:.0f} s"
                                      + (f" ({'; '.join(answer.errors)})" if answer.errors else "")
                                      ) from None
                continue
            if event.unit != 0 and not isinstance(event, EngineError):
                continue
            if after is not None and (opened := _turn_of(event)) is not None and opened > after:
                turn, after = opened, None  # the turn the tool worker answers in
            if isinstance(event, ReplyText) and event.turn_id == turn:
                if on_text is not None:
                    on_text(event.text)
            elif isinstance(event, ToolCallsMade) and event.turn_id == turn:
                calling.add(turn)
            elif isinstance(event, ToolCallFinished) and event.turn_id in calling:
                answer.tool_calls.append(event)
            elif isinstance(event, EngineError) and event.turn_id in (turn, None):
                answer.errors.append(f"{event.stage}: {event.message}")
                deadline = min(deadline, time.monotonic() + _AFTER_ERROR_S)
            elif isinstance(event, TurnFinished) and event.record.turn_id == turn:
                if turn in calling:  # its tools run; the answer comes in the next turn
                    answer.earlier.append(event.record)
                    after = turn
                    continue
                answer.turn_id, answer.record = turn, event.record
                return answer
            elif isinstance(event, TurnCancelled) and event.turn_id == turn:
                answer.turn_id, answer.record = turn, self.engine.metrics.turn(0, turn)
                return answer

    def new_conversation(self) -> None:
        """Start over: the engine forgets the conversation, the history opens a new one."""
        self.engine.new_conversation()
        if self._recorder is not None:
            self._recorder.new_conversation()

    def wait_heard(self, timeout: float) -> None:
        """Let the replies still playing on the speaker finish (a file sink has none)."""
        for unit in self.engine.units:
            unit.playback.wait_idle(timeout)

    def close(self) -> None:
        """Stop the unit (the sink writes its file), store the history, release the models."""
        if self._confirmer is not None:
            self._confirmer.close()  # a question still open is answered "no": the tools can end
        engine = getattr(self, "engine", None)
        if engine is not None:
            engine.close()
        if self._recorder is not None:
            for problem in self._recorder.close():
                print(f"parley-cli: warning: {problem}", file=sys.stderr)
            self._recorder = None
        if self._store is not None:
            self._store.close()
            self._store = None

    def __enter__(self) -> TypedConversation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
