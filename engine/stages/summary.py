"""The summary of the turns a prompt no longer keeps: the request the LLM stage sends
between turns, and the summary it keeps from the reply.

Written for the smallest model Parley ships, SmolLM2-135M, and checked by eye on real
conversations: asked to rewrite a whole summary with the new turns in it, it echoed the
instructions or wandered off; asked for a note about one exchange after two worked
examples, it mostly writes a usable sentence ("The user lives in Berlin and has a dog
named Rex."; now and then one made up, or none: that turn is left out). So the summary
grows by one note per turn that falls out of the prompt (the previous summary plus the
new note), each note capped at ``NOTE_TOKENS`` and cut to its first sentence, and the
whole kept under ``SUMMARY_CHARS`` (the first note, where a conversation usually says
who and what it is about, and the latest ones).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from engine.backends.base import ChatMessage
from engine.pipeline.chat_history import HistoryItem, ItemKind

#: The token cap of one note (a sentence; the model's text after it is dropped).
NOTE_TOKENS = 40
#: The most characters a summary keeps.
SUMMARY_CHARS = 600
#: The most characters of one item a request quotes (a long story is the gist).
_ITEM_CHARS = 300

_INSTRUCTION = "Write a short note about each exchange."
# Two worked examples: a fact the user told, and a question with its answer.
_EXAMPLES = ("User: I live in Oslo and I have a cat.\nAssistant: Oslo is a beautiful city!\n"
             "Note: The user lives in Oslo and has a cat.\n\n"
             "User: Which is the tallest mountain?\nAssistant: Mount Everest is the tallest mountain.\n"
             "Note: The user asked about the tallest mountain: Mount Everest.\n\n")
# Where the model goes on to make up the next exchange.
_RUN_ON = re.compile(r"\b(?:Note|User|Assistant)\s*:", re.IGNORECASE)
_SENTENCE_END = re.compile(r"[.!?…](?=\s|$)")


def note_messages(items: Iterable[HistoryItem]) -> list[ChatMessage]:
    """The request for one note about the exchange ``items`` hold (a user turn and what
    followed it)."""
    lines = [line for item in items if (line := _line(item))]
    return [{"role": "user", "content": f"{_INSTRUCTION}\n\n{_EXAMPLES}" + "\n".join(lines)
             + "\nNote:"}]


def _line(item: HistoryItem) -> str:
    text = " ".join(item.text.split())[:_ITEM_CHARS]
    if item.kind is ItemKind.USER:
        return f"User: {text}"
    if item.kind is ItemKind.ASSISTANT:
        return f"Assistant: {text}" if text else ""
    if item.kind is ItemKind.FUNCTION_CALL:
        return f"Assistant: (used the tool {item.name})"
    return f"Assistant: (the tool answered: {text})"


def clean_note(text: str) -> str:
    """The note kept from the model's reply: its first sentence, before any exchange it
    went on to make up, on one line."""
    text = _RUN_ON.split(" ".join(text.replace("*", " ").split()), maxsplit=1)[0].strip()
    end = _SENTENCE_END.search(text)
    return text[:end.end()] if end else text


def grow_summary(previous: str, note: str) -> str:
    """The previous summary plus ``note`` (unless it has it already), kept under
    ``SUMMARY_CHARS``: past it, the notes after the first are dropped oldest first."""
    notes = _notes(previous)
    if note and note not in notes:  # a small model may write the same note twice
        notes.append(note)
    while len(notes) > 2 and len(" ".join(notes)) > SUMMARY_CHARS:
        del notes[1]
    return " ".join(notes)[:SUMMARY_CHARS]


def _notes(summary: str) -> list[str]:
    """A summary's notes (its sentences)."""
    out, start = [], 0
    for end in _SENTENCE_END.finditer(summary):
        out.append(summary[start:end.end()].strip())
        start = end.end()
    rest = summary[start:].strip()
    return [n for n in (*out, rest) if n]
