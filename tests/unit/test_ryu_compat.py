"""Ryu's module paths on os-ken: put in place only when a user's app is loaded, the
modules os-ken's own under both names, ``ryu.app.NAME`` beside the app, a real Ryu
left alone."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("os_ken")

from controllers import ryu_compat, userapp  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "ryu_learning_switch.py"

# Ryu's tutorial pattern: one app imports another that sits beside it as ``ryu.app.NAME``
MONITOR = '''
from ryu.app import learning_switch_13
from ryu.controller import ofp_event
from ryu.controller.handler import DEAD_DISPATCHER, MAIN_DISPATCHER, set_ev_cls


class TrafficMonitor13(learning_switch_13.LearningSwitch13):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.datapaths = {}
        self.tx_bytes = {}  # (datapath id, port) -> bytes

    @set_ev_cls(ofp_event.EventOFPStateChange, [MAIN_DISPATCHER, DEAD_DISPATCHER])
    def state_change(self, ev):
        if ev.state == MAIN_DISPATCHER:
            self.datapaths[ev.datapath.id] = ev.datapath
        else:
            self.datapaths.pop(ev.datapath.id, None)

    @set_ev_cls(ofp_event.EventOFPPortStatsReply, MAIN_DISPATCHER)
    def port_stats(self, ev):
        for stat in ev.msg.body:
            self.tx_bytes[(ev.msg.datapath.id, stat.port_no)] = stat.tx_bytes
'''


@pytest.fixture(autouse=True)
def layer_removed_afterwards():
    """What a test installs is gone after it: the finder and every ``ryu`` module."""
    saved = list(sys.meta_path)
    yield
    sys.meta_path[:] = saved
    for name in [m for m in sys.modules if m == "ryu" or m.startswith("ryu.")]:
        del sys.modules[name]


def run_fresh(code: str, *args: object) -> subprocess.CompletedProcess:
    """Run ``code`` in a new interpreter (a clean ``sys.meta_path``), ``args`` as its
    ``sys.argv[1:]``; fail on a non-zero exit."""
    res = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *map(str, args)],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return res


def test_ryu_modules_are_the_os_ken_modules():
    assert ryu_compat.install(None) is True
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


def test_install_is_explicit_and_idempotent():
    out = run_fresh("""
        import sys
        from controllers import ryu_compat
        try:
            import ryu
        except ModuleNotFoundError:
            print("no ryu before install")
        assert ryu_compat.install(None) and ryu_compat.install(None)
        finders = [f for f in sys.meta_path if type(f).__module__ == "controllers.ryu_compat"]
        import ryu.app
        print(len(finders), ryu.__path__, ryu.app.__path__)
    """).stdout
    assert out.splitlines() == ["no ryu before install", "1 [] []"]


def test_what_os_ken_lacks_is_not_invented(tmp_path):
    ryu_compat.install(tmp_path)
    for name in ("ryu.no_such_module", "ryu.lib.no_such_module", "ryu.app.no_such_thing"):
        with pytest.raises(ModuleNotFoundError):
            __import__(name)


def test_os_ken_apps_come_before_a_file_beside_the_app(tmp_path):
    (tmp_path / "ofctl.py").write_text("raise RuntimeError('not os-ken')\n")
    ryu_compat.install(tmp_path)
    from ryu.app import ofctl

    assert ofctl is sys.modules["os_ken.app.ofctl"]


def test_fabric_itself_never_installs_the_layer():
    """Importing fabric's packages and running a built-in policy leave ``ryu`` alone;
    the same launcher given a user's app puts it in."""
    out = run_fresh("""
        import importlib, sys
        import controllers, controllers.launcher as launcher, fabric.cli, fabric.testing
        from controllers import POLICIES, ryu_compat
        from os_ken.base.app_manager import AppManager

        ran = []
        AppManager.run_apps = staticmethod(ran.append)  # the apps are loaded, not run
        launcher.check_port_free = lambda host, port: None
        for module in POLICIES.values():
            importlib.import_module(module)
        assert launcher.main(["ecmp", "--topo", "leaf-spine,spines=1"]) == 0 and ran
        print(ryu_compat.is_installed(), "ryu" in sys.modules)
        try:
            import ryu
        except ModuleNotFoundError:
            print("no ryu")
        assert launcher.main(["--app", sys.argv[1] + ":LearningSwitch13",
                              "--topo", "leaf-spine,spines=1"]) == 0
        import ryu.base.app_manager
        print(ryu_compat.is_installed())
    """, EXAMPLE).stdout
    assert out.splitlines() == ["False False", "no ryu", "True"]


