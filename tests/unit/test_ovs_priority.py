"""ovs-vswitchd's forwarding thread gets real-time priority and a core of its own (the
agents get the others), or a warning says why not."""

from __future__ import annotations

import errno
import os

import pytest

from fabric.emulation import ovs

POLICY = os.SCHED_FIFO | os.SCHED_RESET_ON_FORK


class FakeScheduler:
    """Stands in for the kernel's scheduler calls on one pid."""

    def __init__(self, policy: int, refuse: bool = False, cpus: set[int] = frozenset({0, 1}),
                 refuse_pin: bool = False) -> None:
        self.policy, self.refuse, self.calls = policy, refuse, []
        self.cpus, self.refuse_pin, self.pinned = set(cpus), refuse_pin, []

    def get_affinity(self, pid: int) -> set[int]:
        return set(self.cpus)

    def set_affinity(self, pid: int, cpus: set[int]) -> None:
        if self.refuse_pin:
            raise PermissionError(errno.EPERM, "Operation not permitted")
        self.pinned.append((pid, set(cpus)))

    def get(self, pid: int) -> int:
        return self.policy

    def set(self, pid: int, policy: int, param: os.sched_param) -> None:
        if self.refuse:
            raise PermissionError(errno.EPERM, "Operation not permitted")
        self.calls.append((pid, policy, param.sched_priority))
        self.policy = policy


@pytest.fixture
def scheduler(monkeypatch: pytest.MonkeyPatch):
    def install(policy: int, refuse: bool = False, **affinity) -> FakeScheduler:
        fake = FakeScheduler(policy, refuse, **affinity)
        monkeypatch.setattr(ovs.os, "sched_getscheduler", fake.get)
        monkeypatch.setattr(ovs.os, "sched_setscheduler", fake.set)
        monkeypatch.setattr(ovs.os, "sched_getaffinity", fake.get_affinity)
        monkeypatch.setattr(ovs.os, "sched_setaffinity", fake.set_affinity)
        return fake
    return install


def test_main_thread_becomes_fifo_with_reset_on_fork(scheduler) -> None:
    fake = scheduler(os.SCHED_OTHER)
    assert ovs.prioritize_forwarding(4242) == []
    assert fake.calls == [(4242, POLICY, ovs.FORWARDING_RT_PRIORITY)]


def test_forwarding_thread_gets_the_first_cpu_to_itself(scheduler) -> None:
    fake = scheduler(os.SCHED_OTHER, cpus={2, 3, 5})
    assert ovs.prioritize_forwarding(4242) == []
    assert fake.pinned == [(4242, {2})]
    assert ovs.agent_cpus("user") == {3, 5}


def test_one_cpu_is_shared_and_nothing_is_pinned(scheduler) -> None:
    fake = scheduler(os.SCHED_OTHER, cpus={4})
    assert ovs.prioritize_forwarding(4242) == []
    assert fake.pinned == [] and ovs.agent_cpus("user") is None


def test_the_kernel_datapath_leaves_the_agents_anywhere() -> None:
    assert ovs.agent_cpus("kernel", {0, 1}) is None
    assert ovs.agent_cpus("user", {0, 1}) == {1}


def test_a_refused_pin_becomes_a_fidelity_warning(scheduler) -> None:
    scheduler(os.SCHED_OTHER, refuse_pin=True)
    (warning,) = ovs.prioritize_forwarding(4242)
    assert "could not be pinned to CPU 0" in warning and "Operation not permitted" in warning


def test_already_prioritized_thread_is_left_alone(scheduler) -> None:
    fake = scheduler(POLICY)
    assert ovs.prioritize_forwarding(4242) == []
    assert fake.calls == []


def test_refusal_becomes_a_fidelity_warning(scheduler) -> None:
    scheduler(os.SCHED_OTHER, refuse=True)
    warnings = ovs.prioritize_forwarding(4242)
    assert len(warnings) == 1
    assert "real-time priority" in warnings[0] and "Operation not permitted" in warnings[0]


def test_priority_stays_below_the_kernels_own_real_time_threads() -> None:
    assert 1 <= ovs.FORWARDING_RT_PRIORITY < 50


def test_userspace_forwarding_on_two_cores_lifts_real_time_throttling() -> None:
    assert ovs.forwarding_sysctls("user", cpus=2) == {"kernel.sched_rt_runtime_us": "-1"}


@pytest.mark.parametrize("datapath, cpus", [("user", 1), ("kernel", 2), ("kernel", 1)])
def test_throttling_stays_on_one_core_and_for_the_kernel_datapath(datapath: str,
                                                                   cpus: int) -> None:
    assert ovs.forwarding_sysctls(datapath, cpus=cpus) == {}
