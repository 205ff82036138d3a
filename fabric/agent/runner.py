"""The host agent: run this host's share of a plan and write its result.

Life cycle: parse and check the plan, bind listeners on every own NIC
(TCP 7100 and UDP 4791; a busy port is an error, not something to share),
wait for ``plan.start_at`` while already accepting peers, then start every
transfer this host sends as soon as all its ``after`` transfers are complete
as seen here (and, with ``after_start``, its compute time has passed since
the transfer it names started), and stop when everything is complete or at
``start_at + deadline_s``. Unfinished transfers are reported with ``end=None`` and an
error, never dropped. Everything runs on one thread in one event loop, so
stopping is closing the loop's sockets; no thread or process outlives it.
"""

from __future__ import annotations

import json
import resource
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fabric.agent import addressing, netstat
from fabric.agent.loop import EventLoop, lateness_summary
from fabric.agent.records import RECV, SEND, TransferRecord
from fabric.agent.roce import RoceConfig, RoceEngine, qpn_for
from fabric.agent.tcp import TcpConfig, TcpEngine
from fabric.traffic.model import Plan, ScheduleError, source_ports, validate_schedule

EXIT_OK, EXIT_FAILED = 0, 1


class _Terminated(Exception):
    """SIGTERM/SIGINT: stop, report what finished, exit 1."""


READY = "READY"  # what a gated agent prints when it can receive


@dataclass(frozen=True)
class AgentOptions:
    """Agent tunables that are not part of the plan."""

    tcp: TcpConfig = field(default_factory=TcpConfig)
    roce: RoceConfig = field(default_factory=RoceConfig)
    proc_net: Path = Path("/proc/net")
    # once its listeners are bound, say READY on stdout and take the start time
    # (wall clock) from a line on stdin: the launcher starts every agent together
    # however long the slowest took to come up
    start_gate: bool = False


