"""Transfer records: a row's typed view, the span of a run, and a run's times replaced."""

from __future__ import annotations

import pytest

from fabric.traffic.result import TransferRecord, records, span_s, timings


def _row(tid: str, start: float | None, end: float | None, **extra) -> dict:
    return {"id": tid, "src": "h0", "dst": "h1", "bytes": 1000, "send_start": start,
            "recv_end": end, "fct_s": None if start is None or end is None else end - start,
            "path": ["h0", "l0", "h1"], **extra}


def test_a_record_reads_its_row_and_keeps_the_transports_fields():
    record = TransferRecord.from_row(_row("a", 1.0, 3.5, send_rto_count=2))
    assert (record.id, record.bytes, record.start, record.end) == ("a", 1000, 1.0, 3.5)
    assert record.seconds == 2.5 and record.path == ("h0", "l0", "h1")
    assert record.fields["send_rto_count"] == 2


def test_the_span_runs_from_the_first_send_to_the_last_arrival_and_needs_every_one():
    rows = [_row("a", 1.0, 3.0), _row("b", 2.0, 4.5)]
    assert span_s(records(rows)) == pytest.approx(3.5)
    assert span_s(records(rows + [_row("c", 2.0, None)])) is None  # one never arrived
    assert span_s([]) is None
    assert span_s(records([_row("d", 2.0, 2.0)])) is None  # no time passed


def test_other_times_replace_the_rows_times_too():
    ideal = TransferRecord.from_row(_row("a", 1.0, 3.0, tag="ring")).timed(0.5, 1.5)
    assert (ideal.start, ideal.end, ideal.seconds) == (0.5, 1.5, 1.0)
    assert ideal.fields["send_start"] == 0.5 and ideal.fields["fct_s"] == 1.0
    assert ideal.fields["tag"] == "ring"
    assert timings([ideal]) == {"a": (0.5, 1.5, 1000)}
