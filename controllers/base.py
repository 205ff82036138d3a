"""A thin os-ken shim that installs the intents a routing policy computes.

Subclasses only say how to compute intents. This class pushes a switch's
full state when it connects (so a reconnecting switch is made whole again),
confirms it with a barrier, answers ARP from the graph, and reports which
switches are ready in a JSON status file the launcher polls.
"""

from __future__ import annotations

import json
import os
from typing import Any

from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import (CONFIG_DISPATCHER, DEAD_DISPATCHER, MAIN_DISPATCHER,
                                       set_ev_cls)
from os_ken.lib.packet import arp, ethernet, packet
from os_ken.ofproto import ofproto_v1_5

from controllers import runtime
from controllers.openflow import full_state_messages
from fabric import graph as fg
from fabric.intents import SwitchIntent


class IntentApp(app_manager.OSKenApp):
    """Base app: subclasses implement :meth:`compute_intents`."""

    OFP_VERSIONS = [ofproto_v1_5.OFP_VERSION]
    policy = "base"

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        config = runtime.current()
        self.graph = config.graph
        self.options = config.options
        self.status_path = config.status_path
        self.switch_by_dpid = {fg.dpid_int(self.graph, sw): sw for sw in fg.switches(self.graph)}
        self.mac_by_ip = {a.ip: a.mac for a in fg.attachments(self.graph)}
        self.intents: dict[str, SwitchIntent] = self.compute_intents()
        self.datapaths: dict[str, Any] = {}
        self.ready: set[str] = set()
        self.errors: list[str] = []
        self._barriers: dict[tuple[int, int], str] = {}
        self._write_status()

    def compute_intents(self) -> dict[str, SwitchIntent]:
        """Return ``{switch: SwitchIntent}`` for the current state."""
        raise NotImplementedError

    def install(self, datapath: Any, switch: str) -> None:
        """Replace ``switch``'s state with its intent and ask for a barrier."""
        for msg in full_state_messages(datapath, self.intents[switch]):
            datapath.send_msg(msg)
        barrier = datapath.ofproto_parser.OFPBarrierRequest(datapath)
        datapath.send_msg(barrier)
        self._barriers[(datapath.id, barrier.xid)] = switch

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def _on_features(self, ev: Any) -> None:
        datapath = ev.msg.datapath
        switch = self.switch_by_dpid.get(datapath.id)
        if switch is None:
            self._error(f"unknown datapath {datapath.id:016x} connected; ignored")
            return
        self.datapaths[switch] = datapath
        self.ready.discard(switch)
        self.install(datapath, switch)

    @set_ev_cls(ofp_event.EventOFPBarrierReply, MAIN_DISPATCHER)
    def _on_barrier(self, ev: Any) -> None:
        switch = self._barriers.pop((ev.msg.datapath.id, ev.msg.xid), None)
        if switch is not None:
            self.ready.add(switch)
            self._write_status()

    @set_ev_cls(ofp_event.EventOFPStateChange, DEAD_DISPATCHER)
    def _on_disconnect(self, ev: Any) -> None:
        switch = self.switch_by_dpid.get(ev.datapath.id)
        if switch is not None and self.datapaths.get(switch) is ev.datapath:
            del self.datapaths[switch]
            self.ready.discard(switch)
            self._write_status()

    @set_ev_cls(ofp_event.EventOFPErrorMsg, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def _on_error(self, ev: Any) -> None:
        msg = ev.msg
        switch = self.switch_by_dpid.get(msg.datapath.id, hex(msg.datapath.id))
        self._error(f"{switch}: OpenFlow error type={msg.type} code={msg.code}")

    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def _on_packet_in(self, ev: Any) -> None:
        msg = ev.msg
        pkt = packet.Packet(msg.data)
        req = pkt.get_protocol(arp.arp)
        if req is None or req.opcode != arp.ARP_REQUEST:
            return
        mac = self.mac_by_ip.get(req.dst_ip)
        if mac is None:  # not an address of this fabric: stay silent
            return
        self._send_arp_reply(msg, req, mac)

    def _send_arp_reply(self, msg: Any, req: Any, mac: str) -> None:
        datapath = msg.datapath
        ofp, parser = datapath.ofproto, datapath.ofproto_parser
        reply = packet.Packet()
        reply.add_protocol(ethernet.ethernet(dst=req.src_mac, src=mac, ethertype=0x0806))
        reply.add_protocol(arp.arp(opcode=arp.ARP_REPLY, src_mac=mac, src_ip=req.dst_ip,
                                   dst_mac=req.src_mac, dst_ip=req.src_ip))
        reply.serialize()
        in_port = msg.match["in_port"]
        out = parser.OFPPacketOut(datapath, buffer_id=ofp.OFP_NO_BUFFER,
                                  match=parser.OFPMatch(in_port=ofp.OFPP_CONTROLLER),
                                  actions=[parser.OFPActionOutput(in_port)], data=reply.data)
        datapath.send_msg(out)

    def _error(self, text: str) -> None:
        self.logger.error(text)
        self.errors.append(text)
        self._write_status()

    def _write_status(self) -> None:
        if self.status_path is None:
            return
        status = {"pid": os.getpid(), "policy": self.policy, "ready": sorted(self.ready),
                  "switches": len(self.switch_by_dpid), "errors": self.errors[-20:]}
        tmp = self.status_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(status))
        os.replace(tmp, self.status_path)  # atomic: readers never see half a file
