"""The waiting room (``--queue N``): a client that connects while every unit is busy is
admitted and waits, first come first served, and gets its session when a unit frees;
one whose wait runs out gets ``queue_timeout``; a full line still answers 503.

The line and the held events are tested alone with a fake clock; then two in-process
servers with one pipeline each, on the offline models, with real WebSocket clients.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from engine.cli.main import build_parser
from engine.cli.serve import settings_from_args
from engine.errors import ConfigError
from engine.server.runner import ServerThread
from engine.server.server_settings import ServerSettings
from engine.server.waiting_room import HeldEvents, WaitingRoom
from tests.support.server import append_event, recv_json, recv_until, text_item

QUIET_S = 1.0  # how long a waiting client is watched for events it must not get


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


# ---------------------------------------------------------------------- the line alone
def test_the_line_is_first_come_first_served_and_bounded():
    clock = FakeClock()
    room = WaitingRoom(3, timeout_s=60.0, clock=clock)
    a, b, c = (room.join(name) for name in ("a", "b", "c"))
    assert a is not None and b is not None and c is not None
    assert room.join("d") is None  # full
    assert room.first() is a and [room.position(t) for t in (a, b, c)] == [1, 2, 3]
    room.leave(b)  # a client in the middle hung up
    assert room.position(c) == 2 and len(room) == 2
    room.leave(b)  # idempotent
    room.leave(a)  # the first got a unit
    assert room.first() is c and room.position(a) is None
    assert room.join("e") is not None and room.join("f") is not None
    assert room.join("g") is None


def test_a_room_without_places_takes_nobody():
    assert WaitingRoom(0).join("a") is None
    with pytest.raises(ValueError):
        WaitingRoom(-1)
    with pytest.raises(ValueError):
        WaitingRoom(1, timeout_s=0)


def test_waits_are_timed_and_shown():
    clock = FakeClock()
    room = WaitingRoom(4, timeout_s=30.0, clock=clock)
    first = room.join("127.0.0.1:5001")
    clock.now += 12.5
    second = room.join("127.0.0.1:5002")
    clock.now += 5.0
    assert first is not None and second is not None
    assert room.waited(first) == pytest.approx(17.5) and room.time_left(first) == pytest.approx(12.5)
    assert room.status() == {"capacity": 4, "timeout_s": 30.0, "length": 2, "waiting": [
        {"position": 1, "client": "127.0.0.1:5001", "waited_s": 17.5},
        {"position": 2, "client": "127.0.0.1:5002", "waited_s": 5.0}]}
    clock.now += 12.5
    assert room.time_left(first) <= 0 < room.time_left(second)
    timeout = room.timed_out(first, units=2)
    assert timeout.code == "queue_timeout"
    assert "waited 30 s for a free pipeline (all 2 in use)" in timeout.message


def test_held_events_keep_session_events_in_order_and_drop_audio():
    held = HeldEvents(max_bytes=10_000, max_events=3)
    update = json.dumps({"type": "session.update", "session": {"instructions": "Be brief."}})
    item = json.dumps(text_item("Hello"))
    assert held.hold(update)
    assert held.hold(append_event(bytes(960)))
    assert held.hold(json.dumps({"type": "input_audio_buffer.commit"}))
    assert held.hold(item)
    assert held.hold("not json")  # kept: the session answers it with its own error
    assert held.messages == [update, item, "not json"] and held.dropped_audio == 2
    assert not held.hold(json.dumps({"type": "response.create"}))  # a fourth: too many
    assert held.hold(append_event(bytes(960)))  # audio is still dropped, not refused
    assert "more than 3 events" in held.too_many()


def test_held_events_are_bounded_in_bytes():
    held = HeldEvents(max_bytes=100)
    assert held.hold(json.dumps({"type": "session.update", "session": {}}))
    assert not held.hold(json.dumps(text_item("x" * 100)))
    assert len(held.messages) == 1


def test_queue_flags_and_their_checks():
    args = build_parser().parse_args(["serve", "--queue", "3", "--queue-timeout-s", "45"])
    settings = settings_from_args(args, {})
    assert (settings.queue, settings.queue_timeout_s) == (3, 45.0)
    defaults = settings_from_args(build_parser().parse_args(["serve"]), {})
    assert (defaults.queue, defaults.queue_timeout_s) == (0, 120.0)
    for wrong, flag in ((ServerSettings(queue=-1), "--queue"), (ServerSettings(queue=1001), "--queue"),
                        (ServerSettings(queue_timeout_s=0.5), "--queue-timeout-s"),
                        (ServerSettings(queue_timeout_s=float("nan")), "--queue-timeout-s")):
        with pytest.raises(ConfigError, match=flag):
            wrong.check()


# ---------------------------------------------------------------------- a real server

@pytest.fixture(scope="module")
def queued(server_engine):
    """One pipeline (unit 0) and two places in line, waits of up to a minute."""
    server = ServerThread(server_engine, ServerSettings(port=0, num_pipelines=1, queue=2,
                                                        queue_timeout_s=60.0))
    server.start()
    yield server
    assert server.stop(20.0), "the server thread did not stop"


@pytest.fixture(scope="module")
def impatient(server_engine):
    """One pipeline (unit 1) and one place in line, waits of one second."""
    server = ServerThread(server_engine, ServerSettings(port=0, num_pipelines=1, queue=1,
                                                        queue_timeout_s=1.0), first_unit=1)
    server.start()
    yield server
    assert server.stop(20.0), "the server thread did not stop"


def ws(url: str):
    return connect(url, proxy=None, max_size=None)


async def pool_when(server: ServerThread, check, timeout: float = 15.0) -> dict:
    """Poll the pool (as ``GET /v1/pool`` shows it) until ``check(pool)``."""
    deadline = time.monotonic() + timeout
    while True:
        pool = await asyncio.to_thread(server.pool_status)
        if check(pool):
            return pool
        assert time.monotonic() < deadline, pool
        await asyncio.sleep(0.05)


def idle(pool: dict) -> bool:
    return all(u["state"] == "free" for u in pool["units"]) and pool["queue"]["length"] == 0


def waiting(n: int):
    return lambda pool: pool["queue"]["length"] == n


async def silent(conn, seconds: float = QUIET_S) -> bool:
    """True if ``conn`` gets no event within ``seconds``."""
    try:
        await asyncio.wait_for(conn.recv(), seconds)
    except TimeoutError:
        return True
    return False


@pytest.mark.slow
def test_a_waiting_client_gets_its_session_when_the_unit_frees_in_order(queued):
    async def run():
        await pool_when(queued, idle)
        first = await ws(queued.url)
        assert (await recv_json(first))["type"] == "session.created"
        # The second is admitted (no 503) and says what it wants before its session exists.
        second = await ws(queued.url)
        await second.send(json.dumps({"type": "session.update",
                                      "session": {"instructions": "You are Juniper."}}))
        await second.send(append_event(bytes(4800)))  # no pipeline listens yet: dropped
        await second.send(json.dumps(text_item("Say hello to me.")))
        await second.send(json.dumps({"type": "response.create"}))
        third = await ws(queued.url)  # the last place in line
        lined_up = await pool_when(queued, waiting(2))
        with pytest.raises(InvalidStatus) as full:  # the line is full: refused as before
            async with ws(queued.url):
                pass
        quiet = await silent(second)
        # The first leaves: the second (not the third) gets the unit.
        await first.close()
        created, before = await recv_until(second, "session.created", 30)
        updated = await recv_json(second)
        still = await pool_when(queued, waiting(1))
        done, seen = await recv_until(second, "response.done", 180)
        third_quiet = await silent(third, 0.2)
        await second.close()
        third_created = await recv_json(third, 30)
        await third.close()
        return (lined_up, full.value.response, quiet, created, before, updated, still, done,
                seen, third_quiet, third_created)

    (lined_up, full, quiet, created, before, updated, still, done, seen, third_quiet,
     third_created) = asyncio.run(asyncio.wait_for(run(), 300))
    queue = lined_up["queue"]
    assert [u["state"] for u in lined_up["units"]] == ["busy"]
    assert (queue["capacity"], queue["timeout_s"]) == (2, 60.0)
    assert [w["position"] for w in queue["waiting"]] == [1, 2]
    assert all(w["client"].startswith("127.0.0.1:") and w["waited_s"] >= 0 for w in queue["waiting"])
    assert queue["waiting"][0]["waited_s"] >= queue["waiting"][1]["waited_s"]
    assert full.status_code == 503 and int(full.headers["Retry-After"]) >= 1
    error = json.loads(full.body)["error"]
    assert error["code"] == "session_limit_reached" and "the queue is full (2 waiting)" in error["message"]
    assert quiet, "a waiting client got an event before its session"
    assert before == []  # session.created is the first thing it hears
    parley = created["session"]["parley"]
    assert parley["queue"]["waited_s"] >= QUIET_S and parley["queue"]["dropped_audio_events"] == 1
    assert updated["type"] == "session.updated"  # its held session.update, applied
    assert updated["session"]["instructions"] == "You are Juniper."
    assert still["queue"]["waiting"][0]["position"] == 1  # the third moved up
    assert done["response"]["status"] == "completed"
    transcript = "".join(e["delta"] for e in seen if e["type"] == "response.output_audio_transcript.delta")
    assert transcript.strip() and not [e for e in seen if e["type"] == "error"]
    assert third_quiet and third_created["type"] == "session.created"


@pytest.mark.slow
def test_a_client_that_hangs_up_while_waiting_leaves_the_line(queued):
    async def run():
        await pool_when(queued, idle)
        async with ws(queued.url) as first:
            await recv_json(first)
            async with ws(queued.url):
                await pool_when(queued, waiting(1))
            emptied = await pool_when(queued, waiting(0))
        freed = await pool_when(queued, idle)
        return emptied, freed

    emptied, freed = asyncio.run(asyncio.wait_for(run(), 60))
    assert [u["state"] for u in emptied["units"]] == ["busy"]  # nobody took the unit for it
    assert freed["queue"]["waiting"] == []


@pytest.mark.slow
def test_a_wait_that_runs_out_gets_queue_timeout_and_1013(impatient):
    async def run():
        await pool_when(impatient, idle)
        async with ws(impatient.url) as first:
            await recv_json(first)
            started = time.monotonic()
            async with ws(impatient.url) as second:
                error = await recv_json(second, 30)
                waited = time.monotonic() - started
                with pytest.raises(ConnectionClosed) as closed:
                    await recv_json(second, 10)
            after = await pool_when(impatient, waiting(0))
        return error, waited, closed.value.rcvd, after

    error, waited, close, after = asyncio.run(asyncio.wait_for(run(), 60))
    assert error["type"] == "error"
    assert error["error"]["code"] == "queue_timeout"
    assert "waited 1 s for a free pipeline (all 1 in use)" in error["error"]["message"]
    assert 0.9 <= waited < 10
    assert close is not None and close.code == 1013
    assert [u["state"] for u in after["units"]] == ["busy"]  # the first kept its unit


@pytest.mark.slow
def test_a_client_that_asks_is_told_its_place_as_it_moves_up(queued):
    """Parley's web page asks (``?parley_queue_events=1``) and shows its place in line."""
    async def run():
        await pool_when(queued, idle)
        asking = queued.url + "?parley_queue_events=1"
        first = await ws(queued.url)
        await recv_json(first)
        second = await ws(asking)
        second_told = await recv_json(second)
        third = await ws(asking)
        third_told = [await recv_json(third)]
        await second.close()  # the one ahead hangs up: the third moves up
        third_told.append(await recv_json(third))
        await first.close()
        created = await recv_json(third, 30)
        await third.close()
        return second_told, third_told, created

    second_told, third_told, created = asyncio.run(asyncio.wait_for(run(), 60))
    assert second_told["type"] == "parley.queue.waiting"
    assert (second_told["position"], second_told["length"], second_told["timeout_s"]) == (1, 1, 60.0)
    assert [(e["type"], e["position"]) for e in third_told] == [("parley.queue.waiting", 2),
                                                               ("parley.queue.waiting", 1)]
    assert created["type"] == "session.created"


