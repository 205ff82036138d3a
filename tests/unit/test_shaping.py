"""Egress shaping lines: an HTB tree whose leaves are head-drop FIFOs.

The checks parse the ``tc -batch`` lines into a qdisc/class tree and assert
invariants of it, so they hold however many classes sit between the root and
the leaves (one per virtual lane, under a link-rate parent).
"""

from __future__ import annotations

import re

import pytest

from fabric.emulation import shaping
from fabric.emulation.shaping import MAX_FRAME_BYTES, htb_quantum, shape_lines

TAIL_DROP = ("pfifo", "bfifo", "pfifo_fast")


def _value(tokens: list[str], key: str) -> str:
    assert key in tokens, f"no {key!r} in {' '.join(tokens)}"
    return tokens[tokens.index(key) + 1]


def _handle(text: str) -> str:
    """Normalise a tc id: '1:' and '1:0' are the same; hex digits lower case."""
    major, _, minor = text.lower().partition(":")
    return f"{int(major, 16):x}:{int(minor or '0', 16):x}"


def _tree(lines: list[str], dev: str) -> dict:
    root, classes, qdiscs = None, {}, []
    for line in lines:
        tokens = line.split()
        assert _value(tokens, "dev") == dev, line
        if tokens[0] == "qdisc" and "root" in tokens:
            assert root is None, "two root qdiscs"
            root = tokens
        elif tokens[0] == "class":
            cid = _handle(_value(tokens, "classid"))
            assert cid not in classes, f"class {cid} defined twice"
            classes[cid] = tokens
        elif tokens[0] == "qdisc":
            qdiscs.append(tokens)
        elif tokens[0] == "filter":
            continue
        else:
            pytest.fail(f"unexpected tc line {line!r}")
    assert root is not None, "no root qdisc"
    return {"root": root, "classes": classes, "qdiscs": qdiscs}


def _leaf_classes(tree: dict) -> list[str]:
    parents = {_handle(_value(t, "parent")) for t in tree["classes"].values()}
    return [cid for cid in tree["classes"] if cid not in parents]


def _kbit(mbps: float) -> str:
    return f"{round(mbps * 1000)}kbit"


@pytest.mark.parametrize("mbps, queue", [(20.0, 32), (0.1, 1), (1000.0, 500), (7.5, 64)])
def test_htb_tree_with_head_drop_leaves(mbps, queue):
    dev = "l0-eth1"
    lines = shape_lines(dev, mbps, queue_pkts=queue)
    assert all("\n" not in line for line in lines)
    tree = _tree(lines, dev)
    root = tree["root"]
    assert root[1] in ("replace", "add")
    assert "htb" in root
    assert _handle(_value(root, "handle")) == "1:0"
    link = _kbit(mbps)

    classes = tree["classes"]
    assert classes, "no HTB class"
    for cid, tokens in classes.items():
        assert "htb" in tokens
        assert cid.startswith("1:")
        parent = _handle(_value(tokens, "parent"))
        assert parent == "1:0" or parent in classes, f"class {cid} under unknown {parent}"
        assert re.fullmatch(r"\d+kbit", _value(tokens, "rate"))
        assert _value(tokens, "ceil") == link, "every class may use the whole link"
        rate_mbps = int(_value(tokens, "rate")[:-4]) / 1000
        assert int(_value(tokens, "quantum")) == htb_quantum(rate_mbps)
    # the class at the top shapes the link: rate == ceil == link rate, in kbit
    top = [t for t in classes.values() if _handle(_value(t, "parent")) == "1:0"]
    assert len(top) == 1
    assert _value(top[0], "rate") == _value(top[0], "ceil") == link

    # each leaf class holds exactly one qdisc: head drop with the given limit
    leaves = _leaf_classes(tree)
    assert leaves
    by_parent = {}
    for tokens in tree["qdiscs"]:
        by_parent.setdefault(_handle(_value(tokens, "parent")), []).append(tokens)
    assert set(by_parent) == set(leaves)
    for cid in leaves:
        (qdisc,) = by_parent[cid]
        assert "pfifo_head_drop" in qdisc
        assert _value(qdisc, "limit") == str(queue)
    handles = [_handle(_value(q, "handle")) for q in tree["qdiscs"]]
    assert len(set(handles)) == len(handles) and "1:0" not in handles

    # unclassified traffic lands in a shaped leaf
    default = _handle("1:" + _value(root, "default"))
    assert default in leaves


def test_single_default_class_runs_at_link_rate():
    tree = _tree(shape_lines("s0-eth2", 20.0), "s0-eth2")
    (leaf,) = _leaf_classes(tree)
    tokens = tree["classes"][leaf]
    assert _value(tokens, "rate") == _value(tokens, "ceil") == "20000kbit"


@pytest.mark.parametrize("mbps, kbit", [(20.0, "20000kbit"), (0.1, "100kbit"),
                                        (12.5, "12500kbit"), (1000.0, "1000000kbit"),
                                        (0.25, "250kbit")])
