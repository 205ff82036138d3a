"""The undo log on disk: a signal or SIGKILL between writing a new state and renaming it
neither leaves a temporary file nor loses what the run made."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from fabric.emulation import runstate


@pytest.fixture
def runs_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(runstate, "RUNS_DIR", tmp_path)
    return tmp_path


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _state(pid: int, bridges: list[str]) -> runstate.RunState:
    return runstate.RunState(run_id=f"20261201-120000-{pid}", owner_pid=pid, bridges=bridges)


class _Interrupt(BaseException):
    """What SIGTERM or SIGINT raise in a run."""


def test_a_signal_during_the_write_keeps_the_old_state_and_no_temporary_file(runs_dir,
                                                                                monkeypatch):
    state = _state(os.getpid(), ["b0"])
    state.save()
    state.bridges.append("b1")
    real_write = runstate.Path.write_text

    def interrupted(self, text, *args, **kwargs):
        real_write(self, text[:10])   # half a file, then the signal
        raise _Interrupt

    monkeypatch.setattr(runstate.Path, "write_text", interrupted)
    with pytest.raises(_Interrupt):
        state.save()
    assert [p.name for p in runs_dir.iterdir()] == [state.path.name]
    assert json.loads(state.path.read_text())["bridges"] == ["b0"]


def test_a_signal_before_the_rename_still_puts_the_new_state_in_place(runs_dir, monkeypatch):
    state = _state(os.getpid(), ["b0"])
    calls = []
    real_replace = os.replace

    def interrupted_once(src, dst):
        calls.append(src)
        if len(calls) == 1:
            raise _Interrupt
        real_replace(src, dst)

    monkeypatch.setattr(runstate.os, "replace", interrupted_once)
    with pytest.raises(_Interrupt):
        state.save()
    assert [p.name for p in runs_dir.iterdir()] == [state.path.name]
    assert json.loads(state.path.read_text())["bridges"] == ["b0"]


def test_load_all_adopts_a_dead_runs_complete_temporary_file_and_drops_a_partial_one(runs_dir):
    dead = _state(_dead_pid(), ["old"])
    dead.save()
    newer = _state(dead.owner_pid, ["old", "new"])
    newer.tmp_path.write_text(json.dumps(runstate.asdict(newer)))   # killed before the rename
    partial = _state(_dead_pid() + 100000, ["x"])
    partial.tmp_path.write_text('{"run_id": ')
    live = _state(os.getpid(), ["mine"])
    live.tmp_path.write_text('{"run_id": ')                          # mid-save in a live run
    states = runstate.load_all()
    assert [s.bridges for s in states] == [["old", "new"]]
    assert not newer.tmp_path.exists() and not partial.tmp_path.exists()
    assert live.tmp_path.exists()


def test_undo_removes_the_temporary_file_too(runs_dir):
    state = _state(_dead_pid(), [])
    state.save()
    state.tmp_path.write_text("{}")
    assert runstate.undo(state) == []
    assert list(runs_dir.iterdir()) == []