@pytest.mark.slow
def test_a_unit_that_fails_to_start_for_a_waiting_client_is_an_error_event(queued, monkeypatch):
    async def run():
        await pool_when(queued, idle)
        first = await ws(queued.url)
        await recv_json(first)
        second = await ws(queued.url)
        await pool_when(queued, waiting(1))

        def broken(*_args):
            raise RuntimeError("no memory for another unit")

        monkeypatch.setattr(queued.server.pool, "claim", broken)
        await first.close()
        error = await recv_json(second, 30)
        with pytest.raises(ConnectionClosed) as closed:
            await recv_json(second, 10)
        monkeypatch.undo()
        return error, closed.value.rcvd, await pool_when(queued, idle)

    error, close, after = asyncio.run(asyncio.wait_for(run(), 60))
    assert (error["type"], error["error"]["type"], error["error"]["code"]) == \
        ("error", "server_error", "pipeline_start_failed")
    assert "no memory" not in error["error"]["message"]  # the reason stays in the server's log
    assert close is not None and close.code == 1011
    assert after["queue"]["waiting"] == []


@pytest.mark.slow
def test_stopping_the_server_closes_waiting_clients_too(server_engine):
    server = ServerThread(server_engine, ServerSettings(port=0, num_pipelines=1, queue=1),
                          first_unit=2)
    server.start()

    async def run():
        first = await ws(server.url)
        await recv_json(first)
        second = await ws(server.url)
        await pool_when(server, waiting(1))
        stopped = await asyncio.to_thread(server.stop, 20.0)
        with pytest.raises(ConnectionClosed) as closed:
            await recv_json(second, 10)
        return stopped, closed.value.rcvd

    try:
        stopped, close = asyncio.run(asyncio.wait_for(run(), 60))
    finally:
        server.stop(20.0)
    assert stopped and close is not None and close.code == 1001
    assert server.pool_status()["queue"]["waiting"] == []
    assert [u["state"] for u in server.pool_status()["units"]] == ["free"]
