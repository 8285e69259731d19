"""Limits: a token bucket over one session's client events, the throttle on wrong API
keys per client address, and a session's idle and length limits."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

#: Wrong keys an address may send within ``FAILED_KEY_WINDOW_S`` before it is locked out:
#: enough for a person who mistyped, far too few to guess a key.
FAILED_KEYS_ALLOWED = 5
FAILED_KEY_WINDOW_S = 60.0
#: The first lockout; each wrong key sent after one doubles the next, up to the maximum.
LOCKOUT_S = 30.0
MAX_LOCKOUT_S = 15 * 60.0


class TokenBucket:
    """``rate`` tokens per second, at most ``burst`` banked; one event takes one token.

    Not thread-safe: one session's events are handled on one event loop.
    """

    def __init__(self, rate: float, burst: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if rate <= 0:
            raise ValueError(f"rate must be positive; got {rate}")
        self.rate = rate
        self.burst = max(1.0, rate if burst is None else burst)
        self._clock = clock
        self._tokens = self.burst
        self._t = clock()

    def take(self) -> bool:
        """Take a token if one is there; False means the event must be dropped."""
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._t) * self.rate)
        self._t = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False


@dataclass
class _Failures:
    count: int  # wrong keys since ``first`` (or since the last lockout)
    first: float
    locked_until: float = 0.0
    lockouts: int = 0  # lockouts in a row: each doubles the next


class KeyThrottle:
    """Throttles wrong API keys per client address.

    After ``allowed`` wrong keys within ``window_s`` an address is locked out for
    ``lockout_s``; every wrong key once a lockout has ended locks it again for twice as
    long, up to ``max_lockout_s``. A right key clears the address. ``retry_after`` is
    asked before the key is compared, so a locked-out address learns nothing about its
    guesses. Not thread-safe: the server's requests are checked on one event loop.
    """

    def __init__(self, allowed: int = FAILED_KEYS_ALLOWED, window_s: float = FAILED_KEY_WINDOW_S,
                 lockout_s: float = LOCKOUT_S, max_lockout_s: float = MAX_LOCKOUT_S,
                 clock: Callable[[], float] = time.monotonic, max_addresses: int = 4096) -> None:
        self.allowed = allowed
        self.window_s = window_s
        self.lockout_s = lockout_s
        self.max_lockout_s = max_lockout_s
        self._clock = clock
        self._max = max_addresses
        self._seen: dict[str, _Failures] = {}

    def retry_after(self, address: str) -> int | None:
        """Whole seconds until ``address`` may try a key again; None if it may now."""
        seen = self._seen.get(address)
        if seen is None:
            return None
        left = seen.locked_until - self._clock()
        return math.ceil(left) if left > 0 else None

    def failed(self, address: str) -> int | None:
        """Count a wrong key from ``address``; the lockout it starts, in whole seconds,
        or None while it has tries left."""
        now = self._clock()
        seen = self._seen.get(address)
        if seen is None or (not seen.lockouts and now - seen.first > self.window_s):
            self._forget_quiet(now)
            seen = self._seen[address] = _Failures(0, now)
        elif seen.lockouts and now - seen.locked_until > self.window_s:
            seen.count, seen.first, seen.lockouts = 0, now, 0  # behaved for a window: a fresh start
        seen.count += 1
        if seen.lockouts == 0 and seen.count < self.allowed:
            return None
        lockout = min(self.max_lockout_s, self.lockout_s * 2 ** seen.lockouts)
        seen.lockouts += 1
        seen.locked_until = now + lockout
        return math.ceil(lockout)

    def succeeded(self, address: str) -> None:
        """A right key from ``address``: its wrong ones are forgotten."""
        self._seen.pop(address, None)

    def _forget_quiet(self, now: float) -> None:
        """Keep the table bounded: drop addresses neither locked out nor recently wrong."""
        if len(self._seen) < self._max:
            return
        self._seen = {a: f for a, f in self._seen.items()
                      if f.locked_until > now or now - f.first <= self.window_s}
        if len(self._seen) >= self._max:  # a flood of addresses: the oldest go first
            for address in list(self._seen)[: len(self._seen) - self._max + 1]:
                del self._seen[address]


@dataclass(frozen=True)
class SessionEnd:
    """Why the server ends a session: the ``error`` event's code and message."""

    code: str
    message: str


