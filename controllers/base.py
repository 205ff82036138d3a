"""A thin os-ken shim that installs what a routing policy computes.

Subclasses name their policy; :mod:`fabric.routing.policies` computes the intents.
This class pushes a switch's full state when it connects (so a switch that
reconnects, e.g. after an Open vSwitch restart, is made whole again), learns
port liveness from port descriptions and port-status messages, recomputes
routes around dead links and sends only the difference, confirms every
change with a barrier, answers ARP from the graph, and reports readiness and
events in a JSON status file.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import (CONFIG_DISPATCHER, DEAD_DISPATCHER, MAIN_DISPATCHER,
                                       set_ev_cls)
from os_ken.lib.packet import arp, ethernet, packet
from os_ken.ofproto import ofproto_v1_5

from controllers import runtime
from controllers.openflow import diff_messages, full_state_messages
from fabric.model import graph as fg
from fabric.model.intents import SwitchIntent
from fabric.routing.policies import compute_intents

MAX_EVENTS = 50


class PolicyApp(app_manager.OSKenApp):
    """Base app: installs :func:`fabric.routing.policies.compute_intents` for ``policy``."""

    OFP_VERSIONS = [ofproto_v1_5.OFP_VERSION]
    policy = "ecmp"

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        launch = runtime.current()
        self.graph = launch.graph
        self.config = launch.config
        self.status_path = launch.status_path
        self.switch_by_dpid = {fg.dpid_int(self.graph, sw): sw for sw in fg.switches(self.graph)}
        self.neighbour = {(sw, fg.port(self.graph, sw, nbr)): nbr
                          for sw in fg.switches(self.graph) for nbr in self.graph.neighbors(sw)}
        self.mac_by_ip = {a.ip: a.mac for a in fg.attachments(self.graph)}
        self.port_down: set[tuple[str, int]] = set()
        self.intents: dict[str, SwitchIntent] = self.compute()
        self.installed: dict[str, SwitchIntent] = {}
        self.datapaths: dict[str, Any] = {}
        self.ready: set[str] = set()
        self.errors: list[str] = []
        self.event_log: list[dict] = []  # not "events": os-ken owns that name
        self.rounds = 0
        self._barriers: dict[tuple[int, int], str] = {}
        self._write_status()

    # -- policy ---------------------------------------------------------------

    def compute(self) -> dict[str, SwitchIntent]:
        """Intents for the current link state (subclasses add weights)."""
        return compute_intents(self.policy, self.graph, self.down_links(), self.config.lanes,
                               previous=getattr(self, "intents", None),
                               pinned=self.config.routes)

    def down_links(self) -> set[frozenset]:
        """Links with at least one end reported down."""
        return {frozenset((sw, self.neighbour[(sw, port)])) for sw, port in self.port_down
                if (sw, port) in self.neighbour}

    def refresh(self, reason: str) -> None:
        """Recompute and send every connected switch its difference."""
        self.intents = self.compute()
        self.rounds += 1
        changed = [sw for sw in self.datapaths if self.installed.get(sw) != self.intents[sw]]
        for sw in changed:
            self.push(sw, diff_messages(self.datapaths[sw], self.installed[sw], self.intents[sw]))
        self._event(f"{reason}: updated {len(changed)} switches")

    def push(self, switch: str, msgs: list[Any]) -> None:
        """Send ``msgs`` to ``switch`` and a barrier that marks it ready again."""
        datapath = self.datapaths[switch]
        for msg in msgs:
            datapath.send_msg(msg)
        self.installed[switch] = self.intents[switch]
        barrier = datapath.ofproto_parser.OFPBarrierRequest(datapath)
        datapath.send_msg(barrier)
        self._barriers[(datapath.id, barrier.xid)] = switch

    # -- switch events ----------------------------------------------------------

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def _on_features(self, ev: Any) -> None:
        datapath = ev.msg.datapath
        switch = self.switch_by_dpid.get(datapath.id)
        if switch is None:
            self._error(f"unknown datapath {datapath.id:016x} connected; ignored")
            return
        self.datapaths[switch] = datapath
        self.ready.discard(switch)
        self.push(switch, full_state_messages(datapath, self.intents[switch]))
        datapath.send_msg(datapath.ofproto_parser.OFPPortDescStatsRequest(datapath, 0))
        self._event(f"{switch} connected: full state sent")

    # Replies to what _on_features sends can arrive before os-ken's own
    # port-description reply moves the datapath to MAIN_DISPATCHER (os-ken's
    # handler and this app run in separate green threads), so listen in both.
    @set_ev_cls(ofp_event.EventOFPPortDescStatsReply, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def _on_port_desc(self, ev: Any) -> None:
        switch = self.switch_by_dpid.get(ev.msg.datapath.id)
        if switch is None:
            return
        ofp = ev.msg.datapath.ofproto
        before = set(self.port_down)
        for desc in ev.msg.body:
            if desc.port_no < ofp.OFPP_MAX:
                self._set_port(switch, desc.port_no, self._is_down(ofp, desc))
        if self.port_down != before:
            self.refresh(f"{switch} port descriptions")

    @set_ev_cls(ofp_event.EventOFPPortStatus, MAIN_DISPATCHER)
    def _on_port_status(self, ev: Any) -> None:
        msg = ev.msg
        switch = self.switch_by_dpid.get(msg.datapath.id)
        if switch is None:
            return
        ofp = msg.datapath.ofproto
        down = msg.reason == ofp.OFPPR_DELETE or self._is_down(ofp, msg.desc)
        if self._set_port(switch, msg.desc.port_no, down):
            self.refresh(f"{switch} port {msg.desc.port_no} {'down' if down else 'up'}")

    @staticmethod
    def _is_down(ofp: Any, desc: Any) -> bool:
        return bool(desc.state & ofp.OFPPS_LINK_DOWN or desc.config & ofp.OFPPC_PORT_DOWN)

    def _set_port(self, switch: str, port: int, down: bool) -> bool:
        key = (switch, port)
        if down == (key in self.port_down):
            return False
        (self.port_down.add if down else self.port_down.discard)(key)
        return True

    @set_ev_cls(ofp_event.EventOFPBarrierReply, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
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
            self.installed.pop(switch, None)
            self.ready.discard(switch)
            self._event(f"{switch} disconnected")

    @set_ev_cls(ofp_event.EventOFPErrorMsg, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def _on_error(self, ev: Any) -> None:
        msg = ev.msg
        switch = self.switch_by_dpid.get(msg.datapath.id, hex(msg.datapath.id))
        self._error(f"{switch}: OpenFlow error type={msg.type} code={msg.code}")

    # -- ARP from the graph -------------------------------------------------------

    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def _on_packet_in(self, ev: Any) -> None:
        msg = ev.msg
        req = packet.Packet(msg.data).get_protocol(arp.arp)
        if req is None or req.opcode != arp.ARP_REQUEST:
            return
        mac = self.mac_by_ip.get(req.dst_ip)
        if mac is None:  # not an address of this fabric: stay silent
            return
        datapath = msg.datapath
        ofp, parser = datapath.ofproto, datapath.ofproto_parser
        reply = packet.Packet()
        reply.add_protocol(ethernet.ethernet(dst=req.src_mac, src=mac, ethertype=0x0806))
        reply.add_protocol(arp.arp(opcode=arp.ARP_REPLY, src_mac=mac, src_ip=req.dst_ip,
                                   dst_mac=req.src_mac, dst_ip=req.src_ip))
        reply.serialize()
        datapath.send_msg(parser.OFPPacketOut(
            datapath, buffer_id=ofp.OFP_NO_BUFFER,
            match=parser.OFPMatch(in_port=ofp.OFPP_CONTROLLER),
            actions=[parser.OFPActionOutput(msg.match["in_port"])], data=reply.data))

    # -- status -----------------------------------------------------------------

    def _event(self, text: str) -> None:
        self.logger.info(text)
        self.event_log = (self.event_log + [{"time": time.time(), "what": text}])[-MAX_EVENTS:]
        self._write_status()

    def _error(self, text: str) -> None:
        self.logger.error(text)
        self.errors.append(text)
        self._write_status()

    def status(self) -> dict:
        """What the status file holds."""
        return {"pid": os.getpid(), "policy": self.policy, "ready": sorted(self.ready),
                "switches": len(self.switch_by_dpid), "rounds": self.rounds,
                "down_links": sorted(sorted(link) for link in self.down_links()),
                "errors": self.errors[-20:], "events": self.event_log}

    def _write_status(self) -> None:
        if self.status_path is None:
            return
        tmp = self.status_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.status()))
        os.replace(tmp, self.status_path)  # atomic: readers never see half a file
