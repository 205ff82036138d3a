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
    classids = lambda lines: [l.split("classid ")[1].split()[0] for l in lines if "classid" in l]
    assert classids(changed) == classids(built)
    assert all(l.startswith("class change dev x-eth1 ") for l in changed)
    assert "rate 2500kbit ceil 2500kbit" in changed[0]
    assert all("ceil 2500kbit" in l for l in changed)  # every lane may use the whole link
    shares = [lane.share for lane in THREE_LANES.lanes]
    assert [int(l.split(" rate ")[1].split("kbit")[0]) for l in changed[1:]] == [
        round(s * 2500) for s in shares]
