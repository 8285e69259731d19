"""TurnControl (generations, per-turn and global cancels) and EventHold (held output)."""

from __future__ import annotations

import threading
import time

from engine.pipeline.control import CancelReason, EventHold, TurnControl


def _join(thread: threading.Thread) -> None:
    thread.join(10)
    assert not thread.is_alive(), f"{thread.name} did not finish"


# ---------------------------------------------------------------- TurnControl


def test_generation_starts_at_zero_and_every_cancel_bumps_it():
    control = TurnControl()
    assert control.generation == 0
    assert control.cancel_turn(1, CancelReason.REOPENED) == 1 == control.generation
    assert control.cancel_all(1, CancelReason.BARGE_IN) == 2 == control.generation
    assert control.cancel_turn(3, CancelReason.REOPENED) == 3 == control.generation


def test_nothing_is_stale_before_a_cancel():
    control = TurnControl()
    assert control.floor(7) == 0
    assert not control.is_stale(7, 0)


def test_cancel_turn_drops_only_that_turns_older_work():
    control = TurnControl()
    old = control.generation
    new = control.cancel_turn(2, CancelReason.REOPENED)
    assert control.is_stale(2, old)
    assert not control.is_stale(2, new)  # the redone turn's new work is wanted
    assert not control.is_stale(1, old)  # an earlier turn's reply plays on
    assert not control.is_stale(3, old)
    assert control.floor(2) == new and control.floor(1) == 0


def test_cancel_all_drops_every_turn_in_flight():
    control = TurnControl()
    old = control.generation
    new = control.cancel_all(5, CancelReason.BARGE_IN)
    for turn in (1, 5, 6, 1000):
        assert control.is_stale(turn, old), turn
        assert not control.is_stale(turn, new), turn
        assert control.floor(turn) == new


def test_floors_combine_a_turn_cancel_after_a_global_one_and_back():
    control = TurnControl()
    g0 = control.generation
    g1 = control.cancel_all(1, CancelReason.BARGE_IN)
    g2 = control.cancel_turn(2, CancelReason.REOPENED)
    assert control.is_stale(2, g1) and not control.is_stale(2, g2)
    assert control.is_stale(3, g0) and not control.is_stale(3, g1)  # only the global floor
    g3 = control.cancel_all(2, CancelReason.NEW_CONVERSATION)
    assert control.floor(2) == g3  # the global floor now tops the turn's own
    assert control.is_stale(2, g2) and not control.is_stale(2, g3)


def test_on_cancel_callbacks_get_turn_and_reason_for_both_kinds():
    control = TurnControl()
    seen: list[tuple[str, int, str]] = []
    control.on_cancel(lambda turn, reason: seen.append(("first", turn, reason)))
    control.on_cancel(lambda turn, reason: seen.append(("second", turn, reason)))
    control.cancel_turn(4, CancelReason.REOPENED)
    control.cancel_all(9, CancelReason.BARGE_IN)
    assert seen == [("first", 4, CancelReason.REOPENED), ("second", 4, CancelReason.REOPENED),
                    ("first", 9, CancelReason.BARGE_IN), ("second", 9, CancelReason.BARGE_IN)]


def test_on_cancel_runs_under_the_lock_so_a_late_writer_waits_and_then_is_refused():
    control = TurnControl()
    generation = control.generation
    wrote: list[str] = []
    writer_result: list[bool] = []
    writer_started = threading.Event()
    writer_finished_inside: list[bool] = []
    callbacks_threads: list[threading.Thread] = []

    def late_writer() -> None:
        writer_started.set()
        writer_result.append(control.run_if_current(1, generation, lambda: wrote.append("late")))

    def callback(turn: int, reason: str) -> None:
        # The history drops the turn here; a writer that checks run_if_current meanwhile
        # must wait for the cancel to finish, then see its work is stale.
        thread = threading.Thread(target=late_writer, name="late-writer")
        thread.start()
        assert writer_started.wait(5)
        time.sleep(0.1)
        writer_finished_inside.append(not thread.is_alive())
        callbacks_threads.append(thread)

    control.on_cancel(callback)
    control.cancel_turn(1, CancelReason.REOPENED)
    _join(callbacks_threads[0])
    assert writer_finished_inside == [False]  # blocked while the callback ran
    assert writer_result == [False] and wrote == []


def test_run_if_current_runs_current_work_and_refuses_stale_work():
    control = TurnControl()
    ran: list[int] = []
    assert control.run_if_current(1, 0, lambda: ran.append(1)) is True
    control.cancel_turn(1, CancelReason.REOPENED)
    assert control.run_if_current(1, 0, lambda: ran.append(2)) is False
    assert control.run_if_current(1, control.generation, lambda: ran.append(3)) is True
    assert control.run_if_current(2, 0, lambda: ran.append(4)) is True  # another turn
    control.cancel_all(2, CancelReason.BARGE_IN)
    assert control.run_if_current(2, 0, lambda: ran.append(5)) is False
    assert ran == [1, 3, 4]


