"""The checks every client event's fields go through.

Every problem is a ``ClientError`` whose ``param`` is the path of the offending field as
the client wrote it (``session.audio.input.turn_detection.threshold``), so the ``error``
event can point at it. ``session.update`` is read by ``engine.server.session_update``,
items by ``engine.server.items``, ``response.create`` by ``engine.server.response_create``.
"""

from __future__ import annotations

from typing import Any

from engine.server.stream_audio import CLIENT_RATE

INVALID_VALUE = "invalid_value"
UNSUPPORTED = "unsupported"


class ClientError(Exception):
    """A client event Parley refuses; becomes an ``error`` event."""

    def __init__(self, code: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.param = param


def _type_name(value: Any) -> str:
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string",
            list: "an array", dict: "an object", type(None): "null"}.get(type(value), type(value).__name__)


def expect(value: Any, kind: str, param: str) -> Any:
    """``value`` if it is of ``kind`` (string, integer, number, boolean, object, array);
    else an ``invalid_value`` ClientError naming ``param``."""
    ok = {
        "string": isinstance(value, str),
        "integer": isinstance(value, int) and not isinstance(value, bool),
        "number": isinstance(value, int | float) and not isinstance(value, bool),
        "boolean": isinstance(value, bool),
        "object": isinstance(value, dict),
        "array": isinstance(value, list),
    }[kind]
    if not ok:
        article = "an" if kind[0] in "aeiou" else "a"
        raise ClientError(INVALID_VALUE, f"'{param}' must be {article} {kind}; got {_type_name(value)}",
                          param)
    return value


def _unsupported(param: str, what: str) -> ClientError:
    return ClientError(UNSUPPORTED, f"'{param}': {what}", param)


def check_format(value: Any, param: str) -> None:
    """Only PCM16 at 24 kHz: Parley neither decodes nor encodes G.711."""
    fmt = expect(value, "object", param)
    kind = fmt.get("type", "audio/pcm")
    if kind != "audio/pcm":
        raise _unsupported(f"{param}.type", f"Parley speaks audio/pcm (24 kHz PCM16) only; got {kind!r}")
    rate = fmt.get("rate", CLIENT_RATE)
    if rate != CLIENT_RATE:
        raise _unsupported(f"{param}.rate", f"audio/pcm is 24000 Hz; got {rate!r}")
