"""The Realtime API's server events and resources, as the ``openai`` package models them.

Plain dicts ready for ``json.dumps``: ids, the ``error`` event, the session object (read
back from a unit's ``EngineConfig``), response and item resources. Parley-specific
details ride in a ``parley`` field, which clients that do not know it ignore.
"""

from __future__ import annotations

import secrets

from engine.config import BargeIn, EndOfTurn, EngineConfig
from engine.server.stream_audio import CLIENT_RATE

PCM_FORMAT = {"type": "audio/pcm", "rate": CLIENT_RATE}

# error.type values, as the Realtime API uses them
INVALID_REQUEST = "invalid_request_error"
SERVER_ERROR = "server_error"


def new_id(prefix: str) -> str:
    """A unique id such as ``event_3f9a...``: ``event``, ``resp``, ``item``, ``sess``."""
    return f"{prefix}_{secrets.token_hex(10)}"


def event(kind: str, **fields) -> dict:
    """A server event of type ``kind`` with a fresh ``event_id``."""
    return {"type": kind, "event_id": new_id("event"), **fields}


def error_event(code: str, message: str, *, param: str | None = None,
                client_event_id: str | None = None, kind: str = INVALID_REQUEST) -> dict:
    """The ``error`` event: ``code`` is machine-readable, ``param`` the offending field
    path (``session.audio.input.turn_detection.threshold``), ``event_id`` inside the
    error the client event that caused it."""
    return event("error", error={"type": kind, "code": code, "message": message,
                                 "param": param, "event_id": client_event_id})


def turn_detection(config: EngineConfig) -> dict | None:
    """``audio.input.turn_detection`` for a unit's settings (None: manual commits)."""
    if config.turns.end_of_turn is EndOfTurn.MANUAL:
        return None
    return {"type": "server_vad", "threshold": config.vad.threshold,
            "silence_duration_ms": config.vad.min_silence_ms,
            "prefix_padding_ms": config.vad.pad_ms, "idle_timeout_ms": None,
            "create_response": True,
            "interrupt_response": config.turns.barge_in is BargeIn.FULL_DUPLEX}


def session_object(session_id: str, config: EngineConfig, parley: dict) -> dict:
    """The ``session`` of ``session.created`` / ``session.updated``."""
    return {
        "type": "realtime", "object": "realtime.session", "id": session_id, "model": "parley",
        "output_modalities": ["audio"],
        "instructions": config.llm.system_prompt,
        "max_output_tokens": config.llm.max_new_tokens,
        "audio": {
            "input": {"format": dict(PCM_FORMAT), "noise_reduction": None,
                      "transcription": {"model": "parley"},
                      "turn_detection": turn_detection(config)},
            "output": {"format": dict(PCM_FORMAT), "voice": config.tts.voice,
                       "speed": config.tts.speed},
        },
        "tools": [], "tool_choice": "auto",
        "parley": parley,
    }


def user_item(item_id: str, content: list[dict], status: str = "completed") -> dict:
    """A user message item."""
    return {"id": item_id, "object": "realtime.item", "type": "message", "role": "user",
            "status": status, "content": content}


def assistant_item(item_id: str, transcript: str | None, status: str) -> dict:
    """The assistant message item a response speaks into (audio plus its transcript)."""
    return {"id": item_id, "object": "realtime.item", "type": "message", "role": "assistant",
            "status": status, "content": [{"type": "output_audio", "transcript": transcript}]}


def response_object(response_id: str, item: dict | None, status: str, *,
                    reason: str | None = None, error: dict | None = None,
                    parley: dict | None = None) -> dict:
    """A ``realtime.response`` resource; ``item`` is its one output item, if any."""
    details = None
    if status != "in_progress":
        details = {"type": status, "reason": reason, "error": error}
    out = {"id": response_id, "object": "realtime.response", "status": status,
           "status_details": details, "output": [item] if item else [],
           "output_modalities": ["audio"], "conversation_id": None,
           "audio": {"output": {"format": dict(PCM_FORMAT)}}, "usage": None, "metadata": None}
    if parley is not None:
        out["parley"] = parley
    return out