def _race_a_writer_against_a_cancel(kind: str) -> tuple[int, list[int]]:
    """(entries written in all, entries there were inside each cancel callback)."""
    control = TurnControl()
    generation = control.generation
    written: list[int] = []
    at_cancel: list[int] = []
    control.on_cancel(lambda _t, _r: at_cancel.append(len(written)))

    def writer() -> None:
        i = 0
        while control.run_if_current(1, generation, lambda i=i: written.append(i)):
            i += 1

    thread = threading.Thread(target=writer, name="writer")
    thread.start()
    while not written:  # let it write a little first
        time.sleep(0.0005)
    if kind == "turn":
        control.cancel_turn(1, CancelReason.REOPENED)
    else:
        control.cancel_all(1, CancelReason.BARGE_IN)
    _join(thread)
    return len(written), at_cancel


def test_run_if_current_is_atomic_with_cancels_racing_from_another_thread():
    # A writer appends as long as its work is current; the cancel records, in its callback
    # (under the lock), how many entries there were. If a write could slip in between
    # the staleness check and the action, an entry would appear after the recorded count.
    for kind in ("turn", "all"):
        for _ in range(20):
            total, at_cancel = _race_a_writer_against_a_cancel(kind)
            assert len(at_cancel) == 1
            assert total == at_cancel[0], f"{kind}: {total - at_cancel[0]} write(s) after the cancel"


def test_turn_floors_are_trimmed_but_recent_turns_keep_theirs():
    control = TurnControl()
    before: dict[int, int] = {}
    for turn in range(1, 101):
        before[turn] = control.generation
        control.cancel_turn(turn, CancelReason.REOPENED)
        assert len(control._turn_floor) <= 64  # bounded on a long session
    for turn in range(69, 101):  # the 32 most recent cancelled turns
        assert control.floor(turn) == before[turn] + 1
        assert control.is_stale(turn, before[turn])
    assert control.floor(101) == 0  # a fresh turn is not affected


# ---------------------------------------------------------------- EventHold


class _Gate:
    def __init__(self) -> None:
        self.control = TurnControl()
        self.out: list[object] = []
        self.held = EventHold(self.control, self.out.append)


def test_gate_holds_events_until_commit_then_releases_them_in_order():
    g = _Gate()
    g.held.emit(1, 0, "transcript")
    g.held.emit(1, 0, "reply part 1")
    assert g.out == []
    g.held.commit(1)
    assert g.out == ["transcript", "reply part 1"]
    g.held.commit(1)  # committing again releases nothing twice
    assert g.out == ["transcript", "reply part 1"]


def test_gate_passes_events_through_after_commit():
    g = _Gate()
    g.held.commit(3)
    g.held.emit(3, 0, "reply")
    assert g.out == ["reply"]


def test_gate_commit_releases_only_that_turn():
    g = _Gate()
    g.held.emit(1, 0, "one")
    g.held.emit(2, 0, "two")
    g.held.commit(2)
    assert g.out == ["two"]
    g.held.commit(1)
    assert g.out == ["two", "one"]


def test_gate_drops_events_of_a_revision_cancelled_before_commit():
    g = _Gate()
    g.held.emit(1, 0, "old transcript")
    new = g.control.cancel_turn(1, CancelReason.REOPENED)  # the user went on speaking
    g.held.emit(1, new, "new transcript")
    g.held.commit(1)
    assert g.out == ["new transcript"]


def test_gate_drops_events_that_are_stale_when_emitted():
    g = _Gate()
    g.control.cancel_turn(1, CancelReason.REOPENED)
    g.held.emit(1, 0, "too late, held")  # before commit
    g.held.commit(1)
    g.held.emit(1, 0, "too late, committed")  # after commit
    g.control.cancel_all(1, CancelReason.BARGE_IN)
    g.held.emit(1, 1, "cut off by barge-in")
    assert g.out == []


def test_gate_keeps_working_past_its_committed_set_trim():
    g = _Gate()
    for turn in range(1, 101):
        g.held.emit(turn, 0, f"t{turn}")
        g.held.commit(turn)
    assert g.out == [f"t{turn}" for turn in range(1, 101)]
    g.held.emit(100, 0, "late part of the last turn")  # still committed: passes through
    g.held.emit(101, 0, "next turn")  # not committed: held
    assert g.out[-1] == "late part of the last turn"
    g.held.commit(101)
    assert g.out[-1] == "next turn"
