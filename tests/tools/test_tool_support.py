"""Whether tools are offered, and why not: the bundled SmolLM2 cannot call them, the
setting turns them off, a bad user module or an unknown trusted name is a clear error;
timers kept on file fire at once when overdue; a realtime server's units are left alone."""

from __future__ import annotations

import json
import time

import pytest

from engine.audio.file_sink import FileSink
from engine.config import EngineConfig
from engine.engine import Engine
from engine.errors import ConfigError
from engine.pipeline.events import EngineError
from engine.pipeline.messages import PLAIN_REPLY
from engine.runtime.hub import HubStatus
from engine.tools.timers import TimerBook, TimerClock, timers_path
from tests.support.sources import Quiet

pytestmark = pytest.mark.slow


def test_the_bundled_smollm2_says_why_tools_are_off_and_what_enables_them(registry, data_dir):
    engine = Engine(EngineConfig().with_overrides({"turns.barge_in": "off"}), registry=registry,
                    hub=HubStatus(offline=True))
    engine.load()
    try:
        support = engine.tool_support()
        assert not support.available
        assert "SmolLM2" in support.reason and "offers no tools" in support.reason
        assert "remote OpenAI-compatible LLM" in support.reason and "Qwen2.5-Instruct" in support.reason
        assert "get_time" in {t.name for t in support.tools}  # what would be offered
        engine.start([Quiet()], [FileSink(None, realtime=False)])
        assert engine.units[0].ctx.reply == PLAIN_REPLY  # nothing offered to the model
    finally:
        engine.stop()
        engine.close()


def test_tools_off_offer_nothing_and_apply_turns_them_on(make_engine, chat):
    run = make_engine(**{"tools.enabled": False})
    support = run.engine.tool_support()
    assert not support.available and "tools.enabled" in support.reason
    run.ask("What time is it?")
    assert "tools" not in chat.requests[-1]
    run.engine.apply(run.engine.config.with_overrides({"tools.enabled": True}))
    assert run.engine.tool_support().available
    assert "get_time" in {t.name for t in run.unit.ctx.reply.tools}


def test_an_unknown_trusted_name_is_a_config_error_listing_the_tools(make_engine):
    with pytest.raises(ConfigError, match=r"tools.trusted names 'set_alarm', which is not a tool; "
                                          r"the tools are: calculate, cancel_timer, get_time"):
        make_engine(**{"tools.trusted": "set_timer, set_alarm"})
    run = make_engine(**{"tools.trusted": "set_timer"})
    before = run.engine.config
    with pytest.raises(ConfigError, match="'nope'"):
        run.engine.apply(before.with_overrides({"tools.trusted": "nope"}))
    assert run.engine.config is before and run.engine.tool_support().available


def test_a_bad_user_module_turns_tools_off_with_the_fault(registry, chat, data_dir, tmp_path):
    path = tmp_path / "broken_tools.py"
    path.write_text("TOOLS = [{'name': 'ghost'}]\n", "utf-8")
    config = EngineConfig().with_overrides({
        "llm.backend": "openai", "llm.base_url": chat.url, "llm.model": chat.model,
        "tools.user_module": str(path)})
    engine = Engine(config, registry=registry, hub=HubStatus(offline=True))
    errors: list[EngineError] = []
    engine.subscribe(lambda e: errors.append(e) if isinstance(e, EngineError) else None)
    engine.load()
    try:
        support = engine.tool_support()
        assert not support.available
        assert str(path) in support.reason and "has no function ghost()" in support.reason
        assert [(e.stage, e.message) for e in errors] == [("tools", support.reason)]
        engine.apply(config.with_overrides({"tools.user_module": ""}))
        assert engine.tool_support().available
    finally:
        engine.close()


def test_a_realtime_servers_units_keep_their_own_reply_defaults(make_engine):
    run = make_engine()
    assert run.unit.ctx.reply.tools  # the desktop unit offers the tools
    served = run.engine.start_unit(Quiet(), FileSink(None, realtime=False), 7)
    try:
        assert served.ctx.reply == PLAIN_REPLY
    finally:
        run.engine.stop_unit(served)


def test_an_overdue_timer_on_file_fires_at_once(data_dir):
    path = timers_path()
    path.write_text(json.dumps([
        {"timer_id": "old1", "label": "missed", "due_at": time.time() - 60, "kind": "reminder"},
        {"timer_id": "new1", "label": "later", "due_at": time.time() + 3600, "kind": "timer"}]))
    book = TimerBook()
    fired = []
    clock = TimerClock(book, fired.append)
    clock.start()
    try:
        deadline = time.monotonic() + 5
        while not fired and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        assert clock.stop()
    assert [t.timer_id for t in fired] == ["old1"]
    assert [t.timer_id for t in TimerBook().timers()] == ["new1"]  # the file was rewritten


def test_a_damaged_timers_file_is_named_and_ignored(data_dir):
    timers_path().write_text("{not json")
    book = TimerBook()
    assert book.timers() == () and "is not a list of timers" in (book.load_error or "")
    with pytest.raises(ValueError, match="more than 0 s and at most a year"):
        book.add(0, "now")
