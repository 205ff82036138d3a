"""What the RoCE engine reports: each transfer's row and the agent's totals.

Read once, when the run is over (:meth:`~fabric.agent.roce.engine.RoceEngine.snapshot`
and :meth:`~fabric.agent.roce.engine.RoceEngine.totals`).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Iterable

from fabric.agent.roce.recv import RecvQP
from fabric.agent.roce.send import SendQP

if TYPE_CHECKING:  # the engine imports this module
    from fabric.agent.roce.engine import RoceEngine, _Sender
    from fabric.agent.roce.receiver import RoceReceiver


def _us(seconds: float | None) -> int | None:
    return None if seconds is None or seconds == float("inf") else round(seconds * 1e6)


def fill_send_rows(senders: Iterable[_Sender]) -> None:
    """Copy each send QP's bytes and counters into its record's row.

    Parameters
    ----------
    senders : iterable of _Sender
        The engine's messages sent (finished or not).
    """
    for sender in senders:
        qp, record = sender.qp, sender.record
        record.bytes = qp.bytes_acked
        record.extra.update(
            qpn=qp.qpn, packets=qp.count, **qp.counters(),
            out_of_order=qp.peer_out_of_order, duplicates=qp.peer_duplicates,
            cwnd_final=round(qp.cwnd, 2), cc=qp.control.name,
            base_delay_us=_us(getattr(qp.control, "base_delay", None)),
            srtt_us=None if qp.srtt is None else round(qp.srtt * 1e6),
            reorder_mult=qp.reorder_mult, loss_cuts=qp.loss_cuts,
            undone_cuts=qp.undone_cuts,
            delay_cuts=getattr(qp.control, "decreases", None),
            rate_final_mbps=(round(qp.control.rate * 8 / 1e6, 3) if qp.rate_paced
                             else None),
            entropy_ports=sender.conn.entropy.count, recycled_packets=sender.recycled)


def fill_recv_rows(receiver: RoceReceiver) -> None:
    """Copy each receive QP's bytes, counters, window edges and arrivals into its row.

    Parameters
    ----------
    receiver : RoceReceiver
        The engine's receiving side.
    """
    for record, qp in receiver.receivers.values():
        record.bytes = qp.bytes
        record.extra.update(qpn=qp.qpn, packets=qp.count, **qp.counters(),
                            packets_sent=qp.acks_sent, retransmitted=0, lost_detected=0,
                            cwnd_final=None)
        if receiver.mark_bytes or receiver.marks:
            # an edge no packet passed came after the QP's last byte: all of it
            edges = [marks.get(qp.qpn, 0) for marks in receiver.mark_bytes]
            edges += [qp.bytes] * len(receiver.marks)
            record.extra.update(bytes_at_window_start=edges[0],
                                bytes_at_window_end=edges[1])
        if receiver.arrivals is not None:
            flat = receiver.arrivals.get(qp.qpn, ())
            record.extra["arrivals"] = [[round(flat[i], 4), round(flat[i + 1], 4)]
                                        for i in range(0, len(flat), 2)]


def totals(engine: RoceEngine) -> dict[str, float]:
    """Counters of ``engine`` summed over its queue pairs, and its NICs' wire time.

    Parameters
    ----------
    engine : RoceEngine
        After its snapshot.

    Returns
    -------
    dict
        Every QP counter summed, the bytes sent (acknowledged) and received, the
        engine's error counters of both sides, and ``pacer_busy_s``,
        ``pacer_late_s``, ``pacer_window_s``, ``pacer_waiting_s`` (see
        :class:`~fabric.agent.roce.engine._Pacer`).
    """
    receiver = engine.receiver
    send = [s.qp for s in engine.senders.values()]
    recv = [qp for _, qp in receiver.receivers.values()]
    counts = Counter(dict.fromkeys(SendQP.COUNTERS + RecvQP.COUNTERS, 0))
    for qp in send + recv:
        counts.update(qp.counters())
    counts.update(bytes_sent_acked=sum(q.bytes_acked for q in send),
                  bytes_received=sum(q.bytes for q in recv), unknown_qp=receiver.unknown_qp,
                  bad_packets=engine.bad_packets + receiver.bad_packets,
                  send_errors=engine.send_errors + receiver.send_errors,
                  icmp_errors=engine.icmp_errors)
    pacers = engine.pacers.values()
    result: dict[str, float] = dict(counts)  # the pacers' seconds are new keys, floats
    result.update(pacer_busy_s=round(sum(p.busy_s for p in pacers), 6),
                  pacer_late_s=round(sum(p.late_s for p in pacers), 6),
                  pacer_window_s=round(sum(p.held_s["window"] for p in pacers), 6),
                  pacer_waiting_s=round(sum(p.held_s["waiting"] for p in pacers), 6))
    return result
