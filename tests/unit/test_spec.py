"""Spec grammar: parse_spec / bind_spec edge cases and topologies.build errors."""

import pytest

import topologies
from fabric.model.graph import TopologyError
from fabric.model.spec import Spec, SpecError, bind_spec, parse_spec
from topologies import rail_clos


def test_name_only():
    assert parse_spec("rail-clos") == Spec("rail-clos")


def test_positional_and_keyword():
    spec = parse_spec("rail-clos, 8 ,2,spines=4")
    assert spec.args == ("8", "2") and spec.kwargs == {"spines": "4"}
    assert bind_spec(spec, rail_clos) == {"servers": 8, "gpus": 2, "spines": 4}


def test_hyphen_in_key_becomes_underscore():
    spec = parse_spec("rail-clos,servers-per-leaf=2")
    assert bind_spec(spec, rail_clos) == {"servers_per_leaf": 2}


def test_types_come_from_defaults():
    bound = bind_spec(parse_spec("rail-clos,servers=8,gbps=100,oversub=1.5"), rail_clos)
    assert type(bound["servers"]) is int
    assert type(bound["gbps"]) is float and bound["gbps"] == 100.0
    assert bound["oversub"] == 1.5


@pytest.mark.parametrize("text, message", [
    ("", "empty topology name"),
    (",servers=8", "empty topology name"),
    ("rail-clos,,servers=8", "empty field"),
    ("rail-clos,servers=8,", "empty field"),
    ("rail-clos,servers=8,servers=4", "servers given twice"),
    ("rail-clos,servers=8,servers-per-leaf=2,servers_per_leaf=4", "given twice"),
    ("rail-clos,servers=8,4", "positional value '4' after a keyword"),
    ("rail-clos,=8", "malformed field"),
    ("rail-clos,servers=", "malformed field"),
])
def test_malformed_specs(text, message):
    with pytest.raises(SpecError, match=message):
        parse_spec(text)


@pytest.mark.parametrize("text, message", [
    ("rail-clos,foo=1", "rail-clos has no parameter 'foo'"),
    ("rail-clos,servers=eight", "rail-clos: servers must be int, got 'eight'"),
    ("rail-clos,servers=8.5", "servers must be int"),
    ("rail-clos,gbps=fast", "rail-clos: gbps must be float, got 'fast'"),
    ("rail-clos,1,2,3,4,5,6,7", "at most 6 values, got 7"),
    ("rail-clos,8,servers=4", "servers given twice"),
])
def test_bind_errors(text, message):
    with pytest.raises(SpecError, match=message):
        topologies.build(text)


def test_unknown_topology_lists_known():
    with pytest.raises(SpecError, match=r"unknown topology 'torus' \(known: rail-clos, two-zone"):
        topologies.build("torus,k=4")


def test_spec_error_is_topology_error():
    # Callers may catch one exception type for every bad spec.
    assert issubclass(SpecError, TopologyError) and issubclass(TopologyError, ValueError)


def test_registry_and_default():
    assert set(topologies.BUILDERS) == {"rail-clos", "two-zone", "fat-tree", "leaf-spine"}
    assert parse_spec(topologies.DEFAULT_SPEC).name in topologies.BUILDERS


def test_build_records_spec_and_params():
    g = topologies.build("rail-clos,4,servers_per_leaf=2")
    assert g.graph["spec"] == "rail-clos,4,servers_per_leaf=2"
    assert g.graph["name"] == "rail-clos"
    assert g.graph["params"]["servers"] == 4 and g.graph["params"]["servers_per_leaf"] == 2
    assert g.graph["params"]["gbps"] == 400.0  # defaults recorded too
