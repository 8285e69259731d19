"""The errors Parley shows to users: each says what was wrong and what is allowed."""

from __future__ import annotations


class ParleyError(Exception):
    """Base of every error that reaches the user as a message, never as a traceback."""

    exit_code = 2


class ConfigError(ParleyError):
    """A configuration value or key is invalid. The message names the key."""


class DeviceError(ParleyError):
    """A stage was placed on a device that is not present or not supported."""


class MissingDependencyError(ParleyError):
    """An optional package is not installed; the message gives the pip command."""

    def __init__(self, what: str, package: str, extra: str) -> None:
        super().__init__(
            f"{what} needs the Python package '{package}', which is not installed. "
            f"Install it with: pip install 'parley[{extra}]'"
        )
        self.package = package
        self.extra = extra


class AudioInputError(ParleyError):
    """An input recording is missing, unreadable, empty or holds no speech."""


class AudioDeviceError(ParleyError):
    """A sound card could not be opened."""


class ModelError(ParleyError):
    """A model could not be found or loaded (missing folder, missing weights)."""


class NoSpeechError(AudioInputError):
    """The input held audio but no speech: no turn was taken."""

    exit_code = 3
