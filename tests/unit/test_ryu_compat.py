"""Ryu's module paths on os-ken: the modules are os-ken's own, under both names."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("os_ken")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ryu_learning_switch.py"


def test_ryu_modules_are_the_os_ken_modules():
    from os_ken.base import app_manager as osken_app_manager
    from os_ken.controller import ofp_event as osken_ofp_event
    from os_ken.ofproto import ofproto_v1_3 as osken_v13
    from ryu.base import app_manager
    from ryu.controller import ofp_event
    from ryu.controller.handler import MAIN_DISPATCHER, set_ev_cls  # noqa: F401
    from ryu.lib import hub
    from ryu.lib.packet import ethernet  # noqa: F401
    from ryu.ofproto import ofproto_v1_3

    assert app_manager is osken_app_manager and ofp_event is osken_ofp_event
    assert ofproto_v1_3 is osken_v13 and hub is sys.modules["os_ken.lib.hub"]
    assert app_manager.RyuApp is app_manager.OSKenApp
    # os-ken's modules keep their own identity
    assert hub.__name__ == "os_ken.lib.hub" and hub.__spec__.name == "os_ken.lib.hub"


def test_what_os_ken_lacks_is_not_invented():
    with pytest.raises(ModuleNotFoundError):
        __import__("ryu.no_such_module")


def test_a_classic_ryu_app_loads_as_an_os_ken_app():
    from controllers import userapp
    from os_ken.base.app_manager import OSKenApp
    from os_ken.ofproto import ofproto_v1_3

    cls = userapp.load_app_class(userapp.parse_app_spec(f"{EXAMPLE}:LearningSwitch13"))
    assert issubclass(cls, OSKenApp) and cls.OFP_VERSIONS == [ofproto_v1_3.OFP_VERSION]


def test_the_ryu_learning_switch_passes_a_fabric_testing_test_unmodified():
    """OpenFlow 1.3, ``ryu.*`` imports: learns, floods, then forwards without the controller."""
    import topologies
    from controllers import userapp
    from fabric.testing import FakeFabric
    from os_ken.ofproto import ofproto_v1_3

    cls = userapp.load_app_class(userapp.parse_app_spec(f"{EXAMPLE}:LearningSwitch13"))
    fabric = FakeFabric(topologies.build("leaf-spine,spines=1"))
    app = fabric.connect(cls())
    assert all(dp.ofproto is ofproto_v1_3 for dp in fabric.datapaths.values())
    src, dst = "l0h0", "l1h1"
    first = fabric.send(fabric.packet(src, dst), src)
    assert first.trace.delivered == [] and dst in first.delivered  # flooded there
    assert src in fabric.send(fabric.packet(dst, src), dst).delivered
    fabric.send(fabric.packet(src, dst), src)  # the first switch learns dst's port
    trace = fabric.trace(fabric.packet(src, dst), src)
    assert trace.delivered == [dst] and not trace.packet_ins
    assert trace.switches == ["l0", "s0", "l1"]
    uplink = fabric.graph.edges["l0", "s0"]["ports"]["l0"]
    assert app.where[fabric.switches["l0"].dpid][fabric.graph.nodes[dst]["mac"]] == uplink
