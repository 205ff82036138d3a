"""Small measurements every experiment's rows and tables share."""

from __future__ import annotations

import statistics
from typing import Any

from fabric.analysis.report import ideal_steady_rates, ideal_transfers
from fabric.traffic.result import RunResult, records, span_s as records_span_s
from fabric.traffic import metrics, sizing
from fabric.traffic.model import TransportSpec

# htsim's steady state: the flows' mean rate between a quarter and three quarters of a
# flow's line-rate time (its 1-3 ms of 4 ms), while every flow is still running
STEADY_WINDOW = (0.25, 0.75)


def transport_losses(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Data packets lost on the way (sent minus received, exact), the share of all sent,
    and retransmission timeouts, from the merged transfer rows."""
    sent = sum(r.get("send_packets_sent") or 0 for r in rows)
    received = sum(r.get("recv_packets_received") or 0 for r in rows)
    return {"drop_frac": round((sent - received) / sent, 5) if sent else None,
            "rto": sum(r.get("send_rto_count") or 0 for r in rows)}


def steady_window(packets: float, transport: TransportSpec, host_mbps: float
                  ) -> tuple[float, float]:
    """Seconds after the start between which a run of ``packets``-packet flows at
    ``host_mbps`` is in its steady state (:data:`STEADY_WINDOW` of a flow's line-rate
    time): a flow cannot finish before it, since none goes faster than its link."""
    line = sizing.seconds_of(packets, transport, host_mbps)
    return (STEADY_WINDOW[0] * line, STEADY_WINDOW[1] * line)


def steady_measures(result: Any, graph: Any, link_mbps: Any, spray: bool,
                    window: tuple[float, float] | None, host_mbps: float
                    ) -> dict[str, float | None]:
    """``steady`` (the flows' mean rate within ``window``, over ``host_mbps``: htsim's
    measure) and ``steady_ideal`` (their mean max-min fair rate on the run's paths,
    all running at once) fields of a runs.csv row; None where not measured."""
    steady = (metrics.window_throughput(result.transfer_rows(), window, host_mbps)
              if window else None)
    rates = ideal_steady_rates(result, graph, link_mbps, spray)
    best = statistics.fmean(rates.values()) / host_mbps if rates else None
    return {"steady": None if steady is None else round(steady, 4),
            "steady_ideal": None if best is None else round(best, 4)}


def ideal_rows(result: RunResult, graph: Any, link_mbps: Any, spray: bool = False
               ) -> list[dict[str, Any]] | None:
    """The run's transfer rows as a perfect transport would have made them on the same
    paths (:func:`fabric.analysis.report.ideal_transfers`); None when a path is unknown."""
    ideal = ideal_transfers(result, graph, link_mbps, spray)
    return None if ideal is None else [dict(t.fields) for t in ideal]


def against_ideal(measured: float | None, ideal: float | None) -> dict[str, float | None]:
    """``ideal`` and ``efficiency`` (measured / ideal) fields of a runs.csv row."""
    return {"ideal": None if ideal is None else round(ideal, 4),
            "efficiency": round(measured / ideal, 4) if measured and ideal else None}


def span_s(rows: list[dict[str, Any]]) -> float | None:
    """Seconds from the first send of ``rows`` (transfer rows) to the last byte received;
    None when there are none, any is incomplete or no time passed."""
    return records_span_s(records(rows))


def truthy(value: Any) -> bool:
    """A ``valid`` cell as a bool: True itself or its CSV text ("True")."""
    return value is True or str(value).lower() == "true"


def as_float(value: Any) -> float | None:
    """A CSV cell as a float; None for an empty cell (a figure that was not measured)."""
    return None if value in (None, "") else float(value)


def mean_or_none(values: list[Any], digits: int = 4) -> float | None:
    """Rounded mean of the values that are not None (None if there are none)."""
    values = [v for v in values if v is not None]
    return round(statistics.fmean(values), digits) if values else None


def pause_summary(result: RunResult, lanes: tuple[int, ...] | None = None
                  ) -> dict[str, Any]:
    """How far a run's pauses reached (runs.csv fields; None without flow control):
    ``paused_links`` link directions that paused at least once, ``pause_share_max`` the
    largest share of the run one of them was paused, ``host_links_paused`` those that
    stop a sender's NIC. ``lanes`` keeps only those lanes' pauses."""
    if not any(c.name == "lossless_drops" for c in result.fidelity):  # lossy
        return {"paused_links": None, "pause_share_max": None, "host_links_paused": None}
    rows = [r for r in result.flow_control
            if r["pauses"] and (lanes is None or r["lane"] in lanes)]
    links = {r["link"] for r in rows}
    return {"paused_links": len(links),
            "pause_share_max": max((r["pause_share"] or 0.0 for r in rows), default=0.0),
            "host_links_paused": sum(1 for link in links
                                     if link.split(">")[0] in result.plan.hosts)}
