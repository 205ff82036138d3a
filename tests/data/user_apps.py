"""Apps a user could write, for the tests of ``--controller-app``.

``StaticEcmp`` is a plain os-ken app (not built on fabric's ``PolicyApp``):
it reads the fabric graph from the documented context and installs ECMP
routes on every switch that connects. ``NotAnApp`` is not an app at all.
"""

from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import CONFIG_DISPATCHER, set_ev_cls
from os_ken.ofproto import ofproto_v1_5

from controllers import runtime
from controllers.openflow import full_state_messages
from fabric.routing.policies import compute_intents


class NotAnApp:
    """Named by a test that expects a refusal."""


class StaticEcmp(app_manager.OSKenApp):
    """Install the graph's ECMP routes on connect; nothing else."""

    OFP_VERSIONS = [ofproto_v1_5.OFP_VERSION]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        context = runtime.current()
        self.intents = {i.dpid: i for i in compute_intents("ecmp", context.graph).values()}

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def _on_features(self, ev):
        datapath = ev.msg.datapath
        for msg in full_state_messages(datapath, self.intents[datapath.id]):
            datapath.send_msg(msg)
