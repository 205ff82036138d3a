"""The fidelity verdict of one traffic run, and which failures a repeat may cure."""

from __future__ import annotations

from typing import Any

from fabric.traffic.result import Check, RunResult, report

# The fidelity checks that measure the machine's load at the time of a run, not the run
# itself: a run that fails only these was not emulated faithfully, but nothing in it
# went wrong, so it is tried again (up to ``attempts`` times, ``fabric run --attempts``).
RUN_CHECKS = ("ovs_input_delay_ms", "machine_cpu", "agent_late_share", "late_pause_drops")


def completion_check(result: RunResult) -> Check:
    """Every transfer's last byte arrived and no agent failed, or the run is invalid (on
    either backend; a sender that gave up after repeated timeouts is counted). A run
    whose fabric deadlocked and stayed so to its end is valid: the emulation stopped
    because the modelled fabric did (its ``deadlocks`` say where)."""
    rows = result.transfer_rows()
    done = sum(1 for r in rows if r["fct_s"] is not None)
    failed = sum(1 for r in rows if r.get("send_failed"))
    # a stand-in result (a test's) may have no deadlocks: none formed
    held = [d["cycle"] for d in getattr(result, "deadlocks", []) if d["cleared_s"] is None]
    ok = bool(rows) and (done == len(rows) or bool(held)) and not result.errors
    detail = f"{done}/{len(rows)} done" + (f", {failed} gave up after repeated timeouts"
                                           if failed else "")
    if held and done < len(rows):
        detail += f": the fabric deadlocked ({held[0]}) and stayed so to the end"
    return Check("transfers_complete", round(done / len(rows), 4) if rows else 0.0,
                 1.0, ok, "; ".join(result.errors[:3]) or detail)


def fidelity_of(result: RunResult, extra: list[Check]) -> dict[str, Any]:
    """The fidelity report of one run: its checks, the bring-up's, and completion."""
    return report(list(result.fidelity) + list(extra) + [completion_check(result)])


def overloaded(report: dict[str, Any]) -> bool:
    """True when ``report`` failed, and failed only load-dependent checks (``RUN_CHECKS``)."""
    failed = {c["name"] for c in report.get("checks", []) if not c["ok"]}
    return bool(failed) and failed <= set(RUN_CHECKS)


def overload_text(report: dict[str, Any]) -> str:
    """The failed load-dependent checks of ``report``, with their values and limits."""
    return ", ".join(f"{c['name']} {c['value']} > {c['threshold']}" if c["value"] is not None
                     else f"{c['name']} {c['detail']}" for c in report.get("checks", [])
                     if not c["ok"] and c["name"] in RUN_CHECKS)


def run_checks(report: dict[str, Any]) -> dict[str, Any]:
    """The per-run values of the load-dependent fidelity checks, for a runs.csv row."""
    values = {c["name"]: c["value"] for c in report.get("checks", [])}
    return {name: values.get(name) for name in RUN_CHECKS}
