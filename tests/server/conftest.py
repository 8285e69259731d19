"""Fixtures of the realtime server's tests (the helpers are ``tests.support.server``)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def server_engine():
    """An engine on the bundled offline stack with room for three units, loaded once per
    module; closed at the end."""
    from engine.config import EngineConfig
    from engine.engine import Engine
    from engine.runtime.hub import HubStatus

    config = EngineConfig().with_overrides({"units": 3, "turns.live_transcription": True})
    engine = Engine(config, hub=HubStatus(offline=True))
    engine.load()
    yield engine
    engine.close()
