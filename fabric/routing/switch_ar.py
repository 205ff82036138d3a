"""Switch-local adaptive routing, as InfiniBand AR and Spectrum-X switches route (pure).

Every switch chooses, per packet, among the equal-cost ports of the packet's route:
the least occupied, measured as the packet is forwarded. A port's occupancy is its
queue in whole full-size packets (quantised, as csg-htsim's switches compare queue
sizes) and, on a lossless lane, whether it is paused: a paused port loses to any port
that is not (csg-htsim's ``compare_pq``). Equal ports take turns (csg-htsim picks
among them at random; here each port's own count of decisions rotates the start, so
a run is deterministic). Two options:

* ``threshold_pkts``: the hashed port (the one per-flow ECMP would take) is kept
  while it holds at most this many packets; None (the default) never prefers it;
* ``flowlet_gap_pkts``: a flow keeps the port it was last sent on while its packets
  come closer together than this gap, in packet times of a host link, and is
  re-decided after an idle gap (flowlet switching); None decides every packet.

:func:`choose_port` is the decision; ``switch_ar.h`` beside this file is its C twin,
compiled into the simulator and the emulator's datapath.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

MAX_PORTS = 16  # AR_MAX_PORTS in switch_ar.h: a route's ports the datapath can choose among
HEADER = Path(__file__).with_name("switch_ar.h")
MAX_THRESHOLD_PKTS = 100_000
MAX_FLOWLET_GAP_PKTS = 1e6


@dataclass(frozen=True)
class ArParams:
    """Options of switch-local adaptive routing (see the module docstring).

    Raises
    ------
    ValueError
        For a threshold outside 0..100,000 packets or a gap that is not positive and
        at most a million packet times.
    """

    threshold_pkts: int | None = None
    flowlet_gap_pkts: float | None = None

    def __post_init__(self) -> None:
        keep = self.threshold_pkts
        if keep is not None and (isinstance(keep, bool) or not isinstance(keep, int)
                                 or not 0 <= keep <= MAX_THRESHOLD_PKTS):
            raise ValueError(f"adaptive routing threshold must be a whole number of packets "
                             f"0..{MAX_THRESHOLD_PKTS:,}, got {keep}")
        gap = self.flowlet_gap_pkts
        if gap is not None and not 0 < gap <= MAX_FLOWLET_GAP_PKTS:
            raise ValueError(f"flowlet gap must be more than 0 and at most "
                             f"{MAX_FLOWLET_GAP_PKTS:g} packet times, got {gap}")

    @property
    def keep(self) -> int:
        """The threshold as the datapath takes it (-1: never keep the hashed port)."""
        return -1 if self.threshold_pkts is None else self.threshold_pkts


def choose_port(hashed: int, queued: Sequence[int], paused: Sequence[bool], turn: int = 0,
                keep: int = -1) -> int:
    """The index of the port a packet leaves by, among a route's equal-cost ports.

    Parameters
    ----------
    hashed : int
        Index of the port the flow hash picked.
    queued : sequence of int
        Each port's queue in full-size packets, in the route's port order.
    paused : sequence of bool
        Whether each port's lane is paused.
    turn : int
        How many packets the hashed port has decided before (equal ports take turns).
    keep : int
        The hashed port is kept while it is not paused and holds at most this many
        packets; -1: never for its own sake.

    Returns
    -------
    int
        The least occupied port's index: the first one in port order from
        ``hashed + turn`` among those that tie.
    """
    n = len(queued)
    if n <= 1 or n > MAX_PORTS or not 0 <= hashed < n:
        return hashed
    if keep >= 0 and not paused[hashed] and queued[hashed] <= keep:
        return hashed
    start = (hashed + turn) % n
    best = start
    for step in range(1, n):
        i = (start + step) % n
        if (paused[i], queued[i]) < (paused[best], queued[best]):
            best = i
    return best


def check_port_sets(tables: dict[str, dict[str, tuple[int, ...]]]) -> None:
    """Refuse routes with more equal-cost ports than a switch chooses among.

    Raises
    ------
    ValueError
        When a route has more than :data:`MAX_PORTS` ports.
    """
    for switch, table in tables.items():
        widest = max((len(ports) for ports in table.values()), default=0)
        if widest > MAX_PORTS:
            raise ValueError(f"adaptive routing chooses among at most {MAX_PORTS} equal-cost "
                             f"ports; {switch} has routes over {widest}")
