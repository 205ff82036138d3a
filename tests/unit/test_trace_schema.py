"""The fabric-trace format: the shipped example, round trips and every check's one-line error."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from fabric.errors import UserError
from fabric.traffic.trace import load_trace
from fabric.traffic.trace.schema import (Collective, Compute, TraceError, Workload, from_dict,
                                         load, save, to_dict, validate)

DATA = Path(__file__).resolve().parents[1] / "data" / "traces"
EXAMPLE = json.loads((DATA / "example.json").read_text())
MIB = 1 << 20


def test_the_example_reads_as_written():
    w = load_trace(DATA / "example.json")
    assert w.ranks == 4 and w.source == "example.json"
    assert w.groups["tp1"] == (2, 3) and w.groups["dp0"] == (0, 2)
    assert [(op.name, op.bytes, op.group) for op in w.collectives(1)] == [
        ("all_gather", 32 * MIB, "tp0"), ("reduce_scatter", 32 * MIB, "tp0"),
        ("all_reduce", 256 * MIB, "dp1"), ("all_to_all", 32 * MIB, "world")]
    assert w.collectives(0)[-1] == Collective("send", 8 * MIB, 1, None, 2)
    assert w.collectives(2)[-1] == Collective("recv", 8 * MIB, 1, None, 0)
    assert w.programs[0][0] == Compute(0.004, 0)
    assert w.steps == [0, 1]


def test_save_then_load_gives_the_same_workload(tmp_path):
    w = load_trace(DATA / "example.json")
    save(w, tmp_path / "again.json")
    again = load(tmp_path / "again.json")
    assert again.programs == w.programs and again.groups == w.groups
    assert to_dict(again) == EXAMPLE


def _mutated(change) -> dict:
    doc = copy.deepcopy(EXAMPLE)
    change(doc)
    return doc


def _set(path: list, value):
    def change(doc):
        target = doc
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return change


@pytest.mark.parametrize("change, message", [
    (_set(["programs", 3, 1, "group"], "dp0"),
     "example.json: event 1 (all_gather on rank 3): group 'dp0' does not contain rank 3"),
    (_set(["programs", 1, 1, "group"], "pp"), "event 1 (all_gather on rank 1): unknown group 'pp'"),
    (_set(["programs", 2, 4, "bytes"], 256 * MIB + 1),
     "event 4 (all_reduce on rank 2): collective 0 of group 'dp0' is all_reduce of 268435457 "
     "bytes on rank 2 but all_reduce of 268435456 bytes on rank 0"),
    (_set(["programs", 1, 3, "op"], "all_reduce"),
     "collective 1 of group 'tp0' is all_reduce of 33554432 bytes on rank 1 but reduce_scatter"),
    (_set(["programs", 3, 6], {"op": "compute", "seconds": 1}),
     "rank 3 issues 0 collectives on group 'world', rank 0 issues 1"),
    (_set(["programs", 0, 6, "op"], "broadcast"),
     "event 6 (broadcast on rank 0): the transport cannot run 'broadcast'"),
    (_set(["programs", 0, 1, "bytes"], 0), "bytes must be an integer >= 1, got 0"),
    (_set(["programs", 0, 0, "seconds"], -1), "event 0 (compute on rank 0): seconds must be"),
    (_set(["programs", 0, 0, "step"], -2), "step must be an integer >= 0"),
    (_set(["programs", 0, 7, "peer"], 0), "peer must be another rank in 0..3, got 0"),
    (_set(["programs", 2, 7, "bytes"], 7),
     "event 7 (recv on rank 2): receive 0 from rank 0 is 7 bytes, rank 0 sends 8388608"),
    (_set(["programs", 2, 7, "peer"], 1), "rank 0 sends 1 messages to rank 2, which receives 0"),
    (_set(["programs", 0, 1, "colour"], "red"), "event 1 (all_gather on rank 0): unknown field"),
    (_set(["groups", "tp0"], [0, 0]), "group 'tp0' needs distinct ranks"),
    (_set(["groups", "tp0"], [0, 4]), "group 'tp0' holds rank 4, outside 0..3"),
    (_set(["groups", "a/b"], [0]), "group name 'a/b' must be"),
    (_set(["version"], 2), "fabric-trace version 2 is not supported"),
    (_set(["ranks"], 5), "5 ranks but 4 programs"),
    (_set(["programs"], {}), "\"programs\" must be a list of lists"),
])
def test_a_bad_trace_fails_in_one_line(tmp_path, change, message):
    path = tmp_path / "example.json"
    path.write_text(json.dumps(_mutated(change)))
    with pytest.raises(TraceError) as info:
        load_trace(path)
    text = str(info.value)
    assert message in text and "\n" not in text and text.startswith("example.json")
    assert isinstance(info.value, UserError)


def test_not_json_and_not_a_trace_are_told_apart(tmp_path):
    (tmp_path / "a.json").write_text("{not json")
    (tmp_path / "b.json").write_text('{"hello": 1}')
    with pytest.raises(TraceError, match=r"^a.json: not JSON"):
        load_trace(tmp_path / "a.json")
    with pytest.raises(TraceError, match=r"^b.json: not a trace"):
        load_trace(tmp_path / "b.json")
    with pytest.raises(TraceError, match=r"no such file"):
        load_trace(tmp_path / "missing.json")
    with pytest.raises(TraceError, match=r"^b.json: not a fabric-trace file"):
        load(tmp_path / "b.json")


def test_validate_checks_a_workload_made_in_code():
    ok = Workload(2, {"g": (0, 1)}, ((Collective("all_reduce", 8, 0, "g"),),
                                     (Collective("all_reduce", 8, 0, "g"),)))
    validate(ok)
    bad = Workload(2, {"g": (0, 1)}, ((Collective("all_reduce", 8, 0, "g"),), ()), "mem")
    with pytest.raises(TraceError, match="mem: rank 1 issues 0 collectives on group 'g'"):
        validate(bad)
    with pytest.raises(TraceError, match="not a fabric-trace"):
        from_dict([], "x")
