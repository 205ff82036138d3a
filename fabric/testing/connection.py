"""The os-ken side of the fake fabric: handshakes, events, replies, polling.

:class:`AppConnection` is mixed into :class:`~fabric.testing.harness.FakeFabric`
(which holds the state it uses: ``switches``, ``apps``, ``datapaths``,
``messages``, ``errors`` and the event queue). It plays os-ken's connection
layer: the handshake, event delivery by dispatcher state, and the switch's
answers to what apps send.

Events are delivered synchronously, one at a time from a queue: what a
handler sends is applied to the switch at once, and the switch's replies
(barrier replies, statistics, errors) are delivered after the handler
returns. Replies to messages sent outside a handler (a test calling the app
directly) wait for the next harness call or :meth:`AppConnection.flush`.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections import deque
from typing import Any, Iterable, Iterator

from os_ken.controller import ofp_event
from os_ken.controller.handler import (CONFIG_DISPATCHER, DEAD_DISPATCHER, MAIN_DISPATCHER,
                                       register_instance)
from os_ken.ofproto import ofproto_v1_5 as ofp

from fabric.testing import of13
from fabric.testing.datapath import FakeDatapath
from fabric.testing.fakeswitch import FakeSwitch
from fabric.testing.tables import OpenFlowError, UnsupportedFeature

MAX_EVENTS_PER_DRAIN = 1_000_000
_CAPABILITIES = (ofp.OFPC_FLOW_STATS | ofp.OFPC_TABLE_STATS | ofp.OFPC_PORT_STATS
                 | ofp.OFPC_GROUP_STATS | ofp.OFPC_QUEUE_STATS)


class HarnessError(RuntimeError):
    """The harness was used in a way it cannot honour."""


class AppConnection:
    """Connect os-ken apps to fake switches (mixed into ``FakeFabric``)."""

    graph: Any
    switches: dict[str, FakeSwitch]
    apps: list[Any]
    datapaths: dict[str, FakeDatapath]
    messages: dict[str, list[Any]]
    errors: list[OpenFlowError]
    error_mode: str
    handshake_order: str
    version: int
    clock: float
    _pending: deque
    _draining: bool
    _detached: dict[str, FakeDatapath]
    _connections: int

    def _packet_out(self, sw: FakeSwitch, msg: Any) -> None:
        """Run a packet-out through the fabric (provided by ``FakeFabric``)."""
        raise NotImplementedError

    # -- apps ------------------------------------------------------------------------

    def make_app(self, app_cls: type, config: Any = None, status_path: Any = None) -> Any:
        """Instantiate one of fabric's policy apps for this graph (not connected).

        Sets ``controllers.runtime`` to this graph and ``config`` (a
        :class:`fabric.routing.config.ControllerConfig`; default config when None)
        and calls ``app_cls()``, as os-ken's app manager would. Apps that do
        not read ``controllers.runtime`` can simply be instantiated.
        """
        from fabric.routing import runtime
        from fabric.routing.config import ControllerConfig

        runtime.configure(runtime.RuntimeConfig(self.graph, status_path,
                                                config or ControllerConfig()))
        return app_cls()

    def connect(self, *apps: Any, switches: Iterable[str] | None = None) -> Any:
        """Register ``apps`` and connect the switches to them; return the first app.

        Registers each app's ``@set_ev_cls`` handlers (as os-ken's app
        manager does) unless it has some already, then runs every switch's
        handshake: ``EventOFPSwitchFeatures`` and os-ken's own port
        description reply in ``CONFIG_DISPATCHER``, then
        ``EventOFPStateChange`` to ``MAIN_DISPATCHER``. The polling threads
        an app starts in ``start()`` are not started: see :meth:`poll_stats`.

        Parameters
        ----------
        *apps : os_ken.base.app_manager.OSKenApp
            Apps that all see every event, like apps in one os-ken process.
        switches : iterable of str, optional
            Connect only these switches (default: all).
        """
        if not apps:
            raise ValueError("connect() needs at least one app")
        if self.datapaths:
            raise HarnessError("switches are already connected: connect all apps in one call")
        self.version = negotiate(apps)
        for app in apps:
            if not app.event_handlers:
                register_instance(app)
            self.apps.append(app)
        for name in switches if switches is not None else self.switches:
            self._handshake(name)
        return apps[0]

    def disconnect(self, switch: str) -> None:
        """Drop ``switch``'s connection: apps get ``EventOFPStateChange`` (DEAD)."""
        self.flush()
        dp = self.datapaths.pop(switch, None)
        if dp is None:
            return
        dp.is_active = False
        self._post(self._state_change(dp, DEAD_DISPATCHER), DEAD_DISPATCHER)
        self.flush()

    def reconnect(self, switch: str, restart: bool = False) -> FakeDatapath:
        """Connect ``switch`` again with a new datapath, as after a connection loss.

        Parameters
        ----------
        switch : str
            The switch.
        restart : bool
            Also forget its flows and groups first (an ``ovs-vswitchd``
            restart); otherwise the tables survive, as in Open vSwitch.
        """
        self.disconnect(switch)
        if restart:
            self.switches[switch].clear()
        self._handshake(switch)
        return self.datapaths[switch]

    def datapath(self, switch: str) -> FakeDatapath:
        """The connected datapath of ``switch``, or a detached one for hand-built messages.

        Messages sent on a detached datapath change the switch; replies to
        them (barriers, statistics) reach no app.
        """
        if switch in self.datapaths:
            return self.datapaths[switch]
        if switch not in self.switches:
            raise KeyError(f"no switch {switch!r}")
        if switch not in self._detached:
            dp = FakeDatapath(self, switch, self.switches[switch].dpid, version=self.version)
            dp.state = MAIN_DISPATCHER
            self._detached[switch] = dp
        return self._detached[switch]

    def deliver(self, ev: Any, state: str | None = None) -> None:
        """Deliver any event to the apps.

        ``state`` defaults to the state of the message's datapath; an event
        without a message then goes to every handler of its class.
        """
        self._post(ev, state)
        self.flush()

    def flush(self) -> None:
        """Deliver every queued event (replies to what apps sent outside a handler)."""
        if self._draining:
            return
        self._draining = True
        delivered = 0
        try:
            while self._pending:
                ev, state = self._pending.popleft()
                delivered += 1
                if delivered > MAX_EVENTS_PER_DRAIN:
                    raise HarnessError("apps and switches keep answering each other")
                if isinstance(ev, ofp_event.EventOFPStateChange):
                    ev.datapath.state = ev.state
                if state is None and hasattr(ev, "msg"):
                    state = ev.msg.datapath.state  # the state when the message arrives
                for app in self.apps:
                    for handler in app.get_handlers(ev, state):
                        handler(ev)
        except BaseException:
            self._pending.clear()
            raise
        finally:
            self._draining = False

    def _post(self, ev: Any, state: str | None = None) -> None:
        self._pending.append((ev, state))

    @staticmethod
    def _state_change(dp: FakeDatapath, state: str) -> Any:
        ev = ofp_event.EventOFPStateChange(dp)
        ev.state = state
        return ev

    def _handshake(self, name: str) -> None:
        sw = self.switches[name]
        self._connections += 1
        dp = FakeDatapath(self, name, sw.dpid, ("127.0.0.1", 40000 + self._connections),
                          self.version)
        dp.state = CONFIG_DISPATCHER
        self.datapaths[name] = dp
        features = dp.ofproto_parser.OFPSwitchFeatures(
            dp, datapath_id=sw.dpid, n_buffers=0, n_tables=254, auxiliary_id=0,
            capabilities=_CAPABILITIES)
        dp.set_xid(features)
        self._post(ofp_event.EventOFPSwitchFeatures(features), CONFIG_DISPATCHER)
        if self.handshake_order == "app-first":
            self.flush()  # replies to the apps' messages, still in CONFIG_DISPATCHER
        # os-ken's own handler asks for port descriptions before MAIN_DISPATCHER.
        desc = self._multipart("OFPPortDescStatsReply", dp, port_descs(dp, sw), None)
        dp.ports = {p.port_no: p for p in desc.body}
        self._post(ofp_event.EventOFPPortDescStatsReply(desc), CONFIG_DISPATCHER)
        self._post(self._state_change(dp, MAIN_DISPATCHER), MAIN_DISPATCHER)
        self.flush()

    # -- the switch side of the connection ---------------------------------------------

    def _receive(self, dp: FakeDatapath, msg: Any) -> None:
        """Apply one message an app sent (called by ``FakeDatapath.send_msg``)."""
        name = dp.switch
        self.messages[name].append(msg)
        try:
            applied = of13.upgrade(msg) if _is13(dp) else msg
            replies = self._handle(self.switches[name], dp, applied)
        except OpenFlowError as err:
            err.switch = name
            self.errors.append(err)
            if self.error_mode == "raise":
                raise
            reply = dp.ofproto_parser.OFPErrorMsg(dp, type_=err.type, code=err.code,
                                                  data=bytes(msg.buf[:64]))
            reply.xid = msg.xid
            replies = [reply]
        for reply in replies + self._flows_removed(dp, self.switches[name]):
            self._post(ofp_event.ofp_msg_to_ev(reply))

    def _flows_removed(self, dp: FakeDatapath | None, sw: FakeSwitch) -> list[Any]:
        """``OFPFlowRemoved`` for every entry ``sw`` removed that asked for one
        (``OFPFF_SEND_FLOW_REM``), as Open vSwitch sends them; none on a detached
        datapath."""
        removed, sw.removed = sw.removed, []
        if dp is None or self.datapaths.get(sw.name) is not dp:
            return []  # no connection (advance's datapaths.get) or a replaced one
        messages = []
        for entry, reason in removed:
            if not entry.flags & ofp.OFPFF_SEND_FLOW_REM:
                continue
            if _is13(dp):
                msg = of13.flow_removed(dp, entry, reason)
            else:
                p = dp.ofproto_parser
                msg = p.OFPFlowRemoved(
                    dp, table_id=entry.table_id, reason=reason, priority=entry.priority,
                    idle_timeout=entry.idle_timeout, hard_timeout=entry.hard_timeout,
                    cookie=entry.cookie, match=entry.ofp_match or p.OFPMatch(),
                    stats=p.OFPStats(duration=(0, 0), packet_count=entry.packets,
                                     byte_count=entry.bytes))
            dp.set_xid(msg)
            messages.append(msg)
        return messages

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` pass on every switch: entries whose idle or hard timeout ran
        out are removed, and the apps get ``EventOFPFlowRemoved`` for those that asked.

        The clock starts at 0 and moves only here; a traced (counted) packet
        keeps the entries it matched alive, as traffic does on a real switch.
        """
        if seconds < 0:
            raise ValueError(f"time does not run backwards ({seconds} s)")
        self.flush()
        self.clock += seconds
        for name, sw in self.switches.items():
            sw.expire(self.clock)
            for msg in self._flows_removed(self.datapaths.get(name), sw):
                self._post(ofp_event.ofp_msg_to_ev(msg))
        self.flush()

    def _handle(self, sw: FakeSwitch, dp: FakeDatapath, msg: Any) -> list[Any]:
        """Apply ``msg`` (flow-, group-mods and packet-outs in their 1.5 form); the replies.

        Replies are built with the connection's own parser, so a 1.3 app
        gets 1.3 messages.
        """
        kind = type(msg).__name__
        p = dp.ofproto_parser
        if kind == "OFPFlowMod":
            sw.flow_mod(msg)
        elif kind == "OFPGroupMod":
            sw.group_mod(msg)
        elif kind == "OFPPacketOut":
            self._packet_out(sw, msg)
        elif kind in ("OFPBarrierRequest", "OFPEchoRequest", "OFPFeaturesRequest"):
            if kind == "OFPBarrierRequest":
                reply = p.OFPBarrierReply(dp)
            elif kind == "OFPEchoRequest":
                reply = p.OFPEchoReply(dp, data=msg.data)
            else:
                reply = p.OFPSwitchFeatures(dp, sw.dpid, 0, 254, 0, _CAPABILITIES)
            reply.xid = msg.xid
            return [reply]
        elif kind in _STATS:
            return [self._multipart(_STATS[kind], dp, _stats_body(kind, dp, sw, msg), msg.xid)]
        elif kind != "OFPSetConfig":
            raise UnsupportedFeature(f"{kind} is not modelled by the fake switch")
        return []

    @staticmethod
    def _multipart(kind: str, dp: FakeDatapath, body: list[Any], xid: int | None) -> Any:
        cls = getattr(dp.ofproto_parser, kind)
        reply = cls(dp, body=body, flags=0)
        reply.type = cls.cls_stats_type
        reply.xid = xid
        return reply

    def packet_in(self, switch: str, in_port: int, data: bytes,
                  reason: int = ofp.OFPR_APPLY_ACTION, table_id: int = 0,
                  cookie: int = 0) -> None:
        """Deliver ``EventOFPPacketIn`` from ``switch`` (nothing if it is not connected)."""
        dp = self.datapaths.get(switch)
        if dp is None:
            return
        p = dp.ofproto_parser
        match = p.OFPMatch(in_port=in_port)
        msg = p.OFPPacketIn(dp, buffer_id=ofp.OFP_NO_BUFFER, total_len=len(data),
                            reason=reason, table_id=table_id, cookie=cookie,
                            match=match, data=bytes(data))
        # the length a switch's message has (apps compare it with total_len): header,
        # fixed fields, the padded match, two bytes of pad, the frame
        msg.msg_len = dp.ofproto.OFP_PACKET_IN_SIZE - dp.ofproto.OFP_MATCH_SIZE + \
            match.serialize(bytearray(), 0) + 2 + len(data)
        dp.set_xid(msg)
        self.deliver(ofp_event.EventOFPPacketIn(msg))

    def poll_stats(self, app: Any = None, now: float | None = None) -> None:
        """Do one telemetry round: port-stats request and reply for every switch.

        Stands in for an app's polling thread: sends ``OFPPortStatsRequest``
        (all ports) on every connected datapath and delivers the replies
        built from the port counters. With ``now``, ``time.monotonic()``
        returns ``now`` inside the handlers of the apps' modules (the module
        global ``time`` and a ``monotonic`` imported from it are replaced
        while the replies are delivered; nothing else is touched).
        """
        if app is not None and app not in self.apps:
            raise HarnessError("poll_stats: that app is not connected")
        self.flush()
        for dp in list(self.datapaths.values()):
            dp.send_msg(dp.ofproto_parser.OFPPortStatsRequest(dp, 0, ofp.OFPP_ANY))
        with _frozen_monotonic([app] if app is not None else self.apps, now):
            self.flush()


# statistics request -> its reply (the body comes from _stats_body)
_STATS = {"OFPPortDescStatsRequest": "OFPPortDescStatsReply",
          "OFPPortStatsRequest": "OFPPortStatsReply",
          "OFPFlowStatsRequest": "OFPFlowStatsReply",
          "OFPGroupStatsRequest": "OFPGroupStatsReply"}


def negotiate(apps: Iterable[Any]) -> int:
    """The OpenFlow version a switch and ``apps`` agree on: the highest common one.

    As in os-ken, every app that lists ``OFP_VERSIONS`` narrows the versions
    the controller offers; the fake switch offers 1.3 and 1.5.
    """
    common = set(of13.VERSIONS)
    for app in apps:
        common &= set(getattr(app, "OFP_VERSIONS", None) or of13.VERSIONS)
    if not common:
        wanted = {type(a).__name__: getattr(a, "OFP_VERSIONS", None) for a in apps}
        raise HarnessError(f"no OpenFlow version common to the apps {wanted} and the fake "
                           f"switch (OpenFlow 1.3 and 1.5: {sorted(of13.VERSIONS)})")
    return max(common)


def port_descs(dp: FakeDatapath, sw: FakeSwitch, port_no: int = ofp.OFPP_ANY) -> list[Any]:
    """The switch's port descriptions in the connection's version."""
    descs = sw.port_descs(port_no)
    return [of13.port_desc(d) for d in descs] if _is13(dp) else descs


def _stats_body(kind: str, dp: FakeDatapath, sw: FakeSwitch, msg: Any) -> list[Any]:
    if kind == "OFPPortDescStatsRequest":  # 1.3's request names no port
        return port_descs(dp, sw, getattr(msg, "port_no", ofp.OFPP_ANY))
    if kind == "OFPPortStatsRequest":
        stats = sw.port_stats(msg.port_no)
        return [of13.port_stats(s) for s in stats] if _is13(dp) else stats
    if kind == "OFPFlowStatsRequest":
        if _is13(dp):
            return of13.flow_stats(sw.flows_in(msg.table_id))
        return sw.flow_stats(msg.table_id)
    if _is13(dp):
        return of13.group_stats(sw.groups_in(msg.group_id))
    return sw.group_stats(msg.group_id)


def _is13(dp: FakeDatapath) -> bool:
    return dp.ofproto.OFP_VERSION == of13.OF13


class _FrozenTime:
    """The ``time`` module with ``monotonic()`` pinned."""

    def __init__(self, now: float):
        self._now = now

    def monotonic(self) -> float:
        return self._now

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


@contextlib.contextmanager
def _frozen_monotonic(apps: list[Any], now: float | None) -> Iterator[None]:
    if now is None:
        yield
        return
    frozen = _FrozenTime(now)
    saved = []
    modules = {cls.__module__ for app in apps for cls in type(app).__mro__}
    for module in filter(None, (sys.modules.get(m) for m in modules)):
        for attr, value in (("time", frozen), ("monotonic", frozen.monotonic)):
            current = getattr(module, attr, None)
            if current is time or current is time.monotonic:
                saved.append((module, attr, current))
                setattr(module, attr, value)
    try:
        yield
    finally:
        for module, attr, original in saved:
            setattr(module, attr, original)
