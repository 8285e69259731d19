"""Fixtures of the tools tests: the models loaded once, the scripted LLM server, and an
engine factory on a quiet source (typed turns) and a file sink, with its own data folder."""

from __future__ import annotations

import pytest

from engine.config import EngineConfig
from engine.engine import Engine
from engine.runtime.hub import HubStatus
from engine.models.model_registry import ModelRegistry
from tests.support.chat_server import ChatServer
from tests.support.tools import ToolEngine


@pytest.fixture(scope="package")
def registry():
    """Real offline models (Silero VAD, tiny.en, Piper), loaded once for the package."""
    return ModelRegistry()


@pytest.fixture(scope="package")
def chat():
    server = ChatServer()
    yield server
    server.close()


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    """A data folder of the test's own: the timers file and the history database."""
    monkeypatch.setenv("PARLEY_DATA_DIR", str(tmp_path))
    return tmp_path


@pytest.fixture
def make_engine(registry, chat, data_dir):
    """``make_engine(source=None, **overrides)``: a loaded Engine whose LLM is the scripted
    server, started on ``source(engine)`` (default: a quiet source) and a file sink
    (``ToolEngine``); all closed at the end."""
    made: list[ToolEngine] = []

    def make(source=None, **overrides) -> ToolEngine:
        config = EngineConfig().with_overrides({
            "turns.barge_in": "off", "llm.backend": "openai", "llm.base_url": chat.url,
            "llm.model": chat.model, **overrides})
        engine = Engine(config, registry=registry, hub=HubStatus(offline=True))
        engine.load()
        tool_engine = ToolEngine(engine, source(engine) if source else None)
        made.append(tool_engine)
        return tool_engine

    yield make
    for tool_engine in made:
        tool_engine.close()