def test_a_real_ryu_is_left_alone(tmp_path):
    (tmp_path / "ryu").mkdir()
    (tmp_path / "ryu" / "__init__.py").write_text("REAL = True\n")
    app = tmp_path / "plain_app.py"
    app.write_text("import ryu\nfrom os_ken.base import app_manager\n\n\n"
                   "class Plain(app_manager.OSKenApp):\n    REAL = ryu.REAL\n")
    res = run_fresh("""
        import logging, sys
        logging.basicConfig(level=logging.INFO)
        sys.path.insert(0, sys.argv[1])
        from controllers import ryu_compat, userapp
        cls = userapp.load_app_class(userapp.parse_app_spec(sys.argv[2] + ":Plain"))
        import ryu
        print(cls.REAL, ryu.REAL, ryu_compat.is_installed(), ryu_compat.real_ryu())
        try:
            userapp.load_app_class(userapp.parse_app_spec(sys.argv[3] + ":LearningSwitch13"))
        except userapp.AppSpecError as exc:
            print(exc)
    """, tmp_path, app, EXAMPLE)
    fake = tmp_path / "ryu" / "__init__.py"
    first, error = res.stdout.splitlines()
    assert first == f"True True False {fake}"
    assert "No module named 'ryu.base'" in error and f"the Ryu at {fake} was left alone" in error
    assert f"a Ryu is importable from {fake}: left alone" in res.stderr


def test_a_folder_named_ryu_without_init_is_no_ryu(tmp_path):
    (tmp_path / "ryu" / "__pycache__").mkdir(parents=True)  # what an old checkout leaves
    out = run_fresh("""
        import sys
        sys.path.insert(0, sys.argv[1])
        from controllers import ryu_compat
        from os_ken.base import app_manager
        print(ryu_compat.real_ryu(), ryu_compat.install(None))
        from ryu.base import app_manager as ryu_app_manager
        print(ryu_app_manager is app_manager)
    """, tmp_path).stdout
    assert out.splitlines() == ["None True", "True"]


def test_a_classic_ryu_app_loads_as_an_os_ken_app():
    from os_ken.base.app_manager import OSKenApp
    from os_ken.ofproto import ofproto_v1_3

    cls = userapp.load_app_class(userapp.parse_app_spec(f"{EXAMPLE}:LearningSwitch13"))
    assert issubclass(cls, OSKenApp) and cls.OFP_VERSIONS == [ofproto_v1_3.OFP_VERSION]


def test_the_ryu_learning_switch_passes_a_fabric_testing_test_unmodified():
    """OpenFlow 1.3, ``ryu.*`` imports: learns, floods, then forwards without the controller."""
    import topologies
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


@pytest.mark.parametrize("form", ["file", "module"])
def test_an_app_imports_its_neighbour_as_ryu_app(tmp_path, monkeypatch, form):
    """A monitor that subclasses the learning switch beside it (``from ryu.app import
    learning_switch_13``), named by file or by module, learns and reads port counters."""
    import topologies
    from fabric.testing import FakeFabric

    package = tmp_path / f"tutorial_apps_{form}"
    package.mkdir()
    (package / "__init__.py").write_text("")
    shutil.copy(EXAMPLE, package / "learning_switch_13.py")
    (package / "traffic_monitor_13.py").write_text(MONITOR)
    if form == "file":
        spec = f"{package / 'traffic_monitor_13.py'}:TrafficMonitor13"
    else:
        monkeypatch.syspath_prepend(str(tmp_path))
        spec = f"{package.name}.traffic_monitor_13:TrafficMonitor13"
    cls = userapp.load_app_class(userapp.parse_app_spec(spec))
    switch_module = sys.modules["ryu.app.learning_switch_13"]
    assert cls.__mro__[1] is switch_module.LearningSwitch13
    assert Path(switch_module.__file__) == package / "learning_switch_13.py"

    fabric = FakeFabric(topologies.build("leaf-spine,spines=1"))
    app = fabric.connect(cls())
    assert set(app.datapaths) == {sw.dpid for sw in fabric.switches.values()}
    src, dst = "l0h0", "l1h1"
    assert dst in fabric.send(fabric.packet(src, dst), src).delivered
    fabric.send(fabric.packet(dst, src), dst)
    fabric.send(fabric.packet(src, dst), src)
    assert fabric.trace(fabric.packet(src, dst), src).switches == ["l0", "s0", "l1"]
    fabric.poll_stats()
    uplink = fabric.graph.edges["l0", "s0"]["ports"]["l0"]
    sent = fabric.counters("l0", "s0").tx_bytes
    assert sent > 0 and app.tx_bytes[(fabric.switches["l0"].dpid, uplink)] == sent
    fabric.disconnect("l3")
    assert fabric.switches["l3"].dpid not in app.datapaths
