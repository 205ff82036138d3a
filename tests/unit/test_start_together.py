"""Starting many agents together: the launcher's side of the start gate, with stand-in
processes (pure Python, no root)."""

from __future__ import annotations

import subprocess
import sys
import time

from fabric.emulation.traffic import GO_LEAD_S, start_together
from fabric.traffic.model import Plan

# says READY after a while, then echoes the start time it is given to stdout
READY_THEN_ECHO = ("import sys, time; time.sleep(float(sys.argv[1])); print('READY', flush=True);"
                   " print(sys.stdin.readline().strip(), flush=True)")


def _stand_in(script: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", script, *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE)


def test_every_agent_gets_one_start_time_after_the_slowest_is_up():
    plan = Plan([], {}, start_at=0.0)
    agents = {"fast": _stand_in(READY_THEN_ECHO, "0"), "slow": _stand_in(READY_THEN_ECHO, "1.0")}
    began = time.time()
    try:
        assert start_together(agents, plan, timeout_s=20) == []
        echoed = {ep: float(p.stdout.readline()) for ep, p in agents.items()}
    finally:
        for proc in agents.values():
            proc.kill()
            proc.wait()
    assert echoed["fast"] == echoed["slow"] == plan.start_at
    assert plan.start_at >= began + 1.0 + GO_LEAD_S  # after the slow one said READY


def test_the_start_follows_the_agents_not_the_plans_provisional_time():
    plan = Plan([], {}, start_at=time.time() + 30)
    agents = {"a": _stand_in(READY_THEN_ECHO, "0")}
    try:
        assert start_together(agents, plan, timeout_s=20) == []
    finally:
        agents["a"].kill()
        agents["a"].wait()
    assert plan.start_at < time.time() + 1


def test_an_agent_that_exits_is_not_waited_for_and_one_that_hangs_is_stopped():
    plan = Plan([], {}, start_at=0.0)
    agents = {"exits": _stand_in("pass"), "hangs": _stand_in("import time; time.sleep(60)"),
              "ready": _stand_in(READY_THEN_ECHO, "0")}
    try:
        errors = start_together(agents, plan, timeout_s=2)
        assert agents["hangs"].wait(5) != 0  # killed
    finally:
        for proc in agents.values():
            proc.kill()
            proc.wait()
    assert errors == ["agents of hangs were not listening within 2 s; stopped"]
