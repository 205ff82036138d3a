"""The flow-control daemon's event handling and watchdog (:mod:`fabric.emulation.pfc_daemon`),
without root, libbpf or sockets: a daemon built without its ``__init__``, fake gate and
kick sockets that record what they are given, a recorded ``gate_stats`` map and a clock
the test moves."""

from __future__ import annotations

import io
import itertools
import struct
from typing import Any

import pytest

from fabric.emulation import pfc_daemon
from fabric.emulation.pfc_daemon import EVENT, GATE_STAT, KICK, PAUSE, RESUME, Daemon, GateState
from fabric.host.tcgate import Gate, GateError

LINK, LANE = 3, 1
OTHER_LINK = 4
DEV = f"s0-eth{LINK}"  # the device of LINK's sender
GATE_STATS_FD = 99
WATCHDOG_NS = 50_000_000  # 50 ms
START_NS = 10_000_000_000
HELD = 12_000
# struct gate_stat's fields, in order (pfc.bpf.c)
PAUSES, PAUSE_NS, SINCE_NS, TRIPS, IGNORED, REACTIONS, REACTION_SUM, REACTION_MAX = range(8)


class Clock:
    """``time`` as the daemon module sees it: a monotonic clock the test sets."""

    def __init__(self, now: int) -> None:
        self.now = now
        self.slept: list[float] = []

    def monotonic_ns(self) -> int:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += round(seconds * 1e9)


