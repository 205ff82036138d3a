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
