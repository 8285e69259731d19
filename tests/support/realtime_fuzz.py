"""Seeded random and malformed Realtime client events, and the checks of what a server
answers: the fuzzing of ``tests/server/test_server_fuzz.py``.

``fixed_cases(limit)`` is every kind of bad input once; ``random_case(rng, known_items)``
one more from a seeded generator. A ``Case`` says what must answer it.
"""

from __future__ import annotations

import base64
import json
import random
from dataclasses import dataclass

from engine.server.server_settings import HARD_LIMIT_FACTOR

ANY = object()  # the error's param is not checked
ITEM_EVENTS = ("conversation.item.create", "conversation.item.retrieve", "conversation.item.delete",
               "conversation.item.truncate")


@dataclass(frozen=True)
class Case:
    """One fuzz message and what must answer it: an error with one of ``codes`` (None:
    any well-formed outcome, error or not) whose param is ``param``, or field beneath."""

    category: str
    payload: str | bytes
    codes: tuple[str, ...] | None = None
    param: object = ANY


# -- the generator -----------------------------------------------------------------------

WRONG_VALUES = [5, -1, 2.5, True, False, "x", "", [], [1, "a"], {}, {"k": 1}, 1e308, 10**30]
KINDS = {"string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,),
         "object": (dict,), "array": (list,)}

#: session.update fields Parley checks, by path, and the JSON kinds each accepts.
SESSION_FIELDS = {
    "session": ("object",), "session.type": ("string",), "session.instructions": ("string",),
    "session.max_output_tokens": ("integer",), "session.temperature": ("number",),
    "session.output_modalities": ("array",), "session.tools": ("array",),
    "session.tool_choice": ("object",), "session.audio": ("object",),
    "session.audio.input": ("object",), "session.audio.input.format": ("object",),
    "session.audio.input.transcription": ("object",),
    "session.audio.input.transcription.language": ("string",),
    "session.audio.input.turn_detection": ("object",),
    "session.audio.input.turn_detection.threshold": ("number",),
    "session.audio.input.turn_detection.silence_duration_ms": ("integer",),
    "session.audio.input.turn_detection.prefix_padding_ms": ("integer",),
    "session.audio.input.turn_detection.interrupt_response": ("boolean",),
    "session.audio.input.turn_detection.create_response": ("boolean",),
    "session.audio.output": ("object",), "session.audio.output.format": ("object",),
    "session.audio.output.voice": ("string",), "session.audio.output.speed": ("number",),
}
OUT_OF_RANGE = {
    "session.max_output_tokens": [0, -3, 10**30], "session.temperature": [-1, 1e9],
    "session.output_modalities": [["video"], [1]], "session.tool_choice": ["sometimes"],
    "session.type": ["transcription", "x"], "session.audio.input.format": [{"type": "audio/pcmu"},
                                                                           {"rate": 8000}],
    "session.audio.input.turn_detection.threshold": [5.0, -1.0, 1e308],
    "session.audio.input.turn_detection.silence_duration_ms": [-5, 10**12],
    "session.audio.input.turn_detection.prefix_padding_ms": [-1, 10**12],
    "session.audio.input.turn_detection.create_response": [False],
    "session.audio.output.speed": [0, -1, 1e308],
    "session.tools": [[5], [{"type": "web"}], [{"name": "a b"}], [{"name": "f"}, {"name": "f"}]],
}
#: response.create bodies that are each refused (a valid one would start a reply here).
BAD_RESPONSES = [5, "x", [1], True, {"instructions": 5}, {"output_modalities": "audio"},
                 {"conversation": "maybe"}, {"max_output_tokens": 0}, {"max_output_tokens": 2.5},
                 {"metadata": {"a": 1}}, {"metadata": 3}, {"input": 5},
                 {"input": [{"type": "item_reference", "id": "item_nope"}]}, {"tools": 5},
                 {"tool_choice": 7}]
BAD_BASE64 = ["%%% not base64 %%%", "AAA", "A", "AAAA\nAAAA", "ÄÄÄÄ", "-_-_", "\ud800\udc00AA"]
ODD_PCM = [b"\x00", b"\x00\x01\x02", b"\x01" * 4801]


def dumps(obj) -> str:
    return json.dumps(obj, allow_nan=True)


def nested(depth: int, leaf=1, kind: str = "list"):
    value = leaf
    for _ in range(depth):
        value = [value] if kind == "list" else {"a": value}
    return value


def at_path(path: str, value) -> dict:
    """A session.update event with ``value`` at ``path`` (``session.audio.output.speed``)."""
    keys = path.split(".")[1:]
    if not keys:
        return {"type": "session.update", "session": value}
    body = value
    for key in reversed(keys):
        body = {key: body}
    return {"type": "session.update", "session": body}


