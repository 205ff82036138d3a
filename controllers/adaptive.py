"""Adaptive app: spraying plus bucket weights driven by port telemetry.

Polls every switch's port counters each ``interval_s`` and lets
:class:`fabric.routing.adaptive.AdaptiveBalancer` move weight away from hot uplinks
and back; changed groups are modified in place over OpenFlow 1.5.
"""

from __future__ import annotations

import time
from typing import Any

from os_ken.controller import ofp_event
from os_ken.controller.handler import MAIN_DISPATCHER, set_ev_cls
from os_ken.lib import hub

from controllers.base import PolicyApp
from fabric.model.intents import SwitchIntent
from fabric.routing.adaptive import AdaptiveBalancer
from fabric.routing.policies import compute_intents


class AdaptiveApp(PolicyApp):
    """Weighted select groups, re-weighted from port counters."""

    policy = "adaptive"

    def __init__(self, *args: Any, **kwargs: Any):
        self.balancer: AdaptiveBalancer | None = None
        super().__init__(*args, **kwargs)

    def compute(self) -> dict[str, SwitchIntent]:
        """Routes for the current link state with the balancer's weights."""
        if self.balancer is None:
            self.balancer = AdaptiveBalancer(self.graph, self.config.scale_mbps_per_gbps,
                                             self.config.adaptive)
        return compute_intents(self.policy, self.graph, self.down_links(), self.config.lanes,
                               weights=self.balancer.all_weights(),
                               previous=getattr(self, "intents", None),
                               default_weight=self.config.adaptive.max_weight)

    def start(self) -> Any:
        """Start the app and its polling loop."""
        thread = super().start()
        self.threads.append(hub.spawn(self._poll))
        return thread

    def _poll(self) -> None:
        while True:
            for datapath in list(self.datapaths.values()):
                parser, ofp = datapath.ofproto_parser, datapath.ofproto
                datapath.send_msg(parser.OFPPortStatsRequest(datapath, 0, ofp.OFPP_ANY))
            hub.sleep(self.config.adaptive.interval_s)

    @set_ev_cls(ofp_event.EventOFPPortStatsReply, MAIN_DISPATCHER)
    def _on_port_stats(self, ev: Any) -> None:
        switch = self.switch_by_dpid.get(ev.msg.datapath.id)
        if switch is None or switch not in self.intents:
            return
        now = time.monotonic()
        ofp = ev.msg.datapath.ofproto
        self.balancer.observe(switch, now, {s.port_no: (s.tx_bytes, s.tx_dropped)
                                            for s in ev.msg.body if s.port_no < ofp.OFPP_MAX})
        port_sets = [tuple(b.port for b in g.buckets) for g in self.intents[switch].groups]
        if self.balancer.rebalance(switch, now, port_sets):
            self.refresh(f"{switch} weights")
