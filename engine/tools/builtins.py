"""The built-in tools: the date and time, timers and reminders, a calculator, and search
of past conversations. Each runs in-process on the tool worker thread and is bounded:
no network, a calculator that refuses huge work, a history query with a lock timeout."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from engine.backends.base import ToolSpec
from engine.tools.calculator import calculate
from engine.tools.registry import BUILT_IN, Tool, ToolInfo
from engine.tools.timers import TimerBook

SEARCH_HITS = 5


def local_zone_name() -> str:
    """The user's time zone by name (``Europe/Paris``) where the system says it, else its
    abbreviation (``CET``)."""
    zone = os.environ.get("TZ", "").lstrip(":")
    if zone and "/" in zone:
        return zone
    try:
        target = os.path.realpath("/etc/localtime")
    except OSError:
        target = ""
    if "zoneinfo/" in target:
        return target.split("zoneinfo/", 1)[1]
    return datetime.now().astimezone().tzname() or "UTC"


def now_text(moment: datetime | None = None) -> dict[str, str]:
    """The local date and time, as the clock tool answers."""
    moment = (moment or datetime.now()).astimezone()
    return {"date": moment.strftime("%A %d %B %Y"), "time": moment.strftime("%H:%M"),
            "time_zone": local_zone_name(), "iso": moment.isoformat(timespec="seconds")}


def _when(due_at: float) -> str:
    return datetime.fromtimestamp(due_at).astimezone().strftime("%H:%M:%S on %A %d %B")


def _seconds(args: Mapping[str, Any]) -> float:
    value = args.get("seconds", 0) or 0
    for key, scale in (("minutes", 60), ("hours", 3600)):
        value = float(value) + float(args.get(key, 0) or 0) * scale
    return float(value)


def built_in_tools(book: TimerBook, history_path: Callable[[], Path]) -> dict[str, Tool]:
    """The built-in tools by name; ``book`` keeps the timers, ``history_path()`` is the
    history database the app and the CLI write."""

    def get_time(_args: Mapping[str, Any]) -> dict[str, str]:
        return now_text()

    def add(kind: str) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
        def run(args: Mapping[str, Any]) -> dict[str, Any]:
            timer = book.add(_seconds(args), str(args.get("label", "") or ""), kind)
            return {"timer_id": timer.timer_id, "label": timer.label, "kind": kind,
                    "due": _when(timer.due_at), "in_seconds": round(timer.due_at - time.time())}
        return run

    def list_timers(_args: Mapping[str, Any]) -> dict[str, Any]:
        return {"timers": [{"timer_id": t.timer_id, "label": t.label, "kind": t.kind,
                            "due": _when(t.due_at), "in_seconds": max(0, round(t.due_at - time.time()))}
                           for t in book.timers()]}

    def cancel_timer(args: Mapping[str, Any]) -> dict[str, Any]:
        timer_id = str(args.get("timer_id", ""))
        timer = book.cancel(timer_id)
        if timer is None:
            known = ", ".join(t.timer_id for t in book.timers()) or "none"
            raise ValueError(f"there is no timer {timer_id!r}; the timers are: {known}")
        return {"cancelled": timer.timer_id, "label": timer.label}

    def calculator(args: Mapping[str, Any]) -> dict[str, Any]:
        expression = str(args.get("expression", ""))
        return {"expression": expression, "result": calculate(expression)}

    def search_history(args: Mapping[str, Any]) -> dict[str, Any]:
        from engine.history.store import HistoryStore

        query = str(args.get("query", "")).strip()
        path = history_path()
        if not path.exists():
            return {"query": query, "turns": []}
        with HistoryStore(path, timeout_s=5.0) as store:
            hits = store.search(query, SEARCH_HITS, literal=True)
        return {"query": query, "turns": [{"when": h.finished_at, "user": h.transcript,
                                           "assistant": h.reply} for h in hits]}

    number = {"type": "number"}
    duration = {"seconds": {**number, "description": "seconds from now"},
                "minutes": {**number, "description": "minutes from now (added to seconds)"},
                "hours": {**number, "description": "hours from now (added to the rest)"}}
    specs: list[tuple[str, str, dict[str, Any], Callable[[Mapping[str, Any]], Any], bool]] = [
        ("get_time", "The current local date, time and time zone.", {}, get_time, False),
        ("set_timer", "Start a countdown timer that chimes when it ends.",
         {**duration, "label": {"type": "string", "description": "what the timer is for"}},
         add("timer"), True),
        ("set_reminder", "Remind the user of something later (a chime and a notice).",
         {**duration, "label": {"type": "string", "description": "what to remind of"}},
         add("reminder"), True),
        ("list_timers", "The timers and reminders that are set.", {}, list_timers, False),
        ("cancel_timer", "Cancel a timer or reminder by its id.",
         {"timer_id": {"type": "string"}}, cancel_timer, True),
        ("calculate", "Evaluate an arithmetic expression (+ - * / // % **, parentheses, "
         "sqrt, log, sin, pi...).", {"expression": {"type": "string"}}, calculator, False),
        ("search_history", "Search the past conversations for words; the matching turns.",
         {"query": {"type": "string", "description": "words to look for"}}, search_history, False),
    ]
    required = {"cancel_timer": ["timer_id"], "calculate": ["expression"],
                "search_history": ["query"], "set_reminder": ["label"]}
    tools: dict[str, Tool] = {}
    # Its result is stored conversations: a remote LLM's server would receive them.
    returns_history = {"search_history"}
    for name, description, properties, run, side_effects in specs:
        parameters: dict[str, Any] = {"type": "object", "properties": properties}
        if name in required:
            parameters["required"] = required[name]
        tools[name] = Tool(ToolInfo(name, description, side_effects, BUILT_IN,
                                    returns_history=name in returns_history),
                           ToolSpec(name, description, parameters), run)
    return tools
