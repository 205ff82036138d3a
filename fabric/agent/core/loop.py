"""A minimal single-threaded event loop: one selector plus a timer heap.

Every agent runs exactly one of these and nothing else (no threads, no child
processes), so stopping the agent is stopping the loop and closing what it
registered. Timers use ``time.monotonic()``; wall-clock times are only taken
where a result records them.
"""

from __future__ import annotations

import heapq
import itertools
import selectors
import socket
import time
from typing import Callable

Callback = Callable[[int], None]  # called with the selector event mask


class Timer:
    """Handle of a scheduled call; :meth:`cancel` makes it a no-op."""

    __slots__ = ("when", "callback", "active")

    def __init__(self, when: float, callback: Callable[[], None]) -> None:
        self.when = when
        self.callback = callback
        self.active = True

    def cancel(self) -> None:
        """Do not run the callback."""
        self.active = False


class EventLoop:
    """Selector-driven loop with one-shot timers and a per-iteration hook.

    Parameters
    ----------
    service : callable, optional
        Called once per iteration with ``now`` (monotonic); returns the next
        monotonic time it wants to run again, or None. The RoCE engine uses
        it for pacing, delayed ACKs and loss timers, which would otherwise
        need one timer object per packet.
    """

    def __init__(self, service: Callable[[float], float | None] | None = None) -> None:
        self.selector = selectors.DefaultSelector()
        self._timers: list[tuple[float, int, Timer]] = []
        self._seq = itertools.count()
        self._services: list[Callable[[float], float | None]] = [service] if service else []
        self._stopped = False
        # seconds each wake-up that a timer or service asked for came after its time
        self.wake_late_s: list[float] = []
        self.wakeups = 0  # returns from the selector: each costs a context switch or two

    # -- registration ------------------------------------------------------------------
    def add_service(self, service: Callable[[float], float | None]) -> None:
        """Add a per-iteration hook (see the class docstring)."""
        self._services.append(service)

    def register(self, sock: socket.socket, events: int, callback: Callback) -> None:
        """Watch ``sock`` for ``events``; ``callback(mask)`` runs when ready."""
        self.selector.register(sock, events, callback)

    def modify(self, sock: socket.socket, events: int, callback: Callback) -> None:
        """Change what ``sock`` is watched for."""
        self.selector.modify(sock, events, callback)

    def unregister(self, sock: socket.socket) -> None:
        """Stop watching ``sock`` (no error if it was not watched)."""
        try:
            self.selector.unregister(sock)
        except (KeyError, ValueError):
            pass

    def call_at(self, when: float, callback: Callable[[], None]) -> Timer:
        """Run ``callback()`` once at monotonic time ``when``."""
        timer = Timer(when, callback)
        heapq.heappush(self._timers, (when, next(self._seq), timer))
        return timer

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        """Run ``callback()`` once after ``delay`` seconds."""
        return self.call_at(time.monotonic() + delay, callback)

    # -- running -----------------------------------------------------------------------
    def stop(self) -> None:
        """Make :meth:`run` return after the current iteration."""
        self._stopped = True

    @property
    def stopped(self) -> bool:
        """Whether :meth:`stop` was called."""
        return self._stopped

    def run(self) -> None:
        """Iterate until :meth:`stop`."""
        while not self._stopped:
            self.run_once()

    def run_once(self, max_wait: float = 0.5) -> None:
        """Wait for I/O or the next timer, dispatch, run services once."""
        now = time.monotonic()
        wake = now + max_wait
        for service in self._services:
            want = service(now)
            if want is not None and want < wake:
                wake = want
        if self._stopped:
            return
        while self._timers and not self._timers[0][2].active:
            heapq.heappop(self._timers)
        if self._timers and self._timers[0][0] < wake:
            wake = self._timers[0][0]
        timeout = max(0.0, wake - time.monotonic())
        events = self.selector.select(timeout)
        woke = time.monotonic()
        self.wakeups += 1
        if woke >= wake and wake < now + max_wait:  # a deadline, not the idle cap
            self.wake_late_s.append(woke - wake)
        for key, mask in events:
            key.data(mask)
            if self._stopped:
                return
        now = time.monotonic()
        while self._timers and self._timers[0][0] <= now:
            _, _, timer = heapq.heappop(self._timers)
            if timer.active:
                timer.active = False
                timer.callback()
                if self._stopped:
                    return

    def close(self) -> None:
        """Close the selector, then every socket that was registered on it.

        In that order, closing the epoll set drops all registrations at once,
        where unregistering thousands of sockets (a sprayed all-to-all's) one
        system call each cost as much as closing them.
        """
        keys = list(self.selector.get_map().values())
        self.selector.close()
        for key in keys:
            try:
                key.fileobj.close()  # type: ignore[union-attr]
            except OSError:
                pass


def lateness_summary(late_s: list[float]) -> dict[str, float]:
    """``{"n", "p50_ms", "p99_ms", "max_ms"}`` of wake-up lateness samples (seconds);
    empty without samples. A loop whose host has a core free wakes within the
    selector's resolution (1 ms for epoll); more means it waited for a CPU."""
    if not late_s:
        return {}
    ordered = sorted(late_s)

    def quantile(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e3, 3)

    return {"n": len(ordered), "p50_ms": quantile(0.5), "p99_ms": quantile(0.99),
            "max_ms": round(ordered[-1] * 1e3, 3)}
