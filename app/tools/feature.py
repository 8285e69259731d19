"""The window side of the assistant's tools: the confirmation dialog, the timers list
and the notification when one is due.

Each engine the controller builds gets the window's ``ToolConfirmer``
(``Engine.set_tool_confirmer``) before it can start, and its timers are polled off the
GUI thread (``TimerPoller``). A Cancel goes to the engine on the feature's own serial lane
(``app.core.background``), never on the GUI thread. The tool calls themselves are shown
in the conversation (``app.conversation``), the Tools settings on the Settings tab
(``app.settings.tools_group``).
"""

from __future__ import annotations

import time

from collections.abc import Callable
from typing import TYPE_CHECKING

from app.core.background import SerialLane
from app.core.controller_state import ControllerState
from app.tools.confirm import ToolConfirmer
from app.tools.timers import Notifier, TimerPoller, TimersPanel

if TYPE_CHECKING:
    from PySide6.QtWidgets import QWidget

    from app.core.window_api import WindowApi


class ToolsFeature:
    """What ``app.tools.install`` made: ``confirmer``, ``timers`` (the panel), ``poller``,
    ``notifier``."""

    def __init__(self, window: WindowApi, beside: Callable[[QWidget], object]) -> None:
        self.window = window
        c = window.controller
        self.confirmer = ToolConfirmer(window.widget)
        self.poller = TimerPoller()
        self.lane = SerialLane(window.widget, "parley-timer-cancel")  # joined by the window's shutdown_all
        self.timers = TimersPanel()
        beside(self.timers)
        self.notifier = Notifier(window.banner, window.widget)
        self._shown = None  # the reading the panel shows
        c.engine_changed.connect(self._new_engine)
        # A stop joins the engine's tool worker: a question it waits on is answered first.
        c.state_changed.connect(self._state_changed)
        window.bridge.timer_due.connect(self._due)
        self.timers.cancel_requested.connect(self.cancel)
        window.on_tick(self._tick)
        window.on_close(self._close)

    def _new_engine(self, engine) -> None:
        # The engine replaced is stopped next (its questions with it).
        self.confirmer.decline_all()
        # Set on the GUI thread as the engine is adopted: it is not started yet (a start is
        # a later command), so no tool call can come before its confirmer is there.
        engine.set_tool_confirmer(self.confirmer)
        self.poller.watch(engine)

    def _state_changed(self, state: ControllerState) -> None:
        if state == ControllerState.STOPPING:
            self.confirmer.decline_all()

    def _tick(self, _snap) -> None:
        reading = self.poller.latest()
        if reading is not self._shown:
            self._shown = reading
            self.timers.show_timers(reading.timers if reading is not None else ())
        else:
            self.timers.tick(time.time())

    def cancel(self, timer_id: str) -> None:
        """Cancel a timer (its row's Cancel): off the list at once, off the engine's in
        the background."""
        engine = self.window.controller.engine
        if engine is None:
            return
        self.timers.forget(timer_id)
        self.lane.call("cancelling a timer", lambda: engine.cancel_timer(timer_id),
                       failed=lambda failure: self.window.banner.show_message(
                           f"The timer could not be cancelled: {failure}"))

    def _due(self, timer_id: str, label: str, due_at: float) -> None:
        kind = self.timers.kind_of(timer_id)  # the event does not say; the list does
        self.timers.forget(timer_id)
        self.notifier.notify(label, due_at, kind)

    def _close(self) -> list[str]:
        # A question still open is declined, so the engine's tool worker can end.
        self.confirmer.close()
        self.notifier.close()
        return [] if self.poller.shutdown(2.0) else [self.poller.name]
