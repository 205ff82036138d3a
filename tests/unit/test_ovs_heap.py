"""ovs-vswitchd starts with glibc's heap trimming off and tcmalloc preloaded, and one
that did not is restarted (pure code: the daemon's start is faked)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fabric.emulation import ovs


def test_started_with_reads_the_process_environment() -> None:
    child = "import time; print('up', flush=True); time.sleep(30)"
    with subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True,
                          env={**os.environ, **ovs.VSWITCHD_ENV}) as proc:
        try:
            # Popen returns once exec began; the kernel fills /proc/PID/environ a little
            # later, so wait until the program itself runs
            assert proc.stdout.readline() == "up\n"
            assert ovs.started_with(proc.pid, ovs.VSWITCHD_ENV)
            assert not ovs.started_with(proc.pid, {"GLIBC_TUNABLES": "glibc.malloc.x=1"})
        finally:
            proc.kill()
    assert not ovs.started_with(2**22 + 1, {})  # no such process: restart it


def test_glibc_reads_the_tunable() -> None:
    # glibc ignores a tunable it does not know without a word: check it reads this one
    proc = subprocess.run(["/lib64/ld-linux-x86-64.so.2", "--list-tunables"],
                          env=ovs.VSWITCHD_ENV, capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip("this loader cannot list its tunables")
    name, value = ovs.VSWITCHD_ENV["GLIBC_TUNABLES"].split("=")
    assert f"{name}: {hex(int(value))} " in proc.stdout


def test_tcmalloc_is_preloaded_only_when_installed(tmp_path) -> None:
    library = tmp_path / ovs.TCMALLOC
    assert ovs.vswitchd_env(library)["LD_PRELOAD"] == str(library)
    assert "LD_PRELOAD" not in ovs.vswitchd_env(None)
    for env in (ovs.vswitchd_env(library), ovs.vswitchd_env(None)):
        assert env["GLIBC_TUNABLES"] == ovs.VSWITCHD_ENV["GLIBC_TUNABLES"]


class FakeDaemons:
    """ovs-vswitchd as ensure_running sees it: our pid, its environment, its restart."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, env_ok: bool, bridges: list[str],
                 tcmalloc: bool = True) -> None:
        self.started = self.stopped = 0
        monkeypatch.setattr(ovs, "VSWITCHD_ENV", ovs.vswitchd_env(
            Path("/usr/lib") / ovs.TCMALLOC if tcmalloc else None))
        monkeypatch.setattr(ovs, "_daemon_pid", lambda name: 4242)
        monkeypatch.setattr(ovs, "_marker_pid", lambda: 4242)
        monkeypatch.setattr(ovs, "started_with",
                            lambda pid, env: env_ok and env == ovs.VSWITCHD_ENV)
        monkeypatch.setattr(ovs, "bridges", lambda: bridges)
        monkeypatch.setattr(ovs, "prioritize_forwarding", lambda pid: [])
        monkeypatch.setattr(ovs, "_start_vswitchd_with_wmem", self._start)
        monkeypatch.setattr(ovs.system, "run", self._run)

    def _start(self) -> int:
        self.started += 1
        return 4343

    def _run(self, args: list[str], **kwargs) -> None:
        assert args[:4] == ["ovs-appctl", "-t", "ovs-vswitchd", "exit"]
        self.stopped += 1


@pytest.mark.parametrize("env_ok", [True, False])
def test_our_daemon_is_restarted_only_when_it_trims_its_heap(monkeypatch, env_ok) -> None:
    daemons = FakeDaemons(monkeypatch, env_ok, bridges=[])
    assert ovs.ensure_running("user") == []
    assert (daemons.stopped, daemons.started) == ((0, 0) if env_ok else (1, 1))


def test_a_daemon_with_bridges_is_left_running_with_a_warning(monkeypatch) -> None:
    daemons = FakeDaemons(monkeypatch, env_ok=False, bridges=["s1"])
    warnings = ovs.ensure_running("user")
    assert len(warnings) == 1 and "heap trimming" in warnings[0]
    assert (daemons.stopped, daemons.started) == (0, 0)


def test_a_daemon_started_without_tcmalloc_says_so(monkeypatch) -> None:
    daemons = FakeDaemons(monkeypatch, env_ok=False, bridges=[], tcmalloc=False)
    warnings = ovs.ensure_running("user")
    assert len(warnings) == 1 and ovs.TCMALLOC in warnings[0]
    assert (daemons.stopped, daemons.started) == (1, 1)
