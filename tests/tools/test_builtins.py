"""The built-in tools called as the runner calls them (a dict of arguments in, a result
out): the clock, timers set, listed and cancelled, the calculator, an empty history."""

from __future__ import annotations

import time
from datetime import datetime

import pytest

from engine.tools.builtins import built_in_tools, local_zone_name, now_text
from engine.tools.calculator import CalculatorError
from engine.tools.timers import TimerBook


@pytest.fixture
def tools(tmp_path):
    return built_in_tools(TimerBook(tmp_path / "timers.json"), lambda: tmp_path / "history.db")


def test_the_clock_gives_the_local_date_time_and_zone(tools, monkeypatch):
    monkeypatch.setenv("TZ", "Europe/Paris")
    time.tzset()
    try:
        assert local_zone_name() == "Europe/Paris"
        answer = now_text(datetime(2026, 7, 14, 9, 5))
        assert answer["date"] == "Tuesday 14 July 2026" and answer["time"] == "09:05"
        assert answer["iso"] == "2026-07-14T09:05:00+02:00"
        assert set(tools["get_time"].run({})) == {"date", "time", "time_zone", "iso"}
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_timers_are_set_listed_and_cancelled(tools):
    run = {name: tool.run for name, tool in tools.items()}
    assert all(tools[n].info.side_effects for n in ("set_timer", "set_reminder", "cancel_timer"))
    assert not any(tools[n].info.side_effects for n in ("get_time", "list_timers", "calculate",
                                                        "search_history"))
    tea = run["set_timer"]({"minutes": 3, "label": "tea"})
    assert tea["kind"] == "timer" and 178 <= tea["in_seconds"] <= 180
    later = run["set_reminder"]({"hours": 1, "seconds": 30, "label": "stretch"})
    listed = run["list_timers"]({})["timers"]
    assert [t["label"] for t in listed] == ["tea", "stretch"]
    assert run["cancel_timer"]({"timer_id": tea["timer_id"]}) == {
        "cancelled": tea["timer_id"], "label": "tea"}
    with pytest.raises(ValueError, match=f"there is no timer 'nope'; the timers are: {later['timer_id']}"):
        run["cancel_timer"]({"timer_id": "nope"})
    with pytest.raises(ValueError, match="more than 0 s"):
        run["set_timer"]({"seconds": -5})


def test_the_calculator_and_an_empty_history(tools):
    assert tools["calculate"].run({"expression": "6 * 7"}) == {"expression": "6 * 7", "result": 42}
    with pytest.raises(CalculatorError, match="division by zero"):
        tools["calculate"].run({"expression": "1/0"})
    assert tools["search_history"].run({"query": "castle"}) == {"query": "castle", "turns": []}
