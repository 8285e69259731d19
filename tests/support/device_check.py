"""The models the first-run device check uses, loaded for real."""

from __future__ import annotations

from engine.doctor.device_check import MIC_STAGES, SPEAKER_STAGES
from engine.config import EngineConfig
from engine.runtime.hub import HubStatus
from engine.models.model_registry import ModelRegistry
from engine.models.placement import resolve_placements


def check_models(registry: ModelRegistry) -> dict[str, object]:
    """The VAD, STT and TTS models of the default offline config (no LLM: the check
    does not use one)."""
    config = EngineConfig()
    placements = resolve_placements(config, hub=HubStatus(offline=True))
    return {stage: registry.acquire(placements[stage], config.stage_config(stage))
            for stage in MIC_STAGES + SPEAKER_STAGES}
