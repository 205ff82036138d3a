"""The ``fabric`` command, run as a subprocess (no root needed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def fabric(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fabric.cli", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def test_topo_json_rail_clos():
    res = fabric("topo", "rail-clos,servers=8,gpus=2,servers_per_leaf=4,spines=4", "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["name"] == "rail-clos"
    roles = {}
    for node in data["nodes"]:
        roles.setdefault(node["role"], []).append(node)
    assert len(roles["host"]) == 16
    assert len(roles.get("storage", [])) == 0
    leaves, spines = roles["leaf"], roles["spine"]
    assert len(leaves) == 4 and len(spines) == 4
    assert sorted(sum(1 for n in leaves if n["rail"] == r) for r in (0, 1)) == [2, 2]
    links = {frozenset((link["a"], link["b"])) for link in data["links"]}
    assert len(links) == len(data["links"]) == 16 + 4 * 4
    for leaf in leaves:
        for spine in spines:
            assert frozenset((leaf["name"], spine["name"])) in links
    for link in data["links"]:
        assert link["gbps"] > 0 and isinstance(link["a_port"], int)
    # every host hangs off a leaf of its own rail
    by_name = {n["name"]: n for n in data["nodes"]}
    for host in roles["host"]:
        (link,) = [link for link in data["links"] if host["name"] in (link["a"], link["b"])]
        other = by_name[link["b"] if link["a"] == host["name"] else link["a"]]
        assert other["role"] == "leaf" and other["rail"] == host["rail"]


def test_topo_default_summary():
    res = fabric("topo")
    assert res.returncode == 0, res.stderr
    assert "bisection" in res.stdout
    assert "rail-clos" in res.stdout
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize("spec, names", [
    ("rail-clos,servers=0", ["servers"]),
    ("rail-clos,bogus=1", ["bogus"]),
    ("rail-clos,servers=x", ["servers", "'x'"]),
    ("nosuch", ["nosuch"]),
])
def test_topo_bad_spec_is_one_line(spec, names):
    res = fabric("topo", spec)
    assert res.returncode == 2
    assert "Traceback" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    for name in names:
        assert name in lines[0]
    assert res.stdout == ""


def test_topo_png(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "fat.png"
    res = fabric("topo", "fat-tree", "--png", str(out))
    assert res.returncode == 0, res.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert out.stat().st_size > 1000


@pytest.mark.skipif(os.geteuid() == 0, reason="only meaningful when not root")
def test_up_needs_root():
    res = fabric("up", timeout=60)
    assert res.returncode == 2
    assert "root" in res.stderr
    assert "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr


@pytest.mark.skipif(os.geteuid() == 0, reason="only meaningful when not root")
def test_run_needs_root_and_makes_no_directory(tmp_path):
    out = tmp_path / "run"
    res = fabric("run", "collisions", "--quick", "--out", str(out), timeout=60)
    assert res.returncode == 2 and "root" in res.stderr
    assert not out.exists()


def test_no_command_is_a_one_line_usage_error():
    res = fabric()
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        "fabric: the following arguments are required: command"]


@pytest.mark.parametrize("command", ["topo", "up", "traffic", "run", "plot", "controller",
                                     "clean"])
def test_every_subcommand_has_help(command):
    res = fabric(command, "--help")
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith(f"usage: fabric {command}")


def test_controller_refuses_a_busy_port_with_one_line():
    import socket

    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "fabric.cli", "controller", "ecmp",
                               "--topo", "leaf-spine", "--port", str(port)],
                              cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "busy" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_controller_rejects_a_bad_config_file(tmp_path):
    config = tmp_path / "ctl.json"
    config.write_text('{"lanes": [{"name": "a", "share": 2.0, "default": true}]}')
    proc = subprocess.run([sys.executable, "-m", "fabric.cli", "controller", "ecmp",
                           "--topo", "leaf-spine", "--config", str(config)],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "share" in proc.stderr and "Traceback" not in proc.stderr


def _run_parser(name: str):
    from fabric.cli import build_parser

    run = build_parser()._subparsers._group_actions[0].choices["run"]
    return run._subparsers._group_actions[0].choices[name]


def test_a_controller_app_goes_only_into_collisions_under_a_new_name(tmp_path, capsys):
    from fabric.cli import build_parser
    from fabric.cli.common import UsageError
    from fabric.cli.run import run_context

    pytest.importorskip("os_ken")
    app = tmp_path / "my_app.py"
    app.write_text("from os_ken.base.app_manager import OSKenApp\n"
                   "class Flowlets(OSKenApp):\n    pass\n"
                   "class spray(OSKenApp):\n    pass\n")
    out = ["--out", str(tmp_path / "out")]
    args = build_parser().parse_args(["run", "collisions", "--controller-app",
                                      f"{app}:Flowlets", *out])
    assert run_context(args).values["controller_app"].endswith("my_app.py:Flowlets")
    for argv, message in [
            (["run", "collisions", "--controller-app", f"{app}:spray"], "built-in policy's name"),
            (["run", "incast", "--controller-app", f"{app}:Flowlets"], "unrecognized arguments")]:
        with pytest.raises(SystemExit):
            build_parser().parse_args([*argv, *out])
        assert message in capsys.readouterr().err
    args = build_parser().parse_args(["run", "collisions", "--app-entropy", "packet", *out])
    with pytest.raises(UsageError, match="--app-entropy: applies to --controller-app only"):
        run_context(args)


def test_each_experiment_takes_exactly_the_options_it_declares():
    import experiments
    from fabric.experiment.options import ROCE_OPTIONS

    for name in experiments.EXPERIMENTS:
        flags = {o for a in _run_parser(name)._actions for o in a.option_strings}
        declared = {o.flag for o in experiments.load(name).options}
        assert declared <= flags
        assert not ({o.flag for o in ROCE_OPTIONS} - declared) & flags, name
    assert "--spray-entropy" in {o.flag for o in experiments.load("failures").options}
    assert "--cc" not in {o.flag for o in experiments.load("incast").options}


def test_an_experiment_on_roce_runs_as_its_seed_system_unless_told_otherwise(tmp_path):
    """placement (RSC) on its default transport takes the rsc preset: lossless, no
    congestion control, static routes; --transport tcp, --flow-control or another
    --preset say otherwise, and a given --cc stays."""
    from fabric.cli import build_parser
    from fabric.cli.run import run_context

    def context(*argv):
        out = ["--out", str(tmp_path / f"out{len(argv)}")]
        return run_context(build_parser().parse_args(["run", "placement", *argv, *out]))

    ctx = context()
    assert ctx.preset.name == "rsc" and ctx.flow_control is not None
    assert ctx.roce().cc == "none" and ctx.options().policy == "static"
    assert context("--cc", "dcqcn").roce().cc == "dcqcn"
    tcp = context("--transport", "tcp")
    assert tcp.preset is None and tcp.flow_control is None
    lossy = context("--flow-control", "none")
    assert lossy.preset is None and lossy.flow_control is None and lossy.roce().cc == "swift"
    assert context("--preset", "colossus").preset.name == "colossus"
    assert context("--transport", "tcp", "--preset", "rsc").flow_control is not None


def test_every_bring_up_says_which_controller_routes_it():
    import argparse

    from fabric.cli.common import controller_text

    def args(**kw):
        return argparse.Namespace(**{"routing": "spray", "controller_app": None,
                                     "controller": None, **kw})

    assert controller_text(args()) == "spray (built-in)"
    assert controller_text(args(controller_app="/x/app.py:Mine")) == "your app /x/app.py:Mine"
    assert controller_text(args(controller="remote:127.0.0.1:6633")) == \
        "remote 127.0.0.1:6633 (already running)"


def test_traffic_csv_joins_list_cells_of_any_type(capsys):
    from fabric.cli.common import print_csv

    print_csv([{"id": "t0", "path": ["h0", "l0", "h1"], "src_ports": [49152, 49153]},
                {"id": "t1", "fct_s": 1.5}])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "fct_s,id,path,src_ports"
    assert lines[1:] == [",t0,h0/l0/h1,49152/49153", "1.5,t1,,"]


def test_run_attempts_default_is_the_experiments_and_is_named_in_the_help():
    from fabric.experiment.context import DEFAULT_ATTEMPTS, RunContext

    attempts = next(a for a in _run_parser("collisions")._actions if a.dest == "attempts")
    assert f"default: {DEFAULT_ATTEMPTS};" in attempts.help
    assert RunContext(Path("x")).attempts == DEFAULT_ATTEMPTS