class SessionLimits:
    """A session's idle and length limits (seconds; 0: none), counted from its creation,
    and the client's own idle timeout (``idle_timeout_ms`` of ``server_vad``).

    ``active`` is called on what shows the user is there: their speech, a client event
    other than audio. It, ``replying`` and ``finished`` may be called from any thread
    (stage threads: each only stores a float or a bool); the rest runs on the loop. Replies do
    not count, so a client whose idle timeout makes the assistant prompt it again and
    again is still closed once the user has been silent for ``idle_timeout_s``; but a
    session is not closed while its reply still plays (``ended``'s ``playing``).

    ``replying`` and ``finished`` bracket a reply (its events, then its turn's end):
    ``nudge_due`` says when the client's idle timeout has passed since the later of the
    user's last activity, the last reply's end and the last prompt, with no reply under
    way or playing, as OpenAI's Realtime API times it (from when the last response's
    audio has finished playing).
    """

    def __init__(self, idle_timeout_s: float, max_session_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.idle_timeout_s = idle_timeout_s
        self.max_session_s = max_session_s
        self._clock = clock
        self.started = clock()
        self.last_active = self.started
        self._quiet_since = self.started  # the last reply's end, or the last prompt
        self._replying = False

    def active(self) -> None:
        """The user is there: the idle time starts again."""
        self.last_active = self._clock()

    def replying(self) -> None:
        """A reply is under way (its text, a tool call, its audio)."""
        self._replying = True

    def finished(self) -> None:
        """The reply's turn ended (played, or cancelled): the quiet starts now."""
        self._replying = False
        self._quiet_since = self._clock()

    def ended(self, *, playing: bool = False) -> SessionEnd | None:
        """The reason the session must end now, or None; ``playing``: reply audio sent to
        the client is still playing (an idle session is not closed over it)."""
        now = self._clock()
        if self.max_session_s and now - self.started >= self.max_session_s:
            return SessionEnd("session_expired", "Your session hit the maximum duration of "
                              f"{_duration(self.max_session_s)} (the server's --max-session-s).")
        if self.idle_timeout_s and now - self.last_active >= self.idle_timeout_s and not playing:
            return SessionEnd("session_idle_timeout", "Your session was idle for "
                              f"{_duration(self.idle_timeout_s)} (no speech and no client event "
                              "but audio): the server closed it to free its pipeline "
                              "(--idle-timeout-s).")
        return None

    def nudge_due(self, idle_timeout_ms: int | None, *, playing: bool) -> bool:
        """Whether the client's idle timeout has passed with nobody speaking and nothing
        replying or playing; True starts the quiet again (the prompt is under way)."""
        if not idle_timeout_ms or self._replying or playing:
            return False
        now = self._clock()
        if now - max(self.last_active, self._quiet_since) < idle_timeout_ms / 1000:
            return False
        self._quiet_since = now
        self._replying = True  # until the prompt's turn ends
        return True

    def next_check_s(self, most: float) -> float:
        """How long until a limit could be reached, at most ``most`` (at least 10 ms)."""
        now = self._clock()
        waits = [most]
        if self.max_session_s:
            waits.append(self.started + self.max_session_s - now)
        if self.idle_timeout_s:
            waits.append(self.last_active + self.idle_timeout_s - now)
        return max(0.01, min(waits))


def _duration(seconds: float) -> str:
    if seconds >= 60 and seconds % 60 == 0:
        minutes = int(seconds // 60)
        return f"{minutes} minute{'s' if minutes != 1 else ''}"
    return f"{seconds:g} seconds"