def test_rate_equals_ceil_in_kbit(mbps, kbit):
    tree = _tree(shape_lines("s0-eth1", mbps), "s0-eth1")
    assert any(_value(t, "rate") == _value(t, "ceil") == kbit for t in tree["classes"].values())


@pytest.mark.parametrize("queue", [1, 16, 64, 1000])
def test_never_tail_drop(queue):
    for line in shape_lines("c0-eth3", 10.0, queue):
        tokens = line.split()
        assert not set(TAIL_DROP) & set(tokens), line
        if tokens[0] == "qdisc" and "root" not in tokens:
            assert "pfifo_head_drop" in tokens, line


def test_default_queue():
    tree = _tree(shape_lines("l0-eth1", 20.0), "l0-eth1")
    for qdisc in tree["qdiscs"]:
        assert _value(qdisc, "limit") == str(shaping.DEFAULT_QUEUE_PKTS)


@pytest.mark.parametrize("mbps", [0.001, 0.1, 1, 10, 12.112, 20, 100, 160, 1000, 1e5])
def test_quantum_clamped(mbps):
    q = htb_quantum(mbps)
    assert isinstance(q, int)
    assert MAX_FRAME_BYTES <= q <= 200_000


def test_quantum_values():
    assert htb_quantum(0.1) == 9014          # rate/10 = 1250 B, below one jumbo frame
    assert htb_quantum(1.0) == 12_500        # 1 Mbit/s / 8 / 10
    assert htb_quantum(20.0) == 200_000      # 250 kB clamped
    assert htb_quantum(1000.0) == 200_000    # 12.5 MB clamped


@pytest.mark.parametrize("queue", [0, -1])
def test_bad_queue_raises(queue):
    with pytest.raises(ValueError):
        shape_lines("l0-eth1", 20.0, queue_pkts=queue)


def test_lines_are_tc_batch_commands():
    # tc -batch takes commands without the leading "tc".
    for line in shape_lines("l0-eth1", 20.0):
        assert re.match(r"^(qdisc|class|filter) (add|replace|change) dev ", line), line


def test_rate_change_moves_every_class_of_the_same_tree():
    from fabric.model.lanes import THREE_LANES

    built = shape_lines("x-eth1", 10.0, 32, THREE_LANES)
    changed = shaping.rate_change_lines("x-eth1", 2.5, THREE_LANES)

    def classids(lines):
        return [line.split("classid ")[1].split()[0] for line in lines if "classid" in line]

    assert classids(changed) == classids(built)
    assert all(line.startswith("class change dev x-eth1 ") for line in changed)
    assert "rate 2500kbit ceil 2500kbit" in changed[0]
    assert all("ceil 2500kbit" in line for line in changed)  # every lane may use the whole link
    shares = [lane.share for lane in THREE_LANES.lanes]
    assert [int(line.split(" rate ")[1].split("kbit")[0]) for line in changed[1:]] == [
        round(s * 2500) for s in shares]


@pytest.mark.parametrize("gated", [None, {0: 500}])
def test_an_endpoint_nic_sends_its_transports_acks_ahead_of_its_lanes_data(gated):
    """control_first: each lane's leaf is an HTB of two classes, served in prio order:
    UDP from the RoCE port (ACKs, CNPs), TCP from the TCP transport's listening port (its
    ACKs, DONE frames) and TCP pure ACKs first, everything else second; both FIFOs are
    head-drop with the lane's limit, and the data's keeps the lane's usual handle (the
    flow-control accounting and the drop counts read it). A gate stays above the whole
    leaf, so a paused lane holds its ACKs too."""
    from fabric.model.lanes import THREE_LANES
    from fabric.traffic.model import ROCE_PORT, TCP_DATA_PORT

    lines = shape_lines("h0-eth0", 10.0, 32, THREE_LANES, gated=gated, control_first=True)
    plain = shape_lines("h0-eth0", 10.0, 32, THREE_LANES, gated=gated)
    for i in range(len(THREE_LANES.lanes)):
        order = f"{shaping.ACK_FIRST_HANDLE + i:x}:"
        mine = [line for line in lines if f"dev h0-eth0 parent {order}" in line
                or f"handle {order} " in line]
        (leaf,) = [line.split() for line in mine if f"handle {order} htb" in line]
        assert _value(leaf, "default") == "2"
        above = f"{shaping.GATE_HANDLE + i:x}:1" if gated and i in gated else f"1:{i + 1:x}"
        assert _value(leaf, "parent") == above
        first, second = (line.split() for line in mine if line.startswith("class add"))
        assert (_value(first, "classid"), _value(first, "prio")) == (f"{order}1", "0")
        assert (_value(second, "classid"), _value(second, "prio")) == (f"{order}2", "1")
        for tokens in (first, second):  # far above the link: the class above shapes
            assert _value(tokens, "rate") == _value(tokens, "ceil") == shaping.ORDER_ONLY_RATE
        fifos = {_value(line.split(), "parent"): line.split() for line in mine
                 if "pfifo_head_drop" in line}
        limit = str(gated[i]) if gated and i in gated else "32"
        assert _value(fifos[f"{order}1"], "handle") == f"{shaping.CONTROL_LEAF_HANDLE + i:x}:"
        assert _value(fifos[f"{order}2"], "handle") == f"{shaping.LEAF_HANDLE + i:x}:"
        assert all(_value(f, "limit") == limit for f in fifos.values())
        filters = [line for line in mine if line.startswith("filter")]
        assert f"match ip protocol 17 0xff match ip sport {ROCE_PORT} 0xffff" in filters[0]
        assert f"match ip protocol 6 0xff match ip sport {TCP_DATA_PORT} 0xffff" in filters[1]
        assert len(filters) == 2 + len(shaping.TCP_DATA_OFFSETS)  # one per TCP header length
        assert all(flt.endswith(f"flowid {order}1") for flt in filters)
    # the rest of the tree is what it is without
    assert [line for line in plain if "pfifo_head_drop" not in line] == [
        line for line in lines if "pfifo_head_drop" not in line
        and shaping.ORDER_ONLY_RATE not in line and " htb default 2" not in line
        and "u32 match ip protocol" not in line]


