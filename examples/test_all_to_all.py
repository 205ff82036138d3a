"""The example experiment, run against a stand-in fabric (no root): what it writes,
how its table reads, and that the command line would take it as one more experiment.
``tests/integration/test_experiments.py`` runs it on a real fabric."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import all_to_all
from fabric.analysis import results
from fabric.emulation import fidelity
from fabric.experiment import RunContext
from fabric.traffic.model import Plan
from tests.fake_emulation import FakeEmulation, backends


def fake_traffic(emu, transfers, transport, workdir, seed, deadline_s=120.0, during=None):
    """Every transfer takes one second under ecmp, half of it sprayed."""
    took = 1.0 if transport.entropy == "flow" else 0.5
    rows = [{"id": t.id, "src": t.src, "dst": t.dst, "bytes": t.bytes, "send_start": 10.0,
             "recv_end": 10.0 + took, "fct_s": took, "path": None} for t in transfers]
    return SimpleNamespace(transfer_rows=lambda: rows, errors=[], paths={}, flow_control=[],
                           plan=Plan(list(transfers), {}, transport, 10.0),
                           fidelity=[fidelity.Check("ovs_input_delay_ms", 0.1, 1.0, True)])


@pytest.fixture
def fabric():
    """The emulator's run loop on a stand-in fabric, every run played by fake_traffic."""
    FakeEmulation.made = []
    return backends(fake_traffic)


def test_the_example_runs_both_policies_and_tables_their_times(tmp_path, fabric):
    outcome = all_to_all.EXPERIMENT.run(RunContext(tmp_path, quick=True, seeds=2), fabric)
    assert [o.policy for o in FakeEmulation.made] == ["ecmp", "spray"]  # one bring-up each
    assert outcome.valid and outcome.seeds == [0, 1]
    assert outcome.table == [{"policy": "ecmp", "seconds": 1.0},
                             {"policy": "spray", "seconds": 0.5}]
    runs = results.read_csv(tmp_path / "runs.csv")
    assert [(r["policy"], r["seed"]) for r in runs] == [("ecmp", "0"), ("ecmp", "1"),
                                                         ("spray", "0"), ("spray", "1")]
    assert results.read_json(tmp_path / "summary.json")["question"] == \
        all_to_all.AllToAll.question
    assert [p.name for p in all_to_all.EXPERIMENT.plot(tmp_path)] == ["seconds.png",
                                                                     "seconds.pdf"]


def test_an_unfinished_all_to_all_has_no_time_and_no_table_row(tmp_path):
    def unfinished(*args, **kwargs):
        result = fake_traffic(*args, **kwargs)
        rows = result.transfer_rows()
        rows[0].update(recv_end=None, fct_s=None)
        return SimpleNamespace(**{**vars(result), "transfer_rows": lambda: rows})

    outcome = all_to_all.EXPERIMENT.run(RunContext(tmp_path, quick=True), backends(unfinished))
    assert outcome.table == [] and not outcome.valid


def test_the_command_line_takes_it_as_one_more_experiment(tmp_path, monkeypatch):
    import experiments
    from fabric.cli import build_parser
    from fabric.cli.run import run_context

    monkeypatch.setitem(experiments.EXPERIMENTS, "all-to-all", "all_to_all")
    args = build_parser().parse_args(["run", "all-to-all", "--quick", "--seeds", "3",
                                      "--out", str(tmp_path / "out")])
    assert args.experiment is all_to_all.EXPERIMENT
    assert run_context(args).seeds == 3
