"""Named traffic patterns: bad requests are refused with what is allowed."""

from __future__ import annotations

import pytest

import topologies
from fabric.traffic.model import ScheduleError, TransportSpec
from fabric.traffic.patterns import PatternSpec, make_transfers
from fabric.traffic.workloads import pattern_transfers


@pytest.mark.parametrize("field, value", [("size_bytes", 0), ("ranks", 1), ("seed", -1),
                                          ("chunks", 0), ("channels", 0), ("slots", 0),
                                          ("clients", 0),
                                          ("servers", 0), ("rounds", 0), ("admission", 0),
                                          ("dscp", -1), ("dscp", 64), ("size_bytes", 1.5),
                                          ("placement", "nowhere")])
def test_bad_field_is_named(field, value):
    with pytest.raises(ScheduleError, match=field):
        PatternSpec("ring-allreduce", **{field: value})


def test_more_ranks_than_compute_endpoints_is_refused():
    graph = topologies.build("rail-clos")
    with pytest.raises(ScheduleError, match=r"ranks must be 2\.\.16.*got 17"):
        make_transfers(graph, PatternSpec("ring-allreduce", ranks=17))
    transfers, ranks = make_transfers(graph, PatternSpec("ring-allreduce", ranks=16))
    assert len(ranks) == 16 and transfers


def test_too_many_storage_servers_is_refused():
    with pytest.raises(ScheduleError, match="servers"):
        make_transfers(topologies.build("leaf-spine"),
                       PatternSpec("striped-read", servers=100))


@pytest.mark.parametrize("pattern", ["stride", "permutation", "ring-allreduce"])
def test_workload_transfers_carry_the_service_class_asked_for(pattern):
    graph = topologies.build("rail-clos")
    marked, _, _ = pattern_transfers(graph, pattern, 0, TransportSpec("roce"), dscp=26)
    plain, _, _ = pattern_transfers(graph, pattern, 0, TransportSpec("roce"))
    assert {t.dscp for t in marked} == {26} and {t.dscp for t in plain} == {0}
    assert [t.id for t in marked] == [t.id for t in plain]


def test_slots_reach_the_collective():
    graph = topologies.build("rail-clos")
    one, _ = make_transfers(graph, PatternSpec("ring-allreduce", size_bytes=64_000, slots=1))
    eight, _ = make_transfers(graph, PatternSpec("ring-allreduce", size_bytes=64_000))
    # one slot: every send after the first also waits for its rank's previous send
    assert sum(len(t.after) for t in one) > sum(len(t.after) for t in eight)
