"""Getting a machine ready: model downloads, the device check, the computer check, the model
manager, load recovery."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.core.window_api import WindowApi
    from app.onboarding.computer_check import ComputerCheck
    from app.onboarding.device_check import AudioDevices, SetupCheck
    from app.onboarding.model_manager import ModelManager
    from app.onboarding.offers import ModelOffers


@dataclass(frozen=True)
class Onboarding:
    """What ``install`` made: File > Models… (``models``), the model offers (``offers``),
    Help > Check microphone and speaker… (``setup_check``), Help > Check this computer…
    (``computer_check``)."""

    models: ModelManager
    offers: ModelOffers
    setup_check: SetupCheck
    computer_check: ComputerCheck


def install(window: WindowApi, *, autoload: bool, audio_devices: AudioDevices | None = None) -> Onboarding:
    """Add File > Models…, Help > Check microphone and speaker… (opened by itself on a
    first start when ``autoload``; its dropdowns list ``audio_devices()``), Help > Check
    this computer…, the status line's "Get larger models…" and the banner's offer of
    another device after a failed load to ``window``."""
    # Imported here, not at the top: one module of the feature (the downloads) can be
    # imported alone.
    from app.onboarding.computer_check import install as install_computer_check
    from app.onboarding.device_check import install as install_device_check
    from app.onboarding.model_manager import install as install_model_manager
    from app.onboarding.offers import ModelOffers

    models = install_model_manager(window)
    offers = ModelOffers(window)
    setup_check = install_device_check(window, autoload=autoload, audio_devices=audio_devices)
    return Onboarding(models, offers, setup_check, install_computer_check(window))
