"""ModelRegistry: one load per key, shared instances, reference counting."""

import dataclasses
import threading

from engine.config import EngineConfig
from engine.runtime.hub import HubStatus
from engine.models.model_registry import ModelRegistry
from engine.models.placement import resolve_placements


def _vad_placement():
    return resolve_placements(EngineConfig(), hub=HubStatus(offline=True))["vad"]


def test_concurrent_acquires_load_once_and_share_the_instance():
    registry = ModelRegistry()
    placement = _vad_placement()
    options = EngineConfig().vad
    results = []

    def grab():
        results.append(registry.acquire(placement, options))

    threads = [threading.Thread(target=grab) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(results) == 4 and all(r is results[0] for r in results)
    (loaded,) = registry.loaded()
    assert loaded.refs == 4 and loaded.actual_device == "cpu" and loaded.load_seconds > 0
    for _ in range(4):
        registry.release(placement, options)
    assert registry.loaded() == ()


def test_runtime_settings_share_a_model_and_load_settings_do_not():
    registry = ModelRegistry()
    placement = _vad_placement()
    a = registry.acquire(placement, EngineConfig().vad)
    b = registry.acquire(placement, EngineConfig().with_overrides({"vad.threshold": "0.7"}).vad)
    assert a is b  # the threshold is read per frame, not at load: no reload
    tts_a = ModelRegistry.key_for(placement, EngineConfig().tts)
    tts_b = ModelRegistry.key_for(placement, EngineConfig().with_overrides({"tts.speed": "1.5"}).tts)
    assert tts_a == tts_b  # speed travels with each call: the same model serves both
    assert ModelRegistry.key_for(dataclasses.replace(placement, dtype="float16")) != (
        ModelRegistry.key_for(placement))  # a placement field is part of the key
