"""A server whose STT runs on MLX (mlx[cpu] here) with two pipelines: live transcription is
off, the client is told so in ``session.created``, and the pool reports the MLX lock."""

from __future__ import annotations

import asyncio

import pytest
from websockets.asyncio.client import connect

from engine.config import EngineConfig
from engine.engine import Engine
from engine.runtime.hub import HubStatus
from engine.server.runner import ServerThread
from engine.server.server_settings import ServerSettings
from tests.support.server import recv_json

pytestmark = pytest.mark.slow
pytest.importorskip("mlx.core")


@pytest.fixture(scope="module")
def mlx_engine(tmp_path_factory):
    from tests.support.mlx import build_tiny_mlx_whisper

    whisper = build_tiny_mlx_whisper(tmp_path_factory.mktemp("mlx-whisper"))
    config = EngineConfig().with_overrides({"units": 2, "turns.live_transcription": True,
                                            "stt.device": "mlx", "stt.model": str(whisper)})
    engine = Engine(config, hub=HubStatus(offline=True))
    engine.load()
    yield engine
    engine.close()


def test_several_units_sharing_mlx_serve_without_live_transcription_and_say_so(mlx_engine):
    server = ServerThread(mlx_engine, ServerSettings(port=0, num_pipelines=2))
    server.start()

    async def run():
        async with connect(server.url, proxy=None, max_size=None) as conn:
            created = await recv_json(conn)
            return created, await asyncio.to_thread(server.pool_status)

    try:
        created, pool = asyncio.run(run())
    finally:
        assert server.stop(20.0)
    parley = created["session"]["parley"]
    assert parley["live_transcription"] is False
    assert any("live transcription is off" in note for note in parley["notes"])
    assert any("live transcription is off" in note for note in pool["notes"])
    stt = next(m for m in pool["models"] if m["stage"] == "stt")
    assert (stt["device"], stt["actual_device"]) == ("mlx", "mlx")
    assert stt["lock"] is not None and stt["lock"]["acquisitions"] >= 1  # the MLX lock
    assert 0.0 <= stt["lock"]["utilization"] <= 1.0
