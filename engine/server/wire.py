"""The Realtime API's server events and resources, as the ``openai`` package models them.

Plain dicts ready for ``json.dumps``: ids, the ``error`` event, the session object (read
back from a unit's ``EngineConfig``), response and item resources. Parley-specific
details ride in a ``parley`` field, which clients that do not know it ignore.
"""

from __future__ import annotations

import secrets

from engine.backends.base import ToolSpec
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
    if config.turns.end_of_turn is EndOfTurn.LEARNED:
        threshold = config.turns.end_of_turn_threshold
        eagerness = "high" if threshold < 0.2 else "low" if threshold > 0.4 else "medium"
        return {"type": "semantic_vad", "eagerness": eagerness, "create_response": True,
                "interrupt_response": config.turns.barge_in is BargeIn.FULL_DUPLEX}
    return {"type": "server_vad", "threshold": config.vad.threshold,
            "silence_duration_ms": config.vad.min_silence_ms,
            "prefix_padding_ms": config.vad.pad_ms, "idle_timeout_ms": None,
            "create_response": True,
            "interrupt_response": config.turns.barge_in is BargeIn.FULL_DUPLEX}


def transcription(config: EngineConfig) -> dict:
    """The session's ``audio.input.transcription``: its ``language`` where one is set;
    none where each turn's is detected (``stt.language`` auto, as OpenAI leaves it out)."""
    out: dict = {"model": "parley"}
    if not config.stt.detects_language:
        out["language"] = config.stt.language
    return out


def session_object(session_id: str, config: EngineConfig, parley: dict, *, speak: bool = True,
                   tools: tuple[ToolSpec, ...] = (), tool_choice: str = "auto") -> dict:
    """The ``session`` of ``session.created`` / ``session.updated``."""
    return {
        "type": "realtime", "object": "realtime.session", "id": session_id, "model": "parley",
        "output_modalities": modalities(speak),
        "instructions": config.llm.system_prompt,
        "max_output_tokens": config.llm.max_new_tokens,
        "audio": {
            "input": {"format": dict(PCM_FORMAT), "noise_reduction": None,
                      "transcription": transcription(config),
                      "turn_detection": turn_detection(config)},
            "output": {"format": dict(PCM_FORMAT), "voice": config.tts.voice,
                       "speed": config.tts.speed},
        },
        "tools": [{"type": "function", "name": t.name, "description": t.description,
                   "parameters": dict(t.parameters)} for t in tools],
        "tool_choice": tool_choice if tool_choice in ("auto", "none", "required")
        else {"type": "function", "name": tool_choice},
        "parley": parley,
    }


def modalities(speak: bool) -> list[str]:
    """``output_modalities``: audio (with its transcript), or text only."""
    return ["audio"] if speak else ["text"]


def user_item(item_id: str, content: list[dict], status: str = "completed") -> dict:
    """A user message item."""
    return {"id": item_id, "object": "realtime.item", "type": "message", "role": "user",
            "status": status, "content": content}


def assistant_item(item_id: str, transcript: str | None, status: str, speak: bool = True) -> dict:
    """The assistant message item a response speaks into: audio plus its transcript, or
    text only."""
    part = ({"type": "output_audio", "transcript": transcript} if speak
            else {"type": "output_text", "text": transcript})
    return {"id": item_id, "object": "realtime.item", "type": "message", "role": "assistant",
            "status": status, "content": [part]}


def function_call_item(item_id: str, call_id: str, name: str, arguments: str, status: str) -> dict:
    """A function call the model made (``arguments``: JSON text)."""
    return {"id": item_id, "object": "realtime.item", "type": "function_call", "status": status,
            "call_id": call_id, "name": name, "arguments": arguments}


def response_object(response_id: str, output: list[dict], status: str, *,
                    reason: str | None = None, error: dict | None = None,
                    parley: dict | None = None, speak: bool = True,
                    metadata: dict | None = None, conversation_id: str | None = None) -> dict:
    """A ``realtime.response`` resource with its ``output`` items (``conversation_id``:
    None for an out-of-band response)."""
    details = None
    if status != "in_progress":
        details = {"type": status, "reason": reason, "error": error}
    out = {"id": response_id, "object": "realtime.response", "status": status,
           "status_details": details, "output": output,
           "output_modalities": modalities(speak),
           "conversation_id": conversation_id,
           "audio": {"output": {"format": dict(PCM_FORMAT)}}, "usage": None, "metadata": metadata}
    if parley is not None:
        out["parley"] = parley
    return out
