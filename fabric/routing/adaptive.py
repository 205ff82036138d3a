"""Adaptive load balancing: bucket weights from port telemetry (pure).

The controller polls every switch's port counters; :class:`AdaptiveBalancer`
turns them into per-port utilisation (an exponentially weighted average of
transmitted bits over the emulated link rate; a port that dropped packets in
an interval counts as full) and, for every select group, moves weight away
from ports that are both busy and clearly busier than the group's mean:

* hot (``util >= hot_util`` and ``util - mean >= hot_margin``): halve the
  weight, down to ``min_weight``;
* cool (``util - mean <= cool_margin``) and not cut for ``hold_s``: double
  it, up to ``max_weight``;
* in between: keep it (hysteresis).

Open vSwitch falls back to per-connection hashing when bucket weights are
skewed beyond 1:255, so ``max_weight / min_weight`` is capped there. Weight
changes also remap some 5-tuples, so per-flow TCP traffic is rebalanced as
well as sprayed traffic.

A slow link (up, but at a fraction of its rate) sends little and so looks
cool. Link probes (:mod:`fabric.routing.probes`) expose it: a port whose
queueing delay stays at ``slow_delay_pkts`` full-size packet times or more
for ``SLOW_ROUNDS`` rounds while it sends less than ``hot_util`` of its
nominal rate is not idle but slow, and its capacity is learned as the rate
it sends at. Utilisation is measured against that learned capacity, and the
port's weight is capped at ``max_weight`` times its share of the nominal
rate (weights in proportion to capacity, as WCMP), until it sends clearly
faster (``FORGET_RATIO``), its queue stays shallow long enough for the
estimate to grow back to nominal, it stays idle, or its link changes state.

Counters are local, so a hot spot further along a path (a spine's
downlink) is not seen by the leaf that chooses the uplink; a slow link is:
the utilisation of a leaf's uplink to a spine counts the spine's slow ports
toward other switches (:meth:`AdaptiveBalancer.path_utilisation`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import networkx as nx

from fabric.model import graph as fg

MAX_WEIGHT_SKEW = 255


class AdaptiveConfigError(ValueError):
    """Adaptive parameters that cannot work."""


@dataclass(frozen=True)
class AdaptiveParams:
    """Tuning of the adaptive policy (defaults suit 10-20 Mbit/s links)."""

    interval_s: float = 0.1
    ewma_alpha: float = 0.5
    hot_util: float = 0.6
    hot_margin: float = 0.15
    cool_margin: float = 0.05
    hold_s: float = 0.5
    min_weight: int = 1
    max_weight: int = 100
    slow_delay_pkts: float = 8.0
    packet_bits: int = 1500 * 8  # of a full-size packet: what slow_delay_pkts counts

    def __post_init__(self) -> None:
        if not self.interval_s > 0:
            raise AdaptiveConfigError(f"interval_s must be > 0, got {self.interval_s}")
        if not 0 < self.ewma_alpha <= 1:
            raise AdaptiveConfigError(f"ewma_alpha must be in (0, 1], got {self.ewma_alpha}")
        if not self.cool_margin < self.hot_margin:
            raise AdaptiveConfigError("cool_margin must be below hot_margin (hysteresis)")
        if not 1 <= self.min_weight <= self.max_weight:
            raise AdaptiveConfigError("need 1 <= min_weight <= max_weight")
        if not self.slow_delay_pkts > 0:
            raise AdaptiveConfigError(f"slow_delay_pkts must be > 0, got {self.slow_delay_pkts}")
        if not self.packet_bits > 0:
            raise AdaptiveConfigError(f"packet_bits must be > 0, got {self.packet_bits}")
        if self.max_weight / self.min_weight > MAX_WEIGHT_SKEW:
            raise AdaptiveConfigError(f"weight skew above 1:{MAX_WEIGHT_SKEW} makes Open vSwitch "
                                      f"fall back to per-connection hashing")


# Packets a telemetry interval should span: the defaults' 0.1 s at 12 Mbit/s.
INTERVAL_PACKETS = 100
DEFAULT_FLOOR_S = 0.1  # the shortest interval the controller polls at
HOLD_INTERVALS = 5
SLOW_ROUNDS = 2       # probe rounds in a row a port must look slow before it is believed
FORGET_RATIO = 1.25   # a slow port sending this much above its learned rate has recovered
MIN_LEARNED = 0.01    # of the nominal rate: below it a port is idle, not slow
RELAX_RATIO = 1.25    # growth of a slow port's estimate after HOLD_INTERVALS shallow probes


def params_for_rate(host_mbps: float, packets: int = INTERVAL_PACKETS,
                    packet_bits: int = 1500 * 8, floor_s: float = DEFAULT_FLOOR_S
                    ) -> AdaptiveParams:
    """Timing scaled to the emulated rate: an interval spans ``packets`` full-size
    packets (of ``packet_bits``) of a host link, but at least ``floor_s``, and
    weights are held for ``HOLD_INTERVALS`` intervals.

    At a few Mbit/s a 0.1 s interval sees a few dozen packets: the
    utilisation estimate is noise, weights flap, and every group change makes
    userspace Open vSwitch revalidate its flows, which delays packets
    (docs/benchmarks.md, "The adaptive policy's interval"). A simulation whose
    workloads are scaled in time scales the floor alike.
    """
    if not host_mbps > 0:
        raise AdaptiveConfigError(f"host_mbps must be > 0, got {host_mbps}")
    interval = float(f"{max(floor_s, packets * packet_bits / (host_mbps * 1e6)):.3g}")
    return AdaptiveParams(interval_s=interval, hold_s=round(HOLD_INTERVALS * interval, 12),
                          packet_bits=packet_bits)


@dataclass
class _PortState:
    util: float = 0.0
    rate_bps: float = 0.0
    last_time: float | None = None
    last_tx_bytes: int = 0
    last_drops: int = 0
    slow_rounds: int = 0
    shallow_rounds: int = 0
    learned_bps: float | None = None


@dataclass
class AdaptiveBalancer:
    """Per-switch, per-port-set weights driven by port counters.

    Parameters
    ----------
    graph : networkx.Graph
        The fabric graph (link rates in physical Gbit/s).
    scale_mbps_per_gbps : float
        The emulation's rate scale; utilisation is against emulated rates.
    params : AdaptiveParams
        Thresholds and weight limits.
    """

    graph: nx.Graph
    scale_mbps_per_gbps: float
    params: AdaptiveParams = field(default_factory=AdaptiveParams)
    _ports: dict[tuple[str, int], _PortState] = field(default_factory=dict)
    _weights: dict[str, dict[tuple[int, ...], dict[int, int]]] = field(default_factory=dict)
    _last_cut: dict[tuple[str, tuple[int, ...], int], float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._neighbour = {(sw, fg.port(self.graph, sw, nbr)): nbr
                           for sw in fg.switches(self.graph) for nbr in self.graph.neighbors(sw)}
        self._ports_of = {sw: [fg.port(self.graph, sw, nbr) for nbr in self.graph.neighbors(sw)]
                          for sw in fg.switches(self.graph)}

    def capacity_bps(self, switch: str, port: int) -> float:
        """Nominal emulated rate of ``switch``'s link on ``port``."""
        nbr = self._neighbour.get((switch, port))
        if nbr is None:
            raise KeyError(f"{switch} has no port {port}")
        return self.graph.edges[switch, nbr]["gbps"] * self.scale_mbps_per_gbps * 1e6

    def learned_capacity_bps(self, switch: str, port: int) -> float | None:
        """The rate a slow port was found to carry, or None while it looks healthy."""
        state = self._ports.get((switch, port))
        return state.learned_bps if state else None

    def slow_ports(self) -> dict[tuple[str, int], float]:
        """``{(switch, port): learned share of the nominal rate}`` of every slow port."""
        return {key: state.learned_bps / self.capacity_bps(*key)
                for key, state in self._ports.items() if state.learned_bps is not None}

    def utilisation(self, switch: str, port: int) -> float:
        """Smoothed utilisation of a port (0 when never observed)."""
        state = self._ports.get((switch, port))
        return state.util if state else 0.0

    def path_utilisation(self, switch: str, port: int) -> float:
        """Utilisation of ``port`` or of any slow port of the switch behind it.

        The slow ports counted lead to switches other than ``switch``: a
        leaf's uplink to a spine whose downlink to another leaf is degraded
        is as busy as that downlink.
        """
        util = self.utilisation(switch, port)
        nbr = self._neighbour.get((switch, port))
        if nbr is None or not fg.is_switch(self.graph, nbr):
            return util
        for q in self._ports_of[nbr]:  # the switch behind: its ports only, not all ports
            state = self._ports.get((nbr, q))
            if (state is not None and state.learned_bps is not None
                    and fg.is_switch(self.graph, self._neighbour[(nbr, q)])
                    and self._neighbour[(nbr, q)] != switch):
                util = max(util, state.util)
        return util

    def observe(self, switch: str, now: float, counters: dict[int, tuple[int, int]]) -> None:
        """Feed one poll: ``{port: (tx_bytes, tx_dropped)}`` at time ``now``."""
        alpha = self.params.ewma_alpha
        for port, (tx_bytes, drops) in counters.items():
            state = self._ports.setdefault((switch, port), _PortState())
            if state.last_time is not None and now > state.last_time:
                rate = (tx_bytes - state.last_tx_bytes) * 8 / (now - state.last_time)
                if state.learned_bps is not None and rate > FORGET_RATIO * state.learned_bps:
                    state.learned_bps = None  # it carries more than it could: recovered
                capacity = state.learned_bps or self.capacity_bps(switch, port)
                sample = 1.0 if drops > state.last_drops else rate / capacity
                state.util = alpha * min(sample, 1.0) + (1 - alpha) * state.util
                state.rate_bps = rate
            state.last_time, state.last_tx_bytes, state.last_drops = now, tx_bytes, drops

    def observe_queueing(self, switch: str, port: int, delay_s: float) -> None:
        """Feed one probe's queueing delay at ``switch``'s egress ``port``.

        A deep queue at a port that sends, but well below its nominal rate,
        means the link itself is slow: after :data:`SLOW_ROUNDS` such probes
        in a row the port's capacity is the rate it last sent at. A slow port
        whose queue stays shallow for ``HOLD_INTERVALS`` probes while it
        carries about its learned rate may carry more: the estimate grows by
        :data:`RELAX_RATIO` (and is forgotten once nominal). One that stays
        idle that long is forgotten: what was learned is stale.
        """
        state = self._ports.setdefault((switch, port), _PortState())
        nominal = self.capacity_bps(switch, port)
        deep = delay_s >= self.params.slow_delay_pkts * self.params.packet_bits / nominal
        idle = state.rate_bps < MIN_LEARNED * nominal
        if deep and not idle and state.rate_bps < self.params.hot_util * nominal:
            state.slow_rounds, state.shallow_rounds = state.slow_rounds + 1, 0
            if state.slow_rounds >= SLOW_ROUNDS:
                state.learned_bps = state.rate_bps
            return
        state.slow_rounds = 0
        if state.learned_bps is None:
            return
        if not idle and state.rate_bps < state.learned_bps / FORGET_RATIO:
            return  # shallow because it carries less than it can: nothing learned
        state.shallow_rounds += 1
        if state.shallow_rounds >= HOLD_INTERVALS:
            state.shallow_rounds = 0
            state.learned_bps = None if idle else state.learned_bps * RELAX_RATIO
            if state.learned_bps is not None and state.learned_bps >= nominal:
                state.learned_bps = None

    def forget(self, switch: str, port: int) -> None:
        """Forget a port's learned capacity (its link went down or came up)."""
        state = self._ports.get((switch, port))
        if state is not None:
            state.learned_bps, state.slow_rounds, state.shallow_rounds = None, 0, 0

    def rebalance(self, switch: str, now: float, port_sets: Iterable[tuple[int, ...]]
                  ) -> bool:
        """Update the weights of ``switch``'s groups; return True if any changed."""
        p = self.params
        weights = self._weights.setdefault(switch, {})
        changed = False
        for ports in port_sets:
            current = weights.setdefault(ports, {port: p.max_weight for port in ports})
            utils = {q: self.path_utilisation(switch, q) for q in ports}
            mean = sum(utils.values()) / len(ports)
            for port in ports:
                util = utils[port]
                old = current[port]
                top = self._weight_cap(switch, port)
                if util >= p.hot_util and util - mean >= p.hot_margin:
                    current[port] = max(p.min_weight, min(top, old // 2))
                    self._last_cut[(switch, ports, port)] = now
                # (a nanosecond's slack: a simulation's rounds are exact multiples of the
                # interval, and their float differences may fall a rounding error short)
                elif (util - mean <= p.cool_margin
                      and now - self._last_cut.get((switch, ports, port), -1e9)
                      >= p.hold_s - 1e-9):
                    current[port] = min(top, old * 2)
                else:
                    current[port] = min(top, old)
                changed |= current[port] != old
        return changed

    def _weight_cap(self, switch: str, port: int) -> int:
        """``max_weight`` scaled by the share of its nominal rate a slow port carries.

        Weights in proportion to capacity (WCMP) load a slow uplink no more
        than the healthy ones from the first round it is known to be slow.
        """
        learned = self.learned_capacity_bps(switch, port)
        if learned is None:
            return self.params.max_weight
        share = min(1.0, learned / self.capacity_bps(switch, port))
        return max(self.params.min_weight, round(self.params.max_weight * share))

    def weights(self, switch: str) -> dict[tuple[int, ...], dict[int, int]]:
        """Current ``{port set: {port: weight}}`` of ``switch`` (copies)."""
        return {ports: dict(w) for ports, w in self._weights.get(switch, {}).items()}

    def all_weights(self) -> dict[str, dict[tuple[int, ...], dict[int, int]]]:
        """Current weights of every switch seen so far."""
        return {sw: self.weights(sw) for sw in self._weights}
