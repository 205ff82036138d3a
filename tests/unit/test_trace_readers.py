"""The PyTorch profiler and Chakra readers, on the shipped traces and on small bad files.

The expectations come from what tests/data/traces/make_traces.py ran (its constants).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest

from fabric.traffic.trace import Collective, Compute, TraceError, load_trace
from fabric.traffic.trace import chakra as chakra_reader

DATA = Path(__file__).resolve().parents[1] / "data" / "traces"
_spec = importlib.util.spec_from_file_location("make_traces", DATA / "make_traces.py")
made = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(made)


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ImportError:  # a missing parent package
        return False


HAS_CHAKRA = _importable("chakra.schema.protobuf.et_def_pb2") and _importable("google.protobuf")
needs_chakra = pytest.mark.skipif(not HAS_CHAKRA, reason="mlc-chakra is not installed")

F32, BF16 = 4, 2


def expected_step(rank: int) -> list[tuple]:
    """(name, bytes, group, peer) of one step of rank ``rank`` in make_traces.step()."""
    tp = "1" if rank < 2 else "2"  # torch numbers the groups in creation order
    dp = "3" if rank % 2 == 0 else "4"
    out = [("all_gather", 2 * made.TP_GATHER_IN * F32, tp, None),
           ("reduce_scatter", made.TP_SCATTER_IN * F32, tp, None),
           ("all_reduce", made.DP_REDUCE * BF16, dp, None),
           ("all_to_all", made.A2A * F32, "0", None)]
    if rank == 0:
        out.append(("send", made.P2P * F32, None, 2))
    if rank == 2:
        out.append(("recv", made.P2P * F32, None, 0))
    return out


def test_the_profiled_job_reads_as_it_ran():
    w = load_trace(DATA / "kineto")
    assert w.ranks == made.WORLD
    assert w.groups == {"0": (0, 1, 2, 3), "1": (0, 1), "2": (2, 3), "3": (0, 2), "4": (1, 3)}
    assert w.steps == [2, 3, 4]  # ProfilerStep#2..#4: wait 1, warmup 1, active 3
    for rank in range(made.WORLD):
        got = [(op.name, op.bytes, op.group, op.peer) for op in w.collectives(rank)]
        assert got == expected_step(rank) * made.STEPS
        steps = [op.step for op in w.collectives(rank)]
        assert steps == sorted(steps) and steps[0] == 2 and steps[-1] == 4


def test_the_profiled_job_has_compute_gaps_where_it_computed():
    w = load_trace(DATA / "kineto")
    for program in w.programs:
        assert all(isinstance(a, Collective) or isinstance(b, Collective)
                   for a, b in zip(program, program[1:]))  # gaps are merged
        # every matmul of make_traces.PHASES is a gap of a few ms before its collective
        for step in w.steps:
            ops = [op for op in program if op.step == step]
            names = [op.name if isinstance(op, Collective) else "compute" for op in ops]
            assert names[:8] == ["compute", "all_gather", "compute", "reduce_scatter",
                                 "compute", "all_reduce", "compute", "all_to_all"]
            phases = [ops[i].seconds for i in (0, 2, 4, 6)]
            assert all(0.001 < g < 0.03 for g in phases), phases
            # about 20-30 ms of compute a step (the matmuls alone take about 10 ms; the 4
            # ranks share 2 cores), little besides them
            total = sum(op.seconds for op in ops if isinstance(op, Compute))
            assert 0.015 < total < 0.04 and total - sum(phases) < 0.003, (step, total)


def test_a_single_rank_file_asks_for_the_others():
    with pytest.raises(TraceError, match=r"^rank1.json: no file for rank 0 of 4"):
        load_trace(DATA / "kineto" / "rank1.json")


def _copy_kineto(tmp_path: Path) -> Path:
    target = tmp_path / "job"
    shutil.copytree(DATA / "kineto", target)
    return target


def _edit(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def test_ranks_that_disagree_are_named(tmp_path):
    job = _copy_kineto(tmp_path)

    def bigger_gather(data):
        for e in data["traceEvents"]:
            if e.get("name") == "c10d::_allgather_base_":
                e["args"]["Input Dims"][0] = [4 * made.TP_GATHER_IN]
                break
    _edit(job / "rank1.json", bigger_gather)
    bigger, size = 4 * made.TP_GATHER_IN * F32, 2 * made.TP_GATHER_IN * F32
    with pytest.raises(TraceError, match=rf"^rank1.json: event \d+ \(c10d::_allgather_base_ on "
                                         rf"rank 1\): collective 0 of group '1' is all_gather "
                                         rf"of {bigger} bytes on rank 1 but all_gather of "
                                         rf"{size} bytes on rank 0"):
        load_trace(job)


def test_a_gloo_trace_whose_threads_do_not_name_the_groups_is_refused(tmp_path):
    job = _copy_kineto(tmp_path)
    _edit(job / "rank0.json", lambda d: d["distributedInfo"]["pg_config"].append(
        {"pg_name": "9", "ranks": [0]}))
    with pytest.raises(TraceError, match=r"^rank0.json: event \d+ \(c10d::_allgather_base_ on "
                                         r"rank 0\): cannot tell which process group"):
        load_trace(job)


def test_a_trace_without_communication_is_refused(tmp_path):
    path = tmp_path / "quiet.json"
    path.write_text(json.dumps({"traceEvents": [{"ph": "X", "name": "aten::mm", "ts": 1,
                                                 "dur": 2, "tid": 1}],
                                "distributedInfo": {"rank": 0, "world_size": 1}}))
    with pytest.raises(TraceError, match=r"^quiet.json: no communication events"):
        load_trace(path)
    path.write_text(json.dumps({"traceEvents": []}))  # one process, not distributed
    with pytest.raises(TraceError, match=r"^quiet.json: no communication events"):
        load_trace(path)


# --- record_param_comms, as torch writes it with NCCL ---------------------------------


def comms_event(ts: float, dur: float, name: str, nelems: tuple[int, int], dtype: str,
                pg: str, ranks: list[int], rank: int) -> dict:
    return {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "ts": ts, "dur": dur,
            "tid": 7, "args": {"Collective name": name, "In msg nelems": nelems[0],
                               "Out msg nelems": nelems[1], "dtype": dtype,
                               "Process Group Name": pg, "Process Group Ranks": str(ranks),
                               "Group size": len(ranks), "Rank": rank}}


def nccl_trace(rank: int, extra: list[dict] | None = None) -> dict:
    events = [{"ph": "X", "name": "ProfilerStep#7", "ts": 0.0, "dur": 5000.0, "tid": 7},
              comms_event(1000.0, 500.0, "allreduce", (256, 256), "BFloat16", "0", [0, 1],
                          rank),
              comms_event(2000.0, 100.0, "_allgather_base", (64, 128), "Float", "0", [0, 1],
                          rank),
              comms_event(2100.0, 1.0, "wait", (0, 0), "Float", "0", [0, 1], rank),
              comms_event(3000.0, 10.0, "send" if rank == 0 else "recv", (16, 16), "Int",
                          "0", [0, 1], 1 - rank)]
    return {"traceEvents": events + (extra or []),
            "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2}}


def test_record_param_comms_events_give_sizes_groups_peers_and_gaps(tmp_path):
    for rank in (0, 1):
        (tmp_path / f"r{rank}.json").write_text(json.dumps(nccl_trace(rank)))
    w = load_trace(tmp_path)
    assert w.groups == {"0": (0, 1)}
    assert [(op.name, op.bytes, op.peer, op.step) for op in w.collectives(0)] == [
        ("all_reduce", 512, None, 7), ("all_gather", 512, None, 7), ("send", 64, 1, 7)]
    assert w.collectives(1)[-1] == Collective("recv", 64, 7, None, 0)
    gaps = [round(op.seconds, 6) for op in w.programs[0] if isinstance(op, Compute)]
    assert gaps == [0.001, 0.0005, 0.0009]  # step start -> 1000, 1500 -> 2000, 2100 -> 3000


def test_a_collective_the_transport_cannot_run_is_named(tmp_path):
    bcast = comms_event(4000.0, 10.0, "broadcast", (8, 8), "Float", "0", [0, 1], 0)
    for rank in (0, 1):
        (tmp_path / f"r{rank}.json").write_text(json.dumps(nccl_trace(rank, [bcast])))
    with pytest.raises(TraceError, match=r"^r0.json: event 5 \(broadcast on rank 0\): the "
                                         r"transport cannot run 'broadcast'"):
        load_trace(tmp_path)


def test_an_unknown_element_type_is_named(tmp_path):
    odd = comms_event(4000.0, 10.0, "allreduce", (8, 8), "Quaternion", "0", [0, 1], 0)
    (tmp_path / "r0.json").write_text(json.dumps(nccl_trace(0, [odd])))
    (tmp_path / "r1.json").write_text(json.dumps(nccl_trace(1)))
    with pytest.raises(TraceError, match=r"^r0.json: event 5: unknown element type"):
        load_trace(tmp_path)


# --- Chakra ------------------------------------------------------------------------------


@needs_chakra
def test_the_converted_chakra_trace_reads_as_the_model_says():
    w = load_trace(DATA / "chakra")
    assert w.ranks == made.WORLD and w.groups == {"world": (0, 1, 2, 3)}
    for program in w.programs:
        # per pass: fwd 100+200, bwd-wg 120 -> all-reduce layer1; bwd-ig 160, wg 60 -> layer0
        assert [(type(op).__name__, getattr(op, "bytes", None),
                 round(getattr(op, "seconds", 0.0), 9)) for op in program] == [
            ("Compute", None, 420e-6), ("Collective", 131072, 0.0),
            ("Compute", None, 220e-6), ("Collective", 65536, 0.0)] * 2
    assert load_trace(DATA / "chakra" / "dp.2.et").programs == w.programs


def _write_et(path: Path, nodes: list) -> None:
    from chakra.schema.protobuf import et_def_pb2 as pb

    out = bytearray()
    for message in [pb.GlobalMetadata(version="0.0.4")] + nodes:
        blob = message.SerializeToString()
        size = len(blob)
        while True:
            byte = size & 0x7F
            size >>= 7
            out.append(byte | (0x80 if size else 0))
            if not size:
                break
        out += blob
    path.write_bytes(bytes(out))


def _coll(pb, nid: int, comm_type: int, size: int, deps=(), pg: str | None = None):
    attrs = [pb.AttributeProto(name="comm_type", int64_val=comm_type),
             pb.AttributeProto(name="comm_size", int64_val=size)]
    if pg:
        attrs.append(pb.AttributeProto(name="pg_name", string_val=pg))
    return pb.Node(id=nid, name=f"c{nid}", type=pb.COMM_COLL_NODE, data_deps=list(deps),
                   attr=attrs)


@needs_chakra
def test_chakra_groups_dependencies_and_refusals(tmp_path):
    from chakra.schema.protobuf import et_def_pb2 as pb

    for rank in (0, 1):  # node 3 is listed first but depends on node 5
        _write_et(tmp_path / f"job.{rank}.et", [
            _coll(pb, 3, pb.ALL_GATHER, 100, deps=[5], pg="tp"),
            pb.Node(id=1, name="ProfilerStep#4", type=pb.COMP_NODE, duration_micros=0),
            pb.Node(id=5, name="mm", type=pb.COMP_NODE, duration_micros=250, data_deps=[1]),
            _coll(pb, 6, pb.ALL_TO_ALL, 64, deps=[3])])
    (tmp_path / "comm_group.json").write_text('{"tp": [0, 1]}')
    w = load_trace(tmp_path)
    assert w.groups == {"world": (0, 1), "tp": (0, 1)}
    assert w.programs[0] == (Compute(250e-6, 4), Collective("all_gather", 200, 4, "tp"),
                             Collective("all_to_all", 64, 4, "world"))
    _write_et(tmp_path / "job.1.et", [_coll(pb, 1, pb.BROADCAST, 8)])
    with pytest.raises(TraceError, match=r"^job.1.et: node 1 \(c1 on rank 1\): the transport "
                                         r"cannot run BROADCAST"):
        load_trace(tmp_path)
    _write_et(tmp_path / "job.1.et", [_coll(pb, 1, pb.ALL_REDUCE, 8, deps=[2]),
                                      _coll(pb, 2, pb.ALL_REDUCE, 8, deps=[1])])
    with pytest.raises(TraceError, match=r"^job.1.et: node 1 is on a dependency cycle"):
        load_trace(tmp_path)


@needs_chakra
def test_chakra_files_without_communication_or_garbage_are_refused(tmp_path):
    from chakra.schema.protobuf import et_def_pb2 as pb

    _write_et(tmp_path / "w.0.et", [pb.Node(id=1, name="mm", type=pb.COMP_NODE)])
    with pytest.raises(TraceError, match=r"no communication nodes"):
        load_trace(tmp_path / "w.0.et")
    (tmp_path / "w.0.et").write_bytes(b"\xff\xff\xff\xff\x0f")
    with pytest.raises(TraceError, match=r"^w.0.et: truncated or not a Chakra trace"):
        load_trace(tmp_path)


def test_reading_chakra_without_mlc_chakra_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "chakra.schema.protobuf", None)  # import fails
    (tmp_path / "w.0.et").write_bytes(b"\x00")
    with pytest.raises(TraceError) as info:
        load_trace(tmp_path)
    assert str(info.value) == ("reading Chakra traces needs mlc-chakra: "
                               f"{chakra_reader.INSTALL_HINT}")


def test_a_chakra_file_needs_a_rank_in_its_name(tmp_path):
    (tmp_path / "trace.et").write_bytes(b"")
    with pytest.raises(TraceError, match=r"^trace.et: a Chakra trace is named"):
        load_trace(tmp_path)
