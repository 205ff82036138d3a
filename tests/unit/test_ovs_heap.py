"""ovs-vswitchd starts with glibc's heap trimming off, tcmalloc and the idle-accept
library preloaded, and one that did not is restarted (pure code: the daemon's start
is faked)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fabric.emulation import idle_accept, ovs

ENV = ovs.vswitchd_env(None)


def test_started_with_reads_the_process_environment() -> None:
    child = "import time; print('up', flush=True); time.sleep(30)"
    with subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True,
                          env={**os.environ, **ENV}) as proc:
        try:
            # Popen returns once exec began; the kernel fills /proc/PID/environ a little
            # later, so wait until the program itself runs
            assert proc.stdout.readline() == "up\n"
            assert ovs.started_with(proc.pid, ENV)
            assert not ovs.started_with(proc.pid, {"GLIBC_TUNABLES": "glibc.malloc.x=1"})
        finally:
            proc.kill()
    assert not ovs.started_with(2**22 + 1, {})  # no such process: restart it


def test_glibc_reads_the_tunable() -> None:
    # glibc ignores a tunable it does not know without a word: check it reads this one
    proc = subprocess.run(["/lib64/ld-linux-x86-64.so.2", "--list-tunables"],
                          env=ENV, capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip("this loader cannot list its tunables")
    name, value = ENV["GLIBC_TUNABLES"].split("=")
    assert f"{name}: {hex(int(value))} " in proc.stdout


def test_libraries_are_preloaded_only_when_present(tmp_path) -> None:
    library, shim = tmp_path / ovs.TCMALLOC, tmp_path / "idle_accept.so"
    assert ovs.vswitchd_env(library)["LD_PRELOAD"] == str(library)
    assert ovs.vswitchd_env(None, shim)["LD_PRELOAD"] == str(shim)
    assert ovs.vswitchd_env(library, shim)["LD_PRELOAD"] == f"{library} {shim}"
    assert "LD_PRELOAD" not in ovs.vswitchd_env(None)
    for env in (ovs.vswitchd_env(library, shim), ovs.vswitchd_env(None)):
        assert env["GLIBC_TUNABLES"] == ENV["GLIBC_TUNABLES"]


@pytest.mark.parametrize("tcmalloc, shim_builds", [(True, True), (False, True), (True, False)])
def test_settings_say_what_is_missing(monkeypatch, tmp_path, tcmalloc, shim_builds) -> None:
    shim = tmp_path / "idle_accept.so"

    def build() -> Path:
        if not shim_builds:
            raise idle_accept.BuildError("clang is missing")
        return shim

    monkeypatch.setattr(ovs, "_library", lambda name: tmp_path / name if tcmalloc else None)
    monkeypatch.setattr(idle_accept, "library", build)
    env, warnings = ovs.vswitchd_settings()
    assert env == ovs.vswitchd_env(tmp_path / ovs.TCMALLOC if tcmalloc else None,
                                   shim if shim_builds else None)
    assert [ovs.TCMALLOC in w for w in warnings] == ([] if tcmalloc else [True]) + (
        [] if shim_builds else [False])
    assert shim_builds or "clang is missing" in warnings[-1]


class FakeDaemons:
    """ovs-vswitchd as ensure_running sees it: our pid, its environment, its restart."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, env_ok: bool, bridges: list[str],
                 tcmalloc: bool = True, send_buffer: int = 8 << 20) -> None:
        self.started = self.stopped = 0
        self.send_buffers: list[int] = []
        self.env = ovs.vswitchd_env(Path("/usr/lib") / ovs.TCMALLOC if tcmalloc else None,
                                    Path("/run/fabric/preload/idle_accept.so"))
        missing = [] if tcmalloc else [f"{ovs.TCMALLOC} is not installed"]
        monkeypatch.setattr(ovs, "vswitchd_settings", lambda: (self.env, missing))
        monkeypatch.setattr(ovs, "_daemon_pid", lambda name: 4242)
        monkeypatch.setattr(ovs, "_marker_pid", lambda: 4242)
        monkeypatch.setattr(ovs, "started_with",
                            lambda pid, env: env_ok and env == self.env)
        monkeypatch.setattr(ovs, "started_send_buffer", lambda pid: send_buffer)
        monkeypatch.setattr(ovs, "bridges", lambda: bridges)
        monkeypatch.setattr(ovs, "prioritize_forwarding", lambda pid: [])
        monkeypatch.setattr(ovs, "_start_vswitchd_with_wmem", self._start)
        monkeypatch.setattr(ovs.system, "run", self._run)

    def _start(self, env: dict[str, str], send_buffer: int) -> int:
        assert env == self.env
        self.started += 1
        self.send_buffers.append(send_buffer)
        return 4343

    def _run(self, args: list[str], **kwargs) -> None:
        assert args[:4] == ["ovs-appctl", "-t", "ovs-vswitchd", "exit"]
        self.stopped += 1


@pytest.mark.parametrize("env_ok", [True, False])
def test_our_daemon_is_restarted_only_when_it_trims_its_heap(monkeypatch, env_ok) -> None:
    daemons = FakeDaemons(monkeypatch, env_ok, bridges=[])
    assert ovs.ensure_running("user", 8 << 20) == []
    assert (daemons.stopped, daemons.started) == ((0, 0) if env_ok else (1, 1))


@pytest.mark.parametrize("need, restarted", [(4 << 20, False), (8 << 20, False),
                                             (16 << 20, True)])
def test_our_daemon_is_restarted_when_its_send_buffer_is_too_small(monkeypatch, need,
                                                                     restarted) -> None:
    daemons = FakeDaemons(monkeypatch, env_ok=True, bridges=[], send_buffer=8 << 20)
    assert ovs.ensure_running("user", need) == []
    assert daemons.send_buffers == ([need] if restarted else [])


def test_a_daemon_with_bridges_is_left_running_with_a_warning(monkeypatch) -> None:
    daemons = FakeDaemons(monkeypatch, env_ok=False, bridges=["s1"])
    warnings = ovs.ensure_running("user", 8 << 20)
    assert len(warnings) == 1 and "heap trimming" in warnings[0]
    assert (daemons.stopped, daemons.started) == (0, 0)


def test_a_daemon_started_without_tcmalloc_says_so(monkeypatch) -> None:
    daemons = FakeDaemons(monkeypatch, env_ok=False, bridges=[], tcmalloc=False)
    warnings = ovs.ensure_running("user", 8 << 20)
    assert len(warnings) == 1 and ovs.TCMALLOC in warnings[0]
    assert (daemons.stopped, daemons.started) == (1, 1)
