"""The agents' event loop: timers, and how late it woke for them."""

from __future__ import annotations

import socket

from fabric.agent.core.loop import EventLoop, lateness_summary


def test_timer_wake_ups_are_measured_and_never_early() -> None:
    loop = EventLoop()
    fired = []
    for delay in (0.002, 0.004, 0.006):
        loop.call_later(delay, lambda d=delay: fired.append(d))
    while len(fired) < 3:
        loop.run_once()
    loop.close()
    assert fired == [0.002, 0.004, 0.006]
    assert len(loop.wake_late_s) >= 1  # at least one select ended at a timer's time
    assert all(late >= 0 for late in loop.wake_late_s)


def test_io_before_the_deadline_and_the_idle_cap_are_not_lateness() -> None:
    loop = EventLoop()
    a, b = socket.socketpair()
    got = []
    loop.register(a, 1, lambda mask: got.append(a.recv(16)))  # EVENT_READ
    loop.call_later(0.5, lambda: None)
    b.send(b"x")
    loop.run_once(max_wait=1.0)    # woken by I/O, long before the timer's time
    loop.run_once(max_wait=0.01)   # the timer is not due: the idle cap ends the wait
    loop.close()
    b.close()
    assert got == [b"x"]
    assert loop.wake_late_s == []
    assert loop.wakeups == 2  # every return from the selector counts, I/O or not


def test_summary_quantiles_in_milliseconds() -> None:
    samples = [i / 1000 for i in range(100)]  # 0..99 ms
    assert lateness_summary(samples) == {"n": 100, "p50_ms": 50.0, "p99_ms": 99.0,
                                         "max_ms": 99.0}
    assert lateness_summary([]) == {}


def test_close_drops_the_registrations_with_the_selector_then_closes_the_sockets() -> None:
    loop = EventLoop()
    pairs = [socket.socketpair() for _ in range(3)]
    for a, _ in pairs:
        loop.register(a, 1, lambda mask: None)
    unregistered = []
    loop.selector.unregister = unregistered.append  # one system call per socket: not used
    loop.close()
    assert unregistered == []
    assert all(a.fileno() == -1 for a, _ in pairs)  # closed
    loop.unregister(pairs[0][0])  # what an engine does afterwards: harmless
    for _, b in pairs:
        b.close()
