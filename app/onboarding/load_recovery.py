"""After a model failed to load: which other devices could take that stage.

A ``ModelLoadError`` names the stage, backend and device that failed. The devices worth
offering instead are those discovery found usable on which that backend runs, the CPU
first (the floor every local backend but MLX's runs on), the failed device never.
"""

from __future__ import annotations

from engine.errors import ParleyError
from engine.runtime.failures import ModelLoadError


def other_devices(error: ModelLoadError, devices, backends) -> list[str]:
    """Config strings of the devices that could load ``error.stage`` instead; may be empty.

    ``devices``: discovery's DeviceInfo list; ``backends``: the BackendRegistry.
    """
    try:
        kinds = set(backends.get(error.stage, error.backend).devices)
    except ParleyError:  # a backend the registry does not know: nothing to offer
        return []
    found = [str(d.device) for d in devices
             if d.available and d.device.kind in kinds and d.device.kind != "remote"
             and str(d.device) != error.device]
    return sorted(found, key=lambda name: name != "cpu")
