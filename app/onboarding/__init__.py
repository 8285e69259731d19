"""Getting a machine ready: model downloads, the device check, the computer check, the model
manager, load recovery."""


def install(window, autoload: bool):
    """Add File > Models…, Help > Check microphone and speaker… (opened by itself on a
    first start when ``autoload``), Help > Check this computer…, the status line's "Get
    larger models…" and the banner's offer of another device after a failed load to
    ``window``; returns the ``ModelOffers``."""
    # Imported here, not at the top: one module of the feature (the downloads) can be
    # imported alone.
    from app.onboarding.computer_check import install as install_computer_check
    from app.onboarding.device_check import install as install_device_check
    from app.onboarding.model_manager import install as install_model_manager
    from app.onboarding.offers import ModelOffers

    install_model_manager(window)
    offers = ModelOffers(window)
    install_device_check(window, autoload)
    install_computer_check(window)
    return offers
