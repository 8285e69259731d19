"""The full pipeline with STT and LLM on MLX (mlx[cpu] here), from jfk.flac to reply audio."""

from __future__ import annotations

import pytest

from engine.audio.decode import load_audio
from engine.audio.file_sink import FileSink
from engine.audio.file_source import FileSource
from engine.config import EngineConfig
from engine.engine import Engine
from engine.pipeline.events import EngineError
from engine.runtime.hub import HubStatus
from engine.runtime.mlx_lock import get_mlx_lock
from tests.support.mlx import build_tiny_mlx_whisper

pytestmark = pytest.mark.slow
pytest.importorskip("mlx.core")


@pytest.fixture(scope="module")
def tiny_whisper(tmp_path_factory):
    return build_tiny_mlx_whisper(tmp_path_factory.mktemp("mlx-whisper"))


def test_stt_and_llm_on_mlx_run_the_whole_pipeline(tiny_whisper, jfk_path):
    config = EngineConfig().with_overrides({
        "stt.device": "mlx", "stt.model": str(tiny_whisper), "llm.device": "mlx",
        "llm.max_new_tokens": "24", "turns.barge_in": "off"})
    engine = Engine(config, hub=HubStatus(offline=True))
    assert (engine.placements["stt"].backend, engine.placements["llm"].backend) == ("mlx-whisper", "mlx-lm")
    before = get_mlx_lock().snapshot()
    engine.load()
    assert engine.models["stt"].actual_device == "mlx" and engine.models["llm"].actual_device == "mlx"
    errors = []
    engine.subscribe(lambda e: errors.append(e) if isinstance(e, EngineError) else None)
    sink = FileSink(None, realtime=False)
    engine.start([FileSource(load_audio(jfk_path), realtime=False, trailing_silence_s=2.0)], [sink])
    try:
        assert engine.wait_drained(600)
        snapshot = engine.snapshot()
    finally:
        assert engine.stop() == []
        engine.release_models()
    assert not errors, errors
    (turn,) = engine.metrics.turns()
    assert turn.transcript  # random Whisper weights: words, but not JFK's
    assert turn.reply and sink.seconds_played > 0.2
    lock = snapshot.mlx_lock
    assert lock is not None and lock.acquisitions > before.acquisitions
    assert {"stt", "llm"} <= {s.stage for s in lock.stages}
    assert lock.holder is None