def _wrong_for(kinds: tuple[str, ...]) -> list:
    ok = tuple(t for k in kinds for t in KINDS[k])
    def accepted(v) -> bool:
        if isinstance(v, bool):
            return "boolean" in kinds
        return isinstance(v, ok)
    return [v for v in WRONG_VALUES if not accepted(v)]


def _append(audio) -> str:
    return dumps({"type": "input_audio_buffer.append", "audio": audio})


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def sized_append(size: int) -> str:
    """An append of silence whose message is ``size`` bytes (within a few)."""
    head = len(_append(""))
    pcm = bytes(((size - head) * 3 // 4) // 2 * 2)
    return _append(_b64(pcm)) + " " * max(0, size - head - len(_b64(pcm)))


def fixed_cases(limit: int) -> list[Case]:
    """Every kind of bad input once, in a fixed order; ``limit``: the server's
    soft message limit (bytes)."""
    cases = [Case("non_json", text, ("invalid_json",), None) for text in
             ("{this is not json", "", " ", "null", "[]", "42", '"text"', "{'a': 1}", "\x00",
              '{"type": "session.update"', "[" * 5000, '{"a":' * 5000)]
    cases += [Case("binary", data, ("invalid_json",), None) for data in
              (b"\x00\x01", dumps({"type": "input_audio_buffer.commit"}).encode(), b"")]
    cases += [Case("unknown_type", dumps({"type": kind}), ("unknown_event_type",), "type") for kind in
              ("conversation.teleport", "", "Session.Update", "response.create ", "x" * 5000,
               "\ud800", "input_audio_buffer.append\u0000")]
    cases += [Case("bad_type", dumps({"type": kind}), ("invalid_value",), "type")
              for kind in (5, None, [], {}, True)]
    cases += [Case("bad_type", dumps({"event": "session.update"}), ("invalid_value",), "type"),
              Case("bad_event_id", dumps({"type": "input_audio_buffer.clear", "event_id": 5}),
                   ("invalid_value",), "event_id")]
    for path, kinds in SESSION_FIELDS.items():
        for value in _wrong_for(kinds) + OUT_OF_RANGE.get(path, []):
            cases.append(Case("session_field", dumps(at_path(path, value)), ("invalid_value", "unsupported"),
                              path))
    cases += [Case("response_create", dumps({"type": "response.create", "response": body}),
                   ("invalid_value", "unsupported", "item_not_found"), "response")
              for body in BAD_RESPONSES]
    cases += [Case("append_type", _append(value), ("invalid_value",), "audio")
              for value in (None, 5, [], {}, True, ["AAAA"])]
    cases += [Case("append_base64", _append(text), ("invalid_audio",), "audio") for text in BAD_BASE64]
    cases += [Case("append_odd", _append(_b64(data)), ("invalid_audio",), "audio") for data in ODD_PCM]
    cases += [Case("size", sized_append(size), None) for size in (limit - 64, limit)]
    cases += [Case("size", sized_append(size), ("message_too_large",), None)
              for size in (limit + 1, 2 * limit, HARD_LIMIT_FACTOR * limit - 64)]
    cases += [Case("nested", dumps(event), None) for event in (
        {"type": "session.update", "session": {"bogus": nested(900)}},
        {"type": "session.update", "session": {"instructions": nested(500, "x", "dict")}},
        {"type": "session.update", "session": {"output_modalities": nested(900)}},
        {"type": "session.update", "session": {"tools": nested(900)}},
        {"type": "input_audio_buffer.append", "audio": nested(900)},
        {"type": "conversation.item.create", "item": nested(900, kind="dict")},
        {"type": "conversation.item.create", "item": {"type": "message", "role": "user",
                                                      "content": nested(900)}},
        {"type": "response.create", "response": {"metadata": nested(900, kind="dict")}},
        {"type": "fuzz.deep", "x": nested(900)})]
    cases += [Case("unknown_fields", dumps(event), None) for event in (
        {"type": "input_audio_buffer.clear", "bogus": 1, "event_id": "evt_x"},
        {"type": "input_audio_buffer.commit", "audio": "AAAA", "extra": {"a": [1]}},
        {"type": "session.update", "session": {"bogus": 1, "tracing": "auto", "modalities": ["audio"]}},
        {"type": "input_audio_buffer.append", "audio": _b64(bytes(960)), "bogus": None})]
    return cases


#: A valid item of each kind Parley takes; the fuzzer breaks one field at a time.
VALID_ITEMS = {
    "message": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
    "function_call": {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"},
    "function_call_output": {"type": "function_call_output", "call_id": "call_1", "output": "42"},
}
ITEM_VALUES = [*WRONG_VALUES, None, "robot", "{", "x" * 65, "\ud800", nested(50), nested(50, kind="dict")]


def _broken_item(rng: random.Random) -> dict:
    kind = rng.choice(list(VALID_ITEMS))
    item = json.loads(json.dumps(VALID_ITEMS[kind]))
    if rng.random() < 0.25:
        return item  # a valid one: it is added, and later events find it
    fields = [*item, "id"] + (["content[0]", "content[0].type", "content[0].text"] if kind == "message"
                              else [])
    field = rng.choice(fields)
    value = rng.choice(ITEM_VALUES)
    if field.startswith("content[0]"):
        part = item["content"][0]
        if field == "content[0]":
            item["content"][0] = value
        else:
            part[field.split(".")[1]] = value
    else:
        item[field] = value
    return item


def _item_case(rng: random.Random, known: list[str]) -> Case:
    """An item event with known, unknown, deleted, out-of-order or malformed ids and
    fields: either its proper event or a spec error may answer it."""
    kind = rng.choice(ITEM_EVENTS)
    pool = [*known[-20:], "item_nope", "", "x" * 100, "\ud800", 5, None, [], {}]
    some_id = rng.choice(pool)
    if kind == "conversation.item.create":
        item = _broken_item(rng)
        if rng.random() < 0.5:  # a fresh id, or one already taken
            item["id"] = rng.choice([f"item_fuzz{rng.randrange(1000)}", *known[-5:]])
        event = {"type": kind, "item": item}
        after = rng.choice([some_id, "root", "item_later"])
        if rng.random() < 0.5:
            event["previous_item_id"] = after
    elif kind == "conversation.item.truncate":
        event = {"type": kind, "item_id": some_id, "content_index": rng.choice([0, -1, "0", 9, None]),
                 "audio_end_ms": rng.choice([0, -5, 1.5, "10", 10**12, None])}
    else:
        event = {"type": kind, "item_id": some_id}
    if rng.random() < 0.2:
        event.pop("item_id", None)
    return Case("item", dumps(event), None)


def random_case(rng: random.Random, known: list[str]) -> Case:
    """One seeded random fuzz message."""
    roll = rng.random()
    if roll < 0.3:
        return _item_case(rng, known)
    if roll < 0.5:
        path, kinds = rng.choice(list(SESSION_FIELDS.items()))
        value = rng.choice(_wrong_for(kinds) + OUT_OF_RANGE.get(path, []))
        return Case("session_field", dumps(at_path(path, value)), ("invalid_value", "unsupported"), path)
    if roll < 0.6:
        return Case("response_create", dumps({"type": "response.create",
                                               "response": rng.choice(BAD_RESPONSES)}),
                    ("invalid_value", "unsupported", "item_not_found"), "response")
    if roll < 0.7:
        text = "".join(rng.choice("AZaz09+/=%-_ \n") for _ in range(rng.randrange(1, 64)))
        return Case("append_random", _append(text), None)
    if roll < 0.8:
        noise = bytes(rng.getrandbits(8) & 0x03 for _ in range(2 * rng.randrange(1, 480)))
        odd = rng.random() < 0.3
        return Case("append_noise", _append(_b64(noise[:-1] if odd else noise)),
                    ("invalid_audio",) if odd else None, "audio" if odd else ANY)
    if roll < 0.88:
        kind = rng.choice(["input_audio_buffer.commit", "input_audio_buffer.clear", "response.cancel"])
        event = {"type": kind, **rng.choice([{}, {"bogus": 1}, {"response_id": "resp_nope"}])}
        return Case("control", dumps(event), None)
    if roll < 0.94:
        text = "".join(chr(rng.randrange(32, 0x2FF)) for _ in range(rng.randrange(0, 40)))
        return Case("non_json", "{" + text, ("invalid_json",), None)
    if roll < 0.97:
        return Case("binary", rng.randbytes(rng.randrange(0, 64)), ("invalid_json",), None)
    return Case("unknown_type", dumps({"type": "fuzz." + str(rng.random())}), ("unknown_event_type",),
                "type")


# -- checking what came back -------------------------------------------------------------

def check_event(event: dict) -> None:
    """Every server event: a type and an event id; an error, fully formed."""
    assert isinstance(event.get("type"), str) and event["type"], event
    assert isinstance(event.get("event_id"), str), event
    if event["type"] != "error":
        return
    error = event.get("error")
    assert isinstance(error, dict), event
    assert error.get("type") == "invalid_request_error", event  # never a server_error
    assert isinstance(error.get("code"), str) and error["code"], event
    assert isinstance(error.get("message"), str) and error["message"].strip(), event
    assert "Traceback" not in error["message"], event
    assert "param" in error and (error["param"] is None or isinstance(error["param"], str)), event


def param_matches(actual: str | None, expected: object) -> bool:
    if expected is ANY:
        return True
    if expected is None or actual is None:
        return actual == expected
    assert isinstance(expected, str)
    return actual == expected or actual.startswith((expected + ".", expected + "["))