def _u32_matches(match: str, packet: bytes) -> bool:
    """Evaluate one filter's u32 keys (the forms control_matches writes) on an IP packet."""
    tokens = match.split()
    named = {("ip", "protocol"): (9, 1), ("ip", "sport"): (20, 2)}
    while tokens:
        assert tokens.pop(0) == "match"
        kind = tokens.pop(0)
        if kind == "ip":
            offset, size = named[("ip", tokens.pop(0))]
            value, mask = (int(t, 0) for t in (tokens.pop(0), tokens.pop(0)))
        else:
            size = {"u8": 1, "u16": 2}[kind]
            value, mask = (int(t, 0) for t in (tokens.pop(0), tokens.pop(0)))
            assert tokens.pop(0) == "at"
            offset = int(tokens.pop(0))
        if int.from_bytes(packet[offset:offset + size], "big") & mask != value:
            return False
    return True


def test_the_control_class_takes_acks_and_the_tcp_receivers_frames_and_no_data():
    """Classified on real headers: every TCP pure ACK (any option length, SYN too),
    anything from the TCP transport's listening port or UDP from the RoCE port goes
    first; a segment with a single byte of payload, a FIN, or RoCE data (to the port,
    not from it) stays in the data class."""
    from scapy.layers.inet import IP, TCP, UDP

    from fabric.traffic.model import ROCE_PORT, TCP_DATA_PORT

    def first(pkt) -> bool:
        return any(_u32_matches(m, bytes(pkt)) for m in shaping.control_matches())

    ip = IP(src="10.0.0.1", dst="10.0.0.2")
    sack = [("NOP", None), ("NOP", None), ("Timestamp", (1, 2))]
    for blocks in range(4):
        options = sack + ([("SAck", tuple(range(2 * blocks)))] if blocks else [])
        assert first(ip / TCP(sport=40000, dport=TCP_DATA_PORT, flags="A", options=options))
        assert not first(ip / TCP(sport=40000, dport=TCP_DATA_PORT, flags="A",
                                  options=options) / b"x")
    assert first(ip / TCP(sport=40000, dport=5201, flags="S", options=[("MSS", 1460)]))
    assert first(ip / TCP(sport=40000, dport=5201, flags="A"))
    assert not first(ip / TCP(sport=40000, dport=5201, flags="FA"))
    assert not first(ip / TCP(sport=40000, dport=5201, flags="PA") / bytes(1448))
    assert first(ip / TCP(sport=TCP_DATA_PORT, dport=40000, flags="PA") / bytes(40))  # DONE
    assert first(ip / UDP(sport=ROCE_PORT, dport=ROCE_PORT) / bytes(16))              # ACK
    assert not first(ip / UDP(sport=12345, dport=ROCE_PORT) / bytes(4096))          # data


def test_only_an_endpoints_own_nic_puts_acks_first():
    """The queue into an endpoint (its IFB) and the switches' ports keep one FIFO per
    lane: in the fabric, ACKs wait behind data as on a real switch."""
    import topologies
    from fabric.emulation.hostconfig import endpoint_tc_batch, switch_tc_batch
    from fabric.model import graph as fg
    from fabric.model.lanes import SINGLE_LANE

    graph = topologies.build("leaf-spine,leaves=2,spines=1,hosts_per_leaf=1")
    rates = {frozenset(e): 10.0 for e in graph.edges}
    host = fg.endpoints(graph)[0]
    batch = endpoint_tc_batch(graph, host, rates, 64, SINGLE_LANE).splitlines()
    nic = fg.intf_name(host, graph.nodes[host]["nics"][0]["port"])
    ordered = {line.split(" dev ")[1].split()[0] for line in batch if " htb default 2" in line}
    assert ordered == {nic}
    switch = next(n for n in graph if fg.is_switch(graph, n))
    assert " htb default 2" not in switch_tc_batch(graph, switch, rates, 64, SINGLE_LANE)