class FakeGateSocket:
    """Records every netlink message; refuses them (as the kernel would) when told to."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.refuse = False
        self.closed = False

    def send(self, message: bytes) -> None:
        if self.refuse:
            raise GateError("gate change refused: Invalid argument (handle 20:, parent 1:1)")
        self.sent.append(message)

    def close(self) -> None:
        self.closed = True


class FakeKick:
    """Records every frame sent to a device."""

    def __init__(self) -> None:
        self.frames: list[tuple[bytes, Any]] = []
        self.closed = False

    def sendto(self, frame: bytes, address: Any) -> int:
        self.frames.append((frame, address))
        return len(frame)

    def close(self) -> None:
        self.closed = True


def _gate(ifindex: int) -> Gate:
    return Gate(ifindex=ifindex, parent=(1 << 16) | 1, handle=0x20 << 16,
                open_bytes_per_s=7_500_000, burst_bytes=9014, leaf_limit=256)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock(START_NS)
    monkeypatch.setattr(pfc_daemon, "time", clock)
    return clock


@pytest.fixture
def stored(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, bytes, bytes]]:
    """Every map update the daemon makes, as (fd, key, value)."""
    updates: list[tuple[int, bytes, bytes]] = []
    monkeypatch.setattr(pfc_daemon.libbpf, "map_update",
                        lambda fd, key, value, flags=0: updates.append((fd, key, value)))
    return updates


@pytest.fixture
def daemon(clock: Clock, stored: list) -> Daemon:
    """A daemon with two gates, (LINK, LANE) and (OTHER_LINK, LANE), each on its own
    fake sockets."""
    daemon = Daemon.__new__(Daemon)
    daemon.gates = {(link, LANE): GateState(_gate(link), FakeGateSocket(), FakeKick(),
                                            f"s0-eth{link}", WATCHDOG_NS)
                    for link in (LINK, OTHER_LINK)}
    daemon.errors = 0
    daemon.log = io.StringIO()
    daemon.maps = {"gate_stats": GATE_STATS_FD}
    return daemon


_SEQ = itertools.count(1)


def _event(verdict: int, ns: int, link: int = LINK, lane: int = LANE, held: int = HELD,
           seq: int | None = None) -> bytes:
    """An event; by default each one's verdict count follows the last one's."""
    return EVENT.pack(link, lane, verdict, next(_SEQ) & 0xFFFF if seq is None else seq, ns,
                      held)


def _state(daemon: Daemon, link: int = LINK) -> GateState:
    return daemon.gates[(link, LANE)]


def _lines(daemon: Daemon) -> list[str]:
    return daemon.log.getvalue().splitlines()


def _last_stored(stored: list[tuple[int, bytes, bytes]]) -> tuple[int, int, tuple[int, ...]]:
    """(fd, key, gate_stat fields) of the last map update."""
    fd, key, value = stored[-1]
    return fd, struct.unpack("=I", key)[0], GATE_STAT.unpack(value)


def _pause(daemon: Daemon, clock: Clock, reaction_ns: int = 400_000) -> None:
    """A PAUSE raised ``reaction_ns`` before the daemon sees it."""
    daemon.handle(_event(PAUSE, clock.now - reaction_ns))


def test_a_pause_closes_the_gate_and_records_the_reaction(daemon, clock, stored):
    daemon.handle(_event(PAUSE, START_NS - 400_000))
    state = _state(daemon)
    assert state.sock.sent == [state.gate.message(closed=True)]
    assert state.kick.frames == []
    assert state.closed_since == START_NS
    expected = [0] * 8
    expected[PAUSES], expected[SINCE_NS] = 1, START_NS
    expected[REACTIONS], expected[REACTION_SUM], expected[REACTION_MAX] = 1, 400_000, 400_000
    assert state.stat == expected
    assert _last_stored(stored) == (GATE_STATS_FD, LINK * pfc_daemon.MAX_LANES + LANE,
                                    tuple(expected))
    assert _lines(daemon) == [f"{START_NS - 400_000},{LINK},{LANE},pause,{HELD},400000"]
    assert _state(daemon, OTHER_LINK).sock.sent == []


def test_a_pause_and_a_resume_wait_out_the_modelled_reaction(daemon, clock, stored):
    state = _state(daemon)
    state.reaction_ns = 3_000_000
    raised = clock.now - 1_000_000  # the daemon sees it 1 ms late: 2 ms still to wait
    daemon.handle(_event(PAUSE, raised))
    assert clock.slept == [pytest.approx(0.002)]
    assert state.closed_since == raised + 3_000_000
    assert state.stat[REACTION_MAX] == 3_000_000
    clock.now += 10_000_000
    daemon.handle(_event(RESUME, clock.now))
    assert clock.slept[-1] == pytest.approx(0.003) and state.closed_since is None


def test_an_event_seen_after_its_reaction_is_applied_at_once(daemon, clock, stored):
    _state(daemon).reaction_ns = 3_000_000
    _pause(daemon, clock, 5_000_000)
    assert clock.slept == [] and _state(daemon).stat[REACTION_MAX] == 5_000_000


def test_the_largest_reaction_is_kept_and_all_are_summed(daemon, clock, stored):
    for reaction in (300_000, 900_000, 500_000):
        _pause(daemon, clock, reaction)
        clock.now += 1_000_000
        daemon.handle(_event(RESUME, clock.now))
        clock.now += 1_000_000
    stat = _state(daemon).stat
    assert (stat[PAUSES], stat[REACTIONS]) == (3, 3)
    assert (stat[REACTION_SUM], stat[REACTION_MAX]) == (1_700_000, 900_000)


def test_a_second_pause_while_closed_is_ignored_and_counted(daemon, clock, stored):
    _pause(daemon, clock)
    clock.now += 1_000
    _pause(daemon, clock)
    state = _state(daemon)
    assert len(state.sock.sent) == 1
    assert state.closed_since == START_NS
    assert (state.stat[PAUSES], state.stat[IGNORED]) == (1, 1)
    assert _lines(daemon)[-1].split(",")[3] == "ignored"
    # the map shows the ignored pause at once, not at the next change
    assert _last_stored(stored)[2][IGNORED] == 1


def test_a_resume_opens_the_gate_kicks_its_device_and_adds_the_closed_time(daemon, clock,
                                                                          stored):
    _pause(daemon, clock)
    clock.now += 7_000_000
    daemon.handle(_event(RESUME, clock.now - 200_000, held=0))
    state = _state(daemon)
    assert state.sock.sent == [state.gate.message(closed=True), state.gate.message(closed=False)]
    assert state.kick.frames == [(KICK, (DEV, 0))]
    assert state.closed_since is None
    assert (state.stat[PAUSE_NS], state.stat[SINCE_NS]) == (7_000_000, 0)
    assert _last_stored(stored)[2][PAUSE_NS] == 7_000_000
    assert _lines(daemon)[-1] == f"{clock.now - 200_000},{LINK},{LANE},resume,0,200000"
    # a second pause and resume add their closed time to the first's
    clock.now += 1_000_000
    _pause(daemon, clock)
    clock.now += 3_000_000
    daemon.handle(_event(RESUME, clock.now))
    assert state.stat[PAUSE_NS] == 10_000_000 and state.stat[PAUSES] == 2
    assert len(state.kick.frames) == 2


def test_a_resume_of_an_open_gate_does_nothing(daemon, clock, stored):
    daemon.handle(_event(RESUME, START_NS))
    state = _state(daemon)
    assert state.sock.sent == [] and state.kick.frames == []
    assert state.stat == [0] * 8 and state.closed_since is None
    assert _lines(daemon) == []


@pytest.mark.parametrize("link, lane", [(7, LANE), (LINK, 0), (0, 0)],
                         ids=["unknown link", "unknown lane", "from an endpoint"])
@pytest.mark.parametrize("verdict", [PAUSE, RESUME], ids=["pause", "resume"])
def test_an_event_of_no_gate_does_nothing(daemon, clock, stored, link, lane, verdict):
    daemon.handle(_event(verdict, START_NS, link=link, lane=lane))
    assert all(s.sock.sent == [] and s.kick.frames == [] and s.stat == [0] * 8
               for s in daemon.gates.values())
    assert stored == [] and _lines(daemon) == [] and daemon.errors == 0


def test_a_refused_close_is_logged_and_later_events_still_work(daemon, clock, stored):
    state = _state(daemon)
    state.sock.refuse = True
    _pause(daemon, clock)
    assert daemon.errors == 1
    assert state.closed_since is None and state.stat == [0] * 8
    (line,) = _lines(daemon)
    assert line.split(",")[3].startswith("error") and "refused" in line
    assert len(line.split(",")) == 6  # the message's commas would break the CSV
    state.sock.refuse = False
    clock.now += 1_000
    _pause(daemon, clock)
    assert state.sock.sent == [state.gate.message(closed=True)]
    assert state.closed_since == clock.now and daemon.errors == 1


def test_a_refused_open_leaves_the_gate_closed_until_a_later_resume(daemon, clock, stored):
    _pause(daemon, clock)
    state = _state(daemon)
    state.sock.refuse = True
    clock.now += 1_000_000
    daemon.handle(_event(RESUME, clock.now))
    assert daemon.errors == 1 and "error" in _lines(daemon)[-1]
    assert state.closed_since == START_NS and state.kick.frames == []
    state.sock.refuse = False
    clock.now += 1_000_000
    daemon.handle(_event(RESUME, clock.now))
    assert state.closed_since is None and state.stat[PAUSE_NS] == 2_000_000
    assert len(state.kick.frames) == 1


def test_the_watchdog_opens_a_gate_closed_too_long_and_holds_it_open(daemon, clock, stored):
    _pause(daemon, clock)
    state = _state(daemon)
    clock.now = START_NS + WATCHDOG_NS - 1
    daemon.watchdog()
    assert state.closed_since == START_NS and state.stat[TRIPS] == 0
    clock.now = START_NS + WATCHDOG_NS
    daemon.watchdog()
    assert state.closed_since is None
    assert state.sock.sent[-1] == state.gate.message(closed=False)
    assert state.kick.frames == [(KICK, (DEV, 0))]
    assert (state.stat[TRIPS], state.stat[PAUSE_NS]) == (1, WATCHDOG_NS)
    assert _last_stored(stored)[2][TRIPS] == 1
    assert _lines(daemon)[-1] == f"{clock.now},{LINK},{LANE},watchdog,,"
    # for as long again, a pause is ignored
    clock.now += WATCHDOG_NS - 1
    _pause(daemon, clock)
    assert state.closed_since is None and state.stat[IGNORED] == 1
    assert len(state.sock.sent) == 2
    # then the lane may pause again
    clock.now += 1
    _pause(daemon, clock)
    assert state.closed_since == clock.now and state.stat[PAUSES] == 2


def test_the_watchdog_says_when_the_next_gate_is_due(daemon, clock, stored):
    assert 0 < daemon.watchdog() <= 1000  # nothing closed: a second at most
    _pause(daemon, clock)
    clock.now += 20_000_000
    daemon.handle(_event(PAUSE, clock.now, link=OTHER_LINK))
    clock.now += 5_000_000
    assert daemon.watchdog() == 25  # LINK's is due in 25 ms, OTHER_LINK's in 45 ms
    clock.now = START_NS + WATCHDOG_NS - 300_000
    assert daemon.watchdog() == 1  # less than a millisecond: poll again at once
    clock.now = START_NS + WATCHDOG_NS
    assert daemon.watchdog() == 20  # LINK's tripped; OTHER_LINK's is next
    assert _state(daemon).stat[TRIPS] == 1 and _state(daemon, OTHER_LINK).stat[TRIPS] == 0


def test_a_refused_watchdog_open_is_logged_and_tried_again(daemon, clock, stored):
    _pause(daemon, clock)
    state = _state(daemon)
    state.sock.refuse = True
    clock.now += WATCHDOG_NS
    assert daemon.watchdog() >= 1  # the daemon goes on serving
    assert daemon.errors == 1 and "error" in _lines(daemon)[-1]
    assert state.closed_since == START_NS and state.stat[TRIPS] == 0
    state.sock.refuse = False
    clock.now += 1_000_000
    daemon.watchdog()
    assert state.closed_since is None and state.stat[TRIPS] == 1


def test_closing_opens_every_gate_even_when_one_change_is_refused(daemon, clock, stored):
    for link in (LINK, OTHER_LINK):
        daemon.handle(_event(PAUSE, clock.now, link=link))
    _state(daemon).sock.refuse = True  # its device went away first

    class Obj:
        closed = False

        def close(self) -> None:
            Obj.closed = True

    daemon.sockets = {state.gate.ifindex: (state.sock, state.kick)
                      for state in daemon.gates.values()}
    daemon.obj = Obj()
    log = daemon.log
    daemon.close()
    assert _state(daemon, OTHER_LINK).closed_since is None
    assert all(s.sock.closed and s.kick.closed for s in daemon.gates.values())
    assert log.closed and Obj.closed


@pytest.mark.parametrize("first, second, state", [
    (PAUSE, RESUME, "open"),   # the accounting resumed last: the gate must end open
    (RESUME, PAUSE, "closed")])  # it paused last: closed
def test_events_that_reach_the_daemon_swapped_leave_the_gate_as_the_latest_verdict(
        daemon, clock, stored, first, second, state):
    gate = _state(daemon)
    if first == RESUME:  # the lane was paused before both
        daemon.handle(_event(PAUSE, clock.now, seq=10))
    # verdicts 11 then 12 under the switch's lock, but 12 is in the ring buffer first
    daemon.handle(_event(second, clock.now, seq=12))
    daemon.handle(_event(first, clock.now, seq=11))
    assert (gate.closed_since is not None) == (state == "closed")
    assert _lines(daemon)[-1].split(",")[3] == "stale"
    daemon.handle(_event(first, clock.now, seq=13))  # the next verdict is taken again
    assert (gate.closed_since is not None) == (first == PAUSE)


def test_verdict_counts_wrap_at_16_bits():
    assert pfc_daemon._newer(0, 0xFFFF) and pfc_daemon._newer(5, 4)
    assert not pfc_daemon._newer(4, 5) and not pfc_daemon._newer(7, 7)
