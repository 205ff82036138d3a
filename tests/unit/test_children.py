"""fabric's child Pythons run this checkout's code, wherever they are started from."""

from __future__ import annotations

import os
import subprocess

from fabric.children import SOURCE_ROOT, child_env, log_tail, start_python


def test_the_source_root_goes_first_and_the_callers_path_stays(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/users/apps")
    assert child_env()["PYTHONPATH"].split(os.pathsep) == [str(SOURCE_ROOT), "/users/apps"]
    monkeypatch.delenv("PYTHONPATH")
    assert child_env()["PYTHONPATH"] == str(SOURCE_ROOT)


def test_a_child_started_elsewhere_imports_this_checkout(tmp_path, monkeypatch):
    (tmp_path / "fabric").mkdir()  # a stray package of the same name where the caller is
    (tmp_path / "fabric" / "__init__.py").write_text("raise ImportError('not this one')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    proc = start_python("fabric.agent", ["--help"], stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out.decode()
    assert b"--plan PLAN" in out


def test_a_logs_tail_is_one_line_and_a_missing_log_says_so(tmp_path):
    log = tmp_path / "child.log"
    log.write_text("one\ntwo\nthree\nfour\n")
    assert log_tail(log, 2) == "three | four"
    assert log_tail(tmp_path / "none.log") == "(no log)"
