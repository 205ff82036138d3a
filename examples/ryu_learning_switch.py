"""A classic Ryu-style app, unchanged: an OpenFlow 1.3 learning switch.

Written against Ryu's module paths (``ryu.*``, ``RyuApp``), as the field's
tutorials write them; fabric maps them onto os-ken when it loads the app
(:mod:`controllers.ryu_compat`). It learns which port each MAC address sits
behind, floods what it has not learned yet and installs a flow once it knows
both ends, so it only suits loop-free fabrics (for example
``leaf-spine,spines=1``)::

    sudo fabric up leaf-spine,spines=1 \
        --controller-app examples/ryu_learning_switch.py:LearningSwitch13
"""

from ryu.base import app_manager
from ryu.controller import ofp_event
from ryu.controller.handler import CONFIG_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
from ryu.lib.packet import ethernet, packet
from ryu.ofproto import ofproto_v1_3

IDLE_TIMEOUT_S = 30


class LearningSwitch13(app_manager.RyuApp):
    """MAC learning per switch; table-miss to the controller."""

    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.where = {}  # datapath id -> {mac: port}

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def switch_features(self, ev):
        datapath = ev.msg.datapath
        ofp, parser = datapath.ofproto, datapath.ofproto_parser
        to_controller = [parser.OFPActionOutput(ofp.OFPP_CONTROLLER, ofp.OFPCML_NO_BUFFER)]
        self.add_flow(datapath, 0, parser.OFPMatch(), to_controller, idle_timeout=0)

    def add_flow(self, datapath, priority, match, actions, idle_timeout=IDLE_TIMEOUT_S):
        ofp, parser = datapath.ofproto, datapath.ofproto_parser
        instructions = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions)]
        datapath.send_msg(parser.OFPFlowMod(datapath=datapath, priority=priority, match=match,
                                            instructions=instructions,
                                            idle_timeout=idle_timeout))

    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def packet_in(self, ev):
        msg = ev.msg
        datapath = msg.datapath
        ofp, parser = datapath.ofproto, datapath.ofproto_parser
        in_port = msg.match["in_port"]
        eth = packet.Packet(msg.data).get_protocol(ethernet.ethernet)
        if eth is None or eth.ethertype == 0x86DD:  # IPv6 discovery only adds noise
            return
        table = self.where.setdefault(datapath.id, {})
        table[eth.src] = in_port
        out_port = table.get(eth.dst, ofp.OFPP_FLOOD)
        actions = [parser.OFPActionOutput(out_port)]
        if out_port != ofp.OFPP_FLOOD:
            self.add_flow(datapath, 1, parser.OFPMatch(in_port=in_port, eth_dst=eth.dst), actions)
        data = msg.data if msg.buffer_id == ofp.OFP_NO_BUFFER else None
        datapath.send_msg(parser.OFPPacketOut(datapath=datapath, buffer_id=msg.buffer_id,
                                              in_port=in_port, actions=actions, data=data))
