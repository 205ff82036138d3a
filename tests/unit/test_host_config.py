"""Endpoint addressing and static ARP (``ip -batch`` lines), no root needed."""

from __future__ import annotations

import ipaddress
import re

import pytest

import topologies
from fabric.emulation import hostconfig
from fabric.emulation.hostconfig import host_ip_batch
from fabric.emulation.hostconfig import nic_for as _nic_for
from fabric.model import graph as fg

NEIGH = re.compile(r"^neigh replace (\S+) lladdr (\S+) dev (\S+) nud permanent$")


def _lines(graph, endpoint):
    text = host_ip_batch(graph, endpoint)
    assert text.endswith("\n")
    lines = text.splitlines()
    assert all(line.strip() == line and line for line in lines)
    return lines


def _neighbours(lines):
    found = {}
    for line in lines:
        if line.startswith("neigh"):
            m = NEIGH.match(line)
            assert m, f"malformed neighbour line {line!r}"
            ip, mac, dev = m.groups()
            assert ip not in found, f"two entries for {ip}"
            found[ip] = (mac, dev)
    return found


def test_rail_clos_host_addressing():
    graph = topologies.build("rail-clos")
    host = "h0g0"
    nic = graph.nodes[host]["nics"][0]
    lines = _lines(graph, host)
    dev = "h0g0-eth0"
    assert f"link set dev {dev} address {nic['mac']}" in lines
    assert f"addr add {nic['ip']}/8 dev {dev}" in lines
    # MAC set while down, old addresses flushed before the new one, up last
    order = [lines.index(x) for x in (f"link set dev {dev} down",
                                      f"link set dev {dev} address {nic['mac']}",
                                      f"addr flush dev {dev}",
                                      f"addr add {nic['ip']}/8 dev {dev}",
                                      f"link set dev {dev} up")]
    assert order == sorted(order)
    assert sum(1 for line in lines if line.startswith("addr add")) == 1
    # jumbo frames on the NIC and on its ingress IFB (RoCE's 4096-byte path MTU)
    assert f"link set dev {dev} mtu 9000" in lines
    assert "link set dev h0g0-ifb0 mtu 9000" in lines
    # TCP advertises a 1500-byte MTU's segments on the connected route, after it exists
    route = (f"route replace 10.0.0.0/8 dev {dev} proto kernel scope link src {nic['ip']} "
             f"advmss 1460")
    assert lines.index(route) > lines.index(f"link set dev {dev} up")


def test_rail_clos_host_static_arp_for_every_other_nic():
    graph = topologies.build("rail-clos")
    host = "h0g0"
    lines = _lines(graph, host)
    neigh = _neighbours(lines)
    others = [a for a in fg.attachments(graph) if a.endpoint != host]
    assert len([line for line in lines if line.startswith("neigh")]) == len(others) == 15
    assert set(neigh) == {a.ip for a in others}
    for att in others:
        assert neigh[att.ip] == (att.mac, "h0g0-eth0")
    assert graph.nodes[host]["ip"] not in neigh


@pytest.mark.parametrize("spec", ["rail-clos", "fat-tree", "leaf-spine", "two-zone"])
def test_every_endpoint_reaches_every_other_nic(spec):
    graph = topologies.build(spec)
    atts = fg.attachments(graph)
    for endpoint in fg.endpoints(graph):
        neigh = _neighbours(_lines(graph, endpoint))
        assert set(neigh) == {a.ip for a in atts if a.endpoint != endpoint}
        devs = {fg.intf_name(endpoint, n["port"]) for n in graph.nodes[endpoint]["nics"]}
        assert {dev for _, dev in neigh.values()} <= devs


def test_two_zone_storage_node():
    graph = topologies.build("two-zone")
    node = "st0"
    nics = graph.nodes[node]["nics"]
    assert [n["port"] for n in nics] == [0, 1]
    lines = _lines(graph, node)
    for nic in nics:
        assert f"addr add {nic['ip']}/16 dev st0-eth{nic['port']}" in lines
        assert f"link set dev st0-eth{nic['port']} address {nic['mac']}" in lines
    zone_net = {z: ipaddress.ip_network(f"10.{z}.0.0/16") for z in (0, 1)}
    assert ipaddress.ip_address(nics[0]["ip"]) in zone_net[0]
    assert ipaddress.ip_address(nics[1]["ip"]) in zone_net[1]

    neigh = _neighbours(lines)
    others = [a for a in fg.attachments(graph) if a.endpoint != node]
    assert set(neigh) == {a.ip for a in others}
    for att in others:
        mac, dev = neigh[att.ip]
        assert mac == att.mac
        addr = ipaddress.ip_address(att.ip)
        # the NIC whose prefix contains the target
        owner = [n for n in nics if addr in ipaddress.ip_network(n["prefix"])]
        assert len(owner) == 1
        assert dev == f"st0-eth{owner[0]['port']}"
    for i in range(6):  # zone hosts by zone: zone 0 via port 0, zone 1 via port 1
        assert neigh[graph.nodes[f"z0h{i}"]["ip"]][1] == "st0-eth0"
        assert neigh[graph.nodes[f"z1h{i}"]["ip"]][1] == "st0-eth1"
    # the other storage node: each of its NICs through the matching zone
    st1 = graph.nodes["st1"]["nics"]
    assert neigh[st1[0]["ip"]][1] == "st0-eth0"
    assert neigh[st1[1]["ip"]][1] == "st0-eth1"


def test_two_zone_compute_host_uses_slash8():
    graph = topologies.build("two-zone")
    lines = _lines(graph, "z0h0")
    nic = graph.nodes["z0h0"]["nics"][0]
    assert f"addr add {nic['ip']}/8 dev z0h0-eth0" in lines
    neigh = _neighbours(lines)
    # both NICs of every storage node, from one NIC
    for st in ("st0", "st1"):
        for snic in graph.nodes[st]["nics"]:
            assert neigh[snic["ip"]] == (snic["mac"], "z0h0-eth0")


def test_nic_for_longest_prefix():
    nics = [{"port": 0, "prefix": "10.0.0.0/8"}, {"port": 1, "prefix": "10.1.0.0/16"}]
    assert _nic_for(nics, "10.1.2.3")["port"] == 1
    assert _nic_for(nics, "10.2.0.1")["port"] == 0
    assert _nic_for(nics, "192.168.0.1") is None
    zones = [{"port": 0, "prefix": "10.0.0.0/16"}, {"port": 1, "prefix": "10.1.0.0/16"}]
    assert _nic_for(zones, "10.0.0.9")["port"] == 0
    assert _nic_for(zones, "10.1.0.9")["port"] == 1
    assert _nic_for(zones, "10.2.0.9") is None


def test_a_minimum_rto_keeps_tcps_segment_size():
    # `ip route change ... rto_min` alone would drop advmss: TCP would send 9000-byte frames
    from types import SimpleNamespace

    from fabric.emulation.traffic import set_rto_min

    graph = topologies.build("two-zone")
    ran = []
    host = SimpleNamespace(cmd=lambda line: ran.append(line) or "")
    set_rto_min(SimpleNamespace(graph=graph, host=lambda ep: host), ["st0"], 10)
    assert ran == [f"ip {hostconfig.nic_route('st0', nic)} rto_min 10ms"
                   for nic in graph.nodes["st0"]["nics"]]
    assert all("advmss 1460" in line and "src 10." in line for line in ran)