class Agent:
    """One host's agent.

    Parameters
    ----------
    plan : Plan
        The whole plan (every agent reads the same one).
    host : str
        This endpoint's name in ``plan.hosts``.
    options : AgentOptions
        Ports and transport tunables.
    """

    def __init__(self, plan: Plan, host: str, options: AgentOptions = AgentOptions()) -> None:
        self.plan = plan
        self.host = host
        self.options = options
        self.errors: list[str] = []
        self.records: list[TransferRecord] = []
        self.by_id: dict[str, list[TransferRecord]] = {}
        self.waiting: dict[str, list[TransferRecord]] = {}  # dependency id -> dependents
        self.waiting_start: dict[str, list[TransferRecord]] = {}  # after_start id -> them
        self._timed: set[int] = set()  # id() of sends waiting for their after_start time
        self.started_at: float | None = None
        self.start_at = plan.start_at
        self.finished_at: float | None = None
        self.loop = EventLoop()
        self.engine: TcpEngine | RoceEngine | None = None
        self.engines: list[Any] = []
        self.addresses: list[str] = []
        self._kicked = False
        self._settled: set[int] = set()  # id() of records completed or failed
        self._netstat_before: dict[str, int] = {}
        self._netstat: dict[str, int] = {}
        self._cpu0 = 0.0  # process CPU time when the traffic starts (after the gate)
        self._setup_cpu = 0.0  # process CPU time spent before it

    # -- setup -------------------------------------------------------------------------
    def _prepare(self) -> bool:
        plan, host = self.plan, self.host
        if host not in plan.hosts:
            self.errors.append(f"host {host!r} is not in the plan")
            return False
        try:
            validate_schedule(plan.transfers, plan.hosts)
            self.addresses = addressing.nic_addresses(plan.hosts[host])
        except (ScheduleError, ValueError) as exc:
            self.errors.append(f"bad plan: {exc}")
            return False
        if not self.addresses:
            self.errors.append(f"host {host!r} has no NIC in the plan")
            return False
        for index, t in enumerate(plan.transfers):
            for role, mine in ((SEND, t.src == host), (RECV, t.dst == host)):
                if mine:
                    record = TransferRecord(t, role, qpn=qpn_for(index))
                    self.records.append(record)
                    self.by_id.setdefault(t.id, []).append(record)
        for record in self._sends():
            for dep in record.transfer.after:
                self.waiting.setdefault(dep, []).append(record)
            if record.transfer.after_start:
                self.waiting_start.setdefault(record.transfer.after_start[0], []).append(record)
        ports = source_ports(plan, host).get(host, {})
        _raise_fd_limit()  # packet entropy holds entropy_ports sockets per peer
        tcp = TcpEngine(self.loop, plan.transport, self.addresses, self._done, self._fail,
                        self.options.tcp, ports)
        roce = RoceEngine(self.loop, plan.transport, self.addresses, self._done, self._fail,
                          self.options.roce, ports)
        self.engines = [tcp, roce]
        self.engine = tcp if plan.transport.kind == "tcp" else roce
        try:
            for engine in self.engines:
                engine.bind()
        except OSError as exc:
            self.errors.append(f"cannot bind listeners on {', '.join(self.addresses)}: {exc} "
                               f"(port busy: another agent or a stale run?)")
            return False
        for record in self.records:
            if record.role == RECV:
                self.engine.add_recv(record)
            elif self._resolve(record) is None:
                self.engine.prepare_send(record)  # before start_at, as a NIC sets up its QPs
        self.loop.add_service(roce.service)  # pacing, loss timers, delayed ACKs
        self.loop.add_service(self._service)
        return True

    def _await_start(self) -> bool:
        """Say READY and read the start time from stdin; False when none came. (An
        agent whose setup failed exits with its report instead: the launcher sees
        its stdout close.)"""
        sys.stdout.write(READY + "\n")
        sys.stdout.flush()
        line = sys.stdin.readline()
        try:
            self.start_at = float(line)
        except ValueError:
            self.errors.append(f"no start time from the launcher (got {line.strip()!r})")
            return False
        return True

    def _sends(self) -> list[TransferRecord]:
        return [r for r in self.records if r.role == SEND]

    # -- life cycle --------------------------------------------------------------------
    def run(self, out: Path | None = None) -> int:
        """Run to completion or deadline; return the exit code (0 all complete).

        Parameters
        ----------
        out : Path, optional
            Where to write :meth:`result` as JSON (atomically), still under
            the agent's signal handling so a second SIGTERM cannot lose it.
        """
        self.started_at = time.time()
        # start_at 0 (the model's default) means "as soon as the agent is up"
        self.start_at = self.plan.start_at if self.plan.start_at > 0 else self.started_at
        ok = self._prepare()
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)} \
            if threading.current_thread() is threading.main_thread() else {}
        for sig in previous:
            signal.signal(sig, _raise_terminated)
        try:
            if ok and self.options.start_gate:
                ok = self._await_start()
            if ok:
                # setup (sockets, port pools) is its own figure: cpu_s is the traffic's
                self._setup_cpu = time.process_time()
                self._cpu0 = self._setup_cpu
                offset = time.monotonic() - time.time()
                self.loop.call_at(self.start_at + offset, self._kick)
                self.loop.call_at(self.start_at + self.plan.deadline_s + offset,
                                  self._deadline)
                if not self.records:
                    self.loop.stop()
                self.loop.run()
        except _Terminated:
            self._fail_unfinished("agent terminated by a signal")
        finally:
            for sig in previous:
                signal.signal(sig, signal.SIG_IGN)  # finish the report first
            for engine in self.engines:
                engine.snapshot()
                engine.close()
            self.loop.close()
            if self._netstat_before:
                self._netstat = netstat.delta(self._netstat_before,
                                              netstat.read_counters(self.options.proc_net))
            self.finished_at = time.time()
            if out is not None:
                tmp = out.with_name(out.name + ".tmp")
                tmp.write_text(json.dumps(self.result(), indent=1))
                tmp.replace(out)  # readers never see half a file
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return EXIT_OK if self.succeeded else EXIT_FAILED

    @property
    def succeeded(self) -> bool:
        """Every transfer complete and no agent-level error."""
        return not self.errors and all(r.ok for r in self.records) and (
            self._kicked or not self.records)

    def _kick(self) -> None:
        self._kicked = True
        self._netstat_before = netstat.read_counters(self.options.proc_net)
        for record in self._sends():
            if not record.transfer.after:
                self._try_start(record)

    def _try_start(self, record: TransferRecord) -> None:
        """Start a send whose dependencies are met: now, or when its after_start allows."""
        if record.ready is not None or record.finished or id(record) in self._timed:
            return
        if not all(self._complete(dep) for dep in record.transfer.after):
            return
        earliest = self._earliest_start(record)
        if earliest is None:
            return  # the transfer it is timed from has not started yet
        delay = earliest - time.time()
        if delay <= 0:
            self._start(record)
            return
        self._timed.add(id(record))
        self.loop.call_later(delay, lambda: None if record.finished else self._start(record))

    def _earliest_start(self, record: TransferRecord) -> float | None:
        """Wall-clock time ``after_start`` allows (0 without one); None before it is known."""
        if record.transfer.after_start is None:
            return 0.0
        ref_id, seconds = record.transfer.after_start
        ref = next(r for r in self.by_id[ref_id] if r.role == SEND)
        return None if ref.ready is None else ref.ready + seconds

    def _resolve(self, record: TransferRecord) -> str | None:
        """Set the record's addresses (the model's rule); the reason if it has none."""
        try:
            record.dst_ip = addressing.destination_address(self.plan, record.transfer)
            record.src_ip = addressing.source_address(self.plan.hosts[self.host],
                                                      record.dst_ip)
        except ValueError as exc:
            return f"no address: {exc}"
        return None

    def _start(self, record: TransferRecord) -> None:
        record.ready = time.time()
        problem = self._resolve(record)
        if problem:
            self._fail(record, problem)
        else:
            assert self.engine is not None
            self.engine.start_send(record, time.monotonic())
        for dependent in self.waiting_start.get(record.id, ()):
            self._try_start(dependent)  # timed from when it was ready to go, sent or not

    def _done(self, record: TransferRecord) -> None:
        self._settled.add(id(record))
        for dependent in self.waiting.get(record.id, ()):
            self._try_start(dependent)

    def _complete(self, transfer_id: str) -> bool:
        # the dependency is local: this host sent it (confirmed) or received it
        return any(r.ok for r in self.by_id.get(transfer_id, ()))

    def _fail(self, record: TransferRecord, reason: str) -> None:
        if record.finished:
            return
        record.error = reason
        self._settled.add(id(record))
        # what can never start fails now, so the agent need not wait for
        # its deadline when the rest is done
        never = list(self.waiting.get(record.id, ()))
        if record.ready is None:  # nor can what is timed from its start
            never += self.waiting_start.get(record.id, [])
        for dependent in never:
            self._fail(dependent, f"dependency {record.id} failed")

    def _fail_unfinished(self, reason: str) -> None:
        for record in self.records:
            if record.finished:
                continue
            record.error = reason
            if record.role == SEND and record.ready is None:
                pending = [d for d in record.transfer.after if not self._complete(d)]
                if record.transfer.after_start and self._earliest_start(record) is None:
                    pending.append(f"{record.transfer.after_start[0]} to start")
                record.error += (f"; never started, waiting for {', '.join(pending)}"
                                 if pending else "; never started")

    def _deadline(self) -> None:
        self._fail_unfinished(f"deadline: not finished {self.plan.deadline_s:g} s after "
                              f"start_at")
        self.loop.stop()

    def _service(self, now: float) -> float | None:
        """Stop once everything is finished and no receiver needs to linger."""
        if not self._kicked or len(self._settled) < len(self.records):
            return None  # (a counter: this runs every loop iteration)
        lingers = [t for t in (engine.linger_until() for engine in self.engines)
                   if t is not None]
        until = max(lingers) if lingers else None
        if until is None or now >= until:
            self.loop.stop()
            return None
        return until

    # -- result ------------------------------------------------------------------------
    def result(self) -> dict[str, Any]:
        """The result document (call after :meth:`run`)."""
        rows = [r.row() for r in self.records]
        errors = list(self.errors)
        for engine in self.engines:
            errors.extend(getattr(engine, "errors", []))
        errors.extend(f"{r.id} ({r.role}): {r.error}" for r in self.records if r.error)
        warnings = [w for engine in self.engines for w in engine.warnings]
        roce = self.engines[1].totals() if len(self.engines) > 1 else {}
        cpu = time.process_time() - self._cpu0 if self._cpu0 else 0.0
        return {"host": self.host, "transport": self.plan.transport.kind,
                "transfers": rows, "netstat": self._netstat, "roce": roce,
                "errors": errors, "warnings": warnings, "ok": self.succeeded,
                "started_at": self.started_at, "finished_at": self.finished_at,
                "start_at": self.start_at,
                "cpu_s": round(cpu, 4), "setup_cpu_s": round(self._setup_cpu, 4),
                "wakeups": self.loop.wakeups,
                "wake_late": lateness_summary(self.loop.wake_late_s)}


def _raise_terminated(signum: int, _frame: Any) -> None:
    raise _Terminated(signum)


def _raise_fd_limit() -> None:
    """Lift the soft open-files limit to the hard one (best effort)."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        target = hard if hard != resource.RLIM_INFINITY else 1 << 20
        if soft != resource.RLIM_INFINITY and soft < target:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError):
        pass


def run_agent(plan_path: Path, host: str, out: Path,
              options: AgentOptions = AgentOptions()) -> int:
    """Read a plan, run ``host``'s agent, write the result JSON; return the exit code."""
    try:
        plan = Plan.from_json(plan_path.read_text())
    except (OSError, ValueError, TypeError, KeyError) as exc:
        now = time.time()
        out.write_text(json.dumps({"host": host, "transfers": [], "netstat": {}, "roce": {},
                                   "errors": [f"cannot read plan {plan_path}: {exc}"],
                                   "ok": False, "started_at": now, "finished_at": now}))
        return EXIT_FAILED
    return Agent(plan, host, options).run(out)
