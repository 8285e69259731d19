"""A stored conversation as people read it: Markdown, or JSON for other programs.

``HistoryStore.export`` (``parley-cli history export``, the app's history browser) and
``parley-cli history show`` write what these functions return.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from engine.history.database import SCHEMA_VERSION, HistoryError
from engine.pipeline.metrics import TurnKind

if TYPE_CHECKING:
    from engine.history.store import StoredConversation

EXPORT_FORMATS = ("md", "json")


def require_export_format(format: str) -> None:
    """HistoryError unless ``format`` is one of ``EXPORT_FORMATS``."""
    if format not in EXPORT_FORMATS:
        raise HistoryError(f"export format {format!r} is not known; use one of "
                           f"{', '.join(EXPORT_FORMATS)}")


def conversation_text(conversation: StoredConversation, format: str = "md") -> str:
    """The conversation as Markdown (``md``) or JSON (``json``) text."""
    require_export_format(format)
    if format == "json":
        return json.dumps({"format": "parley-history", "version": SCHEMA_VERSION,
                           **conversation.as_dict()}, indent=2, ensure_ascii=False) + "\n"
    return conversation_markdown(conversation)


def local_time(stamp: str, seconds: bool = True) -> str:
    """A stored UTC timestamp in local time with its offset, for people."""
    moment = datetime.fromisoformat(stamp).astimezone()
    text = moment.strftime("%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M")
    return f"{text} {moment.strftime('%z')[:3]}:{moment.strftime('%z')[3:]}"


def short_model(model: str) -> str:
    """A model as people read it: a path keeps its last two parts (the package's folder and
    the file), a hub name stays whole."""
    parts = Path(model).parts
    return "/".join(parts[-2:]) if len(parts) > 2 or Path(model).is_absolute() else model


def describe_placement(placement: dict) -> str:
    """``stt: faster-whisper tiny.en on cpu`` from a ``placement_dict``."""
    device = placement.get("actual_device") or placement.get("device", "?")
    return (f"{placement.get('stage', '?')}: {placement.get('backend', '?')} "
            f"{short_model(str(placement.get('model', '?')))} on {device}")


def _models(placements: list[dict]) -> list[str]:
    return [f"  - {describe_placement(p)}" for p in placements]


def conversation_markdown(conversation: StoredConversation) -> str:
    """A conversation as a Markdown document: a header, then each turn's words."""
    title = conversation.title or f"Conversation {conversation.id}"
    lines = [f"# {title}", "",
             f"- Conversation: {conversation.id}",
             f"- Started: {local_time(conversation.started_at)}",
             f"- Source: {conversation.source}"]
    if conversation.placements:
        lines += ["- Models:", *_models(conversation.placements)]
    lines.append("")
    shown = conversation.placements
    for turn in conversation.turns:
        lines += [f"## Turn {turn.turn_id} · {local_time(turn.finished_at)}", ""]
        if turn.placements and turn.placements != shown:
            lines += ["Models from this turn on:", "", *(m[2:] for m in _models(turn.placements)), ""]
            shown = turn.placements
        you = "**You (typed):**" if turn.kind is TurnKind.TYPED else "**You:**"
        lines += [you, "", turn.transcript or "*(no words recognised)*", "",
                  "**Parley:**", "", turn.reply or "*(no reply)*", ""]
        notes = []
        if turn.cancelled:
            notes.append("cut off")
        v2v = turn.figures.get("voice_to_voice_s")
        if v2v is not None:
            notes.append(f"voice-to-voice {v2v * 1000:.0f} ms")
        if notes:
            lines += [f"*{', '.join(notes)}*", ""]
    return "\n".join(lines).rstrip() + "\n"

