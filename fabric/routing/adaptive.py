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

Only local counters are used: a hot spot further along a path (a spine's
downlink) is not seen by the leaf that chooses the uplink.
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

    def __post_init__(self) -> None:
        if not self.interval_s > 0:
            raise AdaptiveConfigError(f"interval_s must be > 0, got {self.interval_s}")
        if not 0 < self.ewma_alpha <= 1:
            raise AdaptiveConfigError(f"ewma_alpha must be in (0, 1], got {self.ewma_alpha}")
        if not self.cool_margin < self.hot_margin:
            raise AdaptiveConfigError("cool_margin must be below hot_margin (hysteresis)")
        if not 1 <= self.min_weight <= self.max_weight:
            raise AdaptiveConfigError("need 1 <= min_weight <= max_weight")
        if self.max_weight / self.min_weight > MAX_WEIGHT_SKEW:
            raise AdaptiveConfigError(f"weight skew above 1:{MAX_WEIGHT_SKEW} makes Open vSwitch "
                                      f"fall back to per-connection hashing")


# Packets a telemetry interval should span: the defaults' 0.1 s at 12 Mbit/s.
INTERVAL_PACKETS = 100
HOLD_INTERVALS = 5


def params_for_rate(host_mbps: float, packets: int = INTERVAL_PACKETS) -> AdaptiveParams:
    """Timing scaled to the emulated rate: an interval spans ``packets`` full-size
    packets of a host link, and weights are held for ``HOLD_INTERVALS`` intervals.

    At a few Mbit/s a 0.1 s interval sees a few dozen packets: the
    utilisation estimate is noise, weights flap, and every group change makes
    userspace Open vSwitch revalidate its flows (measured: a sprayed
    all-to-all at 1.5 Mbit/s kept packets waiting 1.2 ms in OVS with 0.1 s
    intervals, 0.5-0.6 ms with 0.4 s).
    """
    if not host_mbps > 0:
        raise AdaptiveConfigError(f"host_mbps must be > 0, got {host_mbps}")
    interval = max(0.1, packets * 1500 * 8 / (host_mbps * 1e6))
    return AdaptiveParams(interval_s=round(interval, 3), hold_s=round(HOLD_INTERVALS * interval, 3))


@dataclass
class _PortState:
    util: float = 0.0
    last_time: float | None = None
    last_tx_bytes: int = 0
    last_drops: int = 0


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

    def capacity_bps(self, switch: str, port: int) -> float:
        """Emulated rate of ``switch``'s link on ``port``."""
        for nbr in self.graph.neighbors(switch):
            if fg.port(self.graph, switch, nbr) == port:
                return self.graph.edges[switch, nbr]["gbps"] * self.scale_mbps_per_gbps * 1e6
        raise KeyError(f"{switch} has no port {port}")

    def utilisation(self, switch: str, port: int) -> float:
        """Smoothed utilisation of a port (0 when never observed)."""
        state = self._ports.get((switch, port))
        return state.util if state else 0.0

    def observe(self, switch: str, now: float, counters: dict[int, tuple[int, int]]) -> None:
        """Feed one poll: ``{port: (tx_bytes, tx_dropped)}`` at time ``now``."""
        alpha = self.params.ewma_alpha
        for port, (tx_bytes, drops) in counters.items():
            state = self._ports.setdefault((switch, port), _PortState())
            if state.last_time is not None and now > state.last_time:
                sample = ((tx_bytes - state.last_tx_bytes) * 8 / (now - state.last_time)
                          / self.capacity_bps(switch, port))
                if drops > state.last_drops:
                    sample = 1.0  # dropping: the port is full whatever it sent
                state.util = alpha * min(sample, 1.0) + (1 - alpha) * state.util
            state.last_time, state.last_tx_bytes, state.last_drops = now, tx_bytes, drops

    def rebalance(self, switch: str, now: float, port_sets: Iterable[tuple[int, ...]]
                  ) -> bool:
        """Update the weights of ``switch``'s groups; return True if any changed."""
        p = self.params
        weights = self._weights.setdefault(switch, {})
        changed = False
        for ports in port_sets:
            current = weights.setdefault(ports, {port: p.max_weight for port in ports})
            mean = sum(self.utilisation(switch, q) for q in ports) / len(ports)
            for port in ports:
                util = self.utilisation(switch, port)
                old = current[port]
                if util >= p.hot_util and util - mean >= p.hot_margin:
                    current[port] = max(p.min_weight, old // 2)
                    self._last_cut[(switch, ports, port)] = now
                elif (util - mean <= p.cool_margin
                      and now - self._last_cut.get((switch, ports, port), -1e9) >= p.hold_s):
                    current[port] = min(p.max_weight, old * 2)
                changed |= current[port] != old
        return changed

    def weights(self, switch: str) -> dict[tuple[int, ...], dict[int, int]]:
        """Current ``{port set: {port: weight}}`` of ``switch`` (copies)."""
        return {ports: dict(w) for ports, w in self._weights.get(switch, {}).items()}

    def all_weights(self) -> dict[str, dict[tuple[int, ...], dict[int, int]]]:
        """Current weights of every switch seen so far."""
        return {sw: self.weights(sw) for sw in self._weights}
