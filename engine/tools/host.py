"""``ToolHost``: the engine's tools, wired to its desktop units. The Engine holds one and
forwards ``tool_support``, ``set_tool_confirmer``, ``timers`` and ``cancel_timer`` to it.

``configure`` (at load and at every ``apply``) decides whether tools are offered: tools
on, an LLM that can call them, a user module that loads; ``attach`` (at ``start``)
offers the tool specs on the units' replies (``set_reply_defaults``) and starts the tool
worker thread and the timer clock; ``detach`` (at ``stop``) ends both. Units a realtime
server starts (``Engine.start_unit``) are never attached: their client runs its own tools.
The MCP servers of ``tools.mcp_servers`` (``engine/tools/mcp_client.py``) are connected
at ``configure`` and add their tools; one that fails is reported and offers none.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from engine.backends.base import LlmModel, ToolSpec
from engine.config import ToolsConfig
from engine.errors import ConfigError
from engine.pipeline.events import EngineError, Event, EventHub, TimerDue, ToolCallsMade
from engine.pipeline.messages import PLAIN_REPLY, ReplyRequest
from engine.tools.builtins import built_in_tools
from engine.tools.mcp_client import McpServers
from engine.config_mcp import parse_servers
from engine.tools.mcp_naming import mcp_tools
from engine.tools.registry import Tool, ToolInfo, ToolSupport, check_trusted, trusted_names
from engine.tools.runner import Confirmer, ToolRunner, ToolSet, call_tool
from engine.tools.timers import Timer, TimerBook, TimerClock, chime
from engine.tools.user_module import ToolModuleError, module_label
from engine.tools.worker import UserToolWorker

if TYPE_CHECKING:
    from engine.units.unit import PipelineUnit

log = logging.getLogger("parley.tools")

#: The turn id the chime is played under (real turns count from 1).
CHIME_TURN = 0
CHIME_RATE = 24000
#: The ``actual_device`` of a model on an OpenAI-compatible server (``llm.backend openai``).
REMOTE = "remote"
ENABLE_HINT = ("tools need an LLM that can call them: a remote OpenAI-compatible LLM "
               "(llm.backend openai), or a local model whose chat template offers tools, "
               "such as Qwen2.5-Instruct, Qwen3 or a Llama 3.x instruct model")


def _history_path() -> Path:
    from engine.history.store import history_path

    return history_path()


class ToolHost:
    """The engine's tools; see the module doc. ``configure``/``attach``/``detach`` run
    under the engine's lock; the getters may be called from any thread."""

    def __init__(self, events: EventHub, next_turn_id: Callable[[], int],
                 book: TimerBook | None = None) -> None:
        self._events = events
        self._book = book or TimerBook()
        self._built_ins = built_in_tools(self._book, _history_path)
        self._set = ToolSet(dict(self._built_ins), frozenset(), ToolsConfig().timeout_s, None)
        self._support = ToolSupport(False, "tools are off until the engine is loaded",
                                    _infos(self._built_ins))
        self._confirm: Confirmer | None = None
        self._lock = threading.Lock()
        self._units: dict[int, PipelineUnit] = {}
        self._runner = ToolRunner(events, next_turn_id, lambda: self._set, lambda: self._confirm)
        self._clock = TimerClock(self._book, self._fire)
        self._worker: UserToolWorker | None = None
        self._mcp = McpServers(self._mcp_listed)
        events.subscribe(self._on_event)

    # ------------------------------------------------------------------ settings
    def configure(self, config: ToolsConfig, llm: LlmModel | None) -> None:
        """Decide what is offered under ``config`` with ``llm`` (None: no LLM, the tools
        are only listed and called by hand: ``parley-cli tools``); a ConfigError (nothing
        changed) when ``tools.trusted`` names an unknown tool. A bad user module turns
        tools off with the fault as the reason, and is reported as an ``EngineError``."""
        tools: dict[str, Tool] = dict(self._built_ins)
        worker, fault = self._user_worker(config.user_module)
        if worker is not None:
            source = module_label(config.user_module)
            for user in worker.tools:
                if user.name in tools:
                    fault = (f"tools.user_module: {source} defines {user.name!r}, which is a "
                             "built-in tool's name; rename it")
                    break
                tools[user.name] = Tool(ToolInfo(user.name, user.description, user.side_effects, source),
                                        ToolSpec(user.name, user.description, user.parameters))
        try:
            mcp_faults = self._mcp.configure(parse_servers(config.mcp_servers)) if fault is None else []
            tools.update(mcp_tools(self._mcp, tools, lambda: self._set.timeout_s))
            try:
                trusted = check_trusted(config.trusted, tools) if fault is None else frozenset()
            except ConfigError:
                if not mcp_faults:
                    raise
                # The unknown name may be a tool of a server that could not start.
                trusted = frozenset(trusted_names(config.trusted))
        except BaseException:
            if worker is not None and worker is not self._worker:
                worker.close()
            raise
        no_llm = "no LLM is loaded" if llm is None else llm.tool_support()
        # A remote LLM's server receives every tool result: stored conversations ask first.
        remote = llm is not None and llm.actual_device == REMOTE
        if fault is not None:
            support = ToolSupport(False, fault, _infos(self._built_ins), remote)
        elif not config.enabled:
            support = ToolSupport(False, "tools are off (tools.enabled is false)", _infos(tools), remote)
        elif no_llm is not None:
            hint = "" if "models that can" in no_llm else f"; {ENABLE_HINT}"
            support = ToolSupport(False, f"tools are off: {no_llm}{hint}", _infos(tools), remote)
        else:
            support = ToolSupport(True, "", _infos(tools), remote)
        with self._lock:
            old_worker, self._worker = self._worker, worker
            self._set = ToolSet(tools, trusted, config.timeout_s, worker, remote)
            self._support = support
            units = list(self._units.values())
        if old_worker is not None and old_worker is not worker:
            old_worker.close()
        for unit in units:
            unit.set_reply_defaults(self.reply_defaults())
        if fault is not None:
            self._events.emit(EngineError(-1, "tools", fault))
        for mcp_fault in mcp_faults:
            self._events.emit(EngineError(-1, "tools", mcp_fault))

    def _mcp_listed(self) -> None:
        """A server listed its tools again (it said they changed, or it restarted): offer
        the new list. On the MCP loop's thread; waits on nothing of that loop."""
        with self._lock:
            current = self._set
            tools = {name: tool for name, tool in current.tools.items() if not tool.info.server}
            tools.update(mcp_tools(self._mcp, tools, lambda: self._set.timeout_s))
            self._set = replace(current, tools=tools)
            self._support = replace(self._support, tools=_infos(tools))
            units = list(self._units.values())
        for unit in units:
            unit.set_reply_defaults(self.reply_defaults())

    def _user_worker(self, spec: str) -> tuple[UserToolWorker | None, str | None]:
        """The worker of ``spec`` (the running one if ``spec`` is unchanged), or why not."""
        if not spec.strip():
            return None, None
        current = self._worker
        if current is not None and current.spec == spec:
            return current, None
        worker = UserToolWorker(spec)
        try:
            worker.start()
        except ToolModuleError as exc:
            return None, str(exc)
        return worker, None

    def call(self, name: str, arguments: str) -> str:
        """Run tool ``name`` with ``arguments`` (JSON text) now, on this thread, without
        asking: the caller is the user (``parley-cli tools call``). Raises ToolRaised or
        ToolTimeout, or a ConfigError naming the tools when there is no such tool."""
        tools = self._set
        tool = tools.tools.get(name)
        if tool is None:
            raise ConfigError(f"there is no tool {name!r}; the tools are: {', '.join(sorted(tools.tools))}")
        return call_tool(tool, arguments, tools)

    def reply_defaults(self) -> ReplyRequest:
        """The request a desktop unit's replies are made with: the tools, when offered."""
        with self._lock:
            if not self._support.available:
                return PLAIN_REPLY
            return replace(PLAIN_REPLY, tools=tuple(t.spec for t in self._set.tools.values()))

    def support(self) -> ToolSupport:
        """Whether tools are offered now (``Engine.tool_support``), with each MCP server's
        status as it is now."""
        return replace(self._support, servers=self._mcp.statuses())

    def set_confirmer(self, confirm: Confirmer | None) -> None:
        """Who is asked before an untrusted tool with side effects (or one that would send
        stored conversations to a remote LLM) runs; None: such a call is not run, and the
        model is told nobody could be asked."""
        self._confirm = confirm

    # ------------------------------------------------------------------ timers
    def timers(self) -> tuple[Timer, ...]:
        """The pending timers, soonest first."""
        return self._book.timers()

    def cancel_timer(self, timer_id: str) -> bool:
        """Cancel one; False when there is no such timer."""
        return self._book.cancel(timer_id) is not None

    def _fire(self, timer: Timer) -> None:
        """On the clock thread: the event, and the chime on the first unit's sink."""
        with self._lock:
            unit = next(iter(self._units.values()), None)
        self._events.emit(TimerDue(-1 if unit is None else unit.unit, timer.timer_id,
                                   timer.label, timer.due_at))
        if unit is not None and not unit.ctx.stopping.is_set():
            try:
                (unit.playback.echo or unit.sink).play(chime(CHIME_RATE), CHIME_RATE, CHIME_TURN)
            except Exception as exc:  # noqa: BLE001 - a closed or lost sink: the notice still went out
                log.warning("the chime of timer %s could not play: %s", timer.timer_id, exc)

    # ------------------------------------------------------------------ units
    def attach(self, units: list[PipelineUnit]) -> None:
        """Offer the tools on ``units`` and start the tool thread and the timer clock."""
        with self._lock:
            self._units = {u.unit: u for u in units}
            worker = self._worker
        if worker is not None:
            worker.resume()
        self._mcp.resume()
        for unit in units:
            unit.set_reply_defaults(self.reply_defaults())
        self._runner.start()
        self._clock.start()

    def detach(self, timeout: float = 2.0) -> list[str]:
        """Stop the tool thread and the clock; the names of those that did not end."""
        with self._lock:
            self._units = {}
            worker = self._worker
        if worker is not None:
            worker.abort()  # a user tool in flight must not hold the stop up to its timeout
        self._mcp.abort()  # nor an MCP server's call
        stuck = [] if self._runner.stop(timeout) else ["parley-tools"]
        return stuck + ([] if self._clock.stop(timeout) else ["parley-timers"])

    def close(self) -> None:
        """Detach, end the worker process, and close the MCP servers."""
        self.detach()
        with self._lock:
            worker, self._worker = self._worker, None
        if worker is not None:
            worker.close()
        self._mcp.close()

    def _on_event(self, event: Event) -> None:
        if isinstance(event, ToolCallsMade):
            unit = self._units.get(event.unit)
            if unit is not None and self._support.available:
                self._runner.submit(unit, event)


def _infos(tools: dict[str, Tool]) -> tuple[ToolInfo, ...]:
    return tuple(t.info for t in tools.values())
