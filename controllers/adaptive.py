"""Adaptive app: spraying plus bucket weights driven by port telemetry.

Each ``interval_s`` it sends a link probe out of every live switch-to-switch
port (:mod:`fabric.routing.probes`) and polls every switch's port counters;
:class:`fabric.routing.adaptive.AdaptiveBalancer` turns counters and probe
delays into weights that move traffic away from hot or slow uplinks and
back. Changed groups are modified in place over OpenFlow 1.5.
"""

from __future__ import annotations

import time
from typing import Any

from os_ken.controller import ofp_event
from os_ken.controller.handler import MAIN_DISPATCHER, set_ev_cls
from os_ken.lib import hub

from controllers.base import PolicyApp
from fabric.model import graph as fg
from fabric.model.intents import SwitchIntent
from fabric.routing.adaptive import AdaptiveBalancer
from fabric.routing.policies import compute_intents
from fabric.routing.probes import ProbeRounds, probe_frame, probe_seq


class AdaptiveApp(PolicyApp):
    """Weighted select groups, re-weighted from port counters."""

    policy = "adaptive"

    def __init__(self, *args: Any, **kwargs: Any):
        self.balancer: AdaptiveBalancer | None = None
        self.probes = ProbeRounds()
        self.probes_returned = 0
        super().__init__(*args, **kwargs)

    @property
    def _balancer(self) -> AdaptiveBalancer:
        """The balancer, made by the first :meth:`compute` (from ``__init__``)."""
        if self.balancer is None:
            raise RuntimeError("the adaptive app has no balancer before its first compute")
        return self.balancer

    def compute(self) -> dict[str, SwitchIntent]:
        """Routes for the current link state with the balancer's weights."""
        if self.balancer is None:
            self.balancer = AdaptiveBalancer(self.graph, self.config.scale_mbps_per_gbps,
                                             self.config.adaptive)
        return compute_intents(self.policy, self.graph, self.down_links(), self.config.lanes,
                               weights=self.balancer.all_weights(),
                               previous=getattr(self, "intents", None),
                               default_weight=self.config.adaptive.max_weight,
                               pinned=self.config.routes)

    def start(self) -> Any:
        """Start the app and its polling loop."""
        thread = super().start()
        self.threads.append(hub.spawn(self._poll))
        return thread

    def _poll(self) -> None:
        while True:
            self.probe_round()
            for datapath in list(self.datapaths.values()):
                parser, ofp = datapath.ofproto_parser, datapath.ofproto
                datapath.send_msg(parser.OFPPortStatsRequest(datapath, 0, ofp.OFPP_ANY))
            hub.sleep(self.config.adaptive.interval_s)

    def probe_round(self) -> None:
        """Feed the last round's queueing delays to the balancer, then send one probe
        out of every live switch-to-switch port of every connected switch."""
        now = time.monotonic()
        before = self._balancer.slow_ports()
        for (switch, port), delay in self.probes.close_round(now).items():
            self._balancer.observe_queueing(switch, port, delay)
        self._report_slow(before)
        for (switch, port), nbr in self.neighbour.items():
            datapath = self.datapaths.get(switch)
            if (datapath is None or (switch, port) in self.port_down
                    or not fg.is_switch(self.graph, nbr)):
                continue
            parser, ofp = datapath.ofproto_parser, datapath.ofproto
            datapath.send_msg(parser.OFPPacketOut(
                datapath, buffer_id=ofp.OFP_NO_BUFFER,
                match=parser.OFPMatch(in_port=ofp.OFPP_CONTROLLER),
                actions=[parser.OFPActionOutput(port)],
                data=probe_frame(self.probes.sent(switch, port, now))))

    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def _on_probe(self, ev: Any) -> None:
        seq = probe_seq(bytes(ev.msg.data))
        if seq is None:
            return
        if self.probes.received(seq, time.monotonic()):
            self.probes_returned += 1

    def _report_slow(self, before: dict[tuple[str, int], float]) -> None:
        """An event (and a fresh status file) for every port found slow or recovered."""
        after = self._balancer.slow_ports()
        for switch, port in sorted(after.keys() - before.keys()):
            self._event(f"{switch} port {port} slow: {after[(switch, port)]:.0%} of its rate")
        for switch, port in sorted(before.keys() - after.keys()):
            self._event(f"{switch} port {port} recovered")

    def status(self) -> dict:
        """The base status plus the slow ports found and the probes returned."""
        slow = self.balancer.slow_ports() if self.balancer is not None else {}
        return {**super().status(), "probes_returned": self.probes_returned,
                "slow_ports": [{"switch": sw, "port": port, "share": round(share, 3)}
                               for (sw, port), share in sorted(slow.items())]}

    def _set_port(self, switch: str, port: int, down: bool) -> bool:
        changed = super()._set_port(switch, port, down)
        if changed and self.balancer is not None:  # a new link state: relearn its capacity
            self.balancer.forget(switch, port)
            self.probes.forget(switch, port)
        return changed

    @set_ev_cls(ofp_event.EventOFPPortStatsReply, MAIN_DISPATCHER)
    def _on_port_stats(self, ev: Any) -> None:
        switch = self.switch_by_dpid.get(ev.msg.datapath.id)
        if switch is None or switch not in self.intents:
            return
        now = time.monotonic()
        ofp = ev.msg.datapath.ofproto
        before = self._balancer.slow_ports()
        self._balancer.observe(switch, now, {s.port_no: (s.tx_bytes, s.tx_dropped)
                                             for s in ev.msg.body if s.port_no < ofp.OFPP_MAX})
        self._report_slow(before)
        port_sets = [tuple(b.port for b in g.buckets) for g in self.intents[switch].groups]
        if self._balancer.rebalance(switch, now, port_sets):
            self.refresh(f"{switch} weights")
