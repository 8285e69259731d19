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


@pytest.fixture
def loopback_without_proxy(monkeypatch):
    """Clients that connect with ``websockets`` take a proxy from the environment and have
    no option to refuse one: loopback must bypass it."""
    from tests.support.server import LOOPBACK

    monkeypatch.setenv("NO_PROXY", LOOPBACK)
    monkeypatch.setenv("no_proxy", LOOPBACK)


@pytest.fixture(scope="module")
def chromium_path() -> str:
    """Debian's chromium for the web page's browser tests; a skip without it, except where
    PARLEY_REQUIRE_BROWSER=1 (CI) makes that a failure."""
    from tests.support.browser import REQUIRE_ENV, browser_required, find_chromium

    found = find_chromium()
    if found is None:
        message = ("chromium is not installed (apt-get install chromium): the web page's "
                   "browser tests need it")
        if browser_required():
            pytest.fail(f"{message}; {REQUIRE_ENV}=1 makes this a failure")
        pytest.skip(message)
    return found
