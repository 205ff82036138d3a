"""Replay (real workloads): how long does a training job's step take on the fabric,
how much of it is exposed communication, and what does a second job sharing the fabric
cost it, under each routing policy?

A job is a trace of a real training step (:mod:`fabric.traffic.trace`: a PyTorch
profiler trace, a Chakra execution trace or the project's own ``fabric-trace``
JSON), its ranks placed on the fabric's NICs (``rail``: rank ``g`` of server ``s``
on NIC ``g`` of server ``s``; ``packed``; ``scattered``). Each rank replays its
collectives in order with the recorded compute between them; collectives inside
one server (tensor parallelism over NVLink) do not cross the fabric. Collectives
run as NCCL runs them (:mod:`fabric.traffic.collectives`): rings in
:data:`CHUNKS` pieces per step, 8 slots in flight per connection.

**Time dilation.** The emulated links run ~10^5 times slower than the cluster's,
so the replay is the job slowed down by a factor ``D`` (``dilation`` in the
summary): every compute gap is multiplied by ``D`` and every size by ``D x
emulated rate / physical rate``, which keeps the ratio of communication to
compute the cluster's. The sizes are chosen in packets (:mod:`fabric.traffic.sizing`),
so the replay is the same at every emulated rate: the busiest rank's fabric bytes of
a step become :data:`TARGET_COMM_PACKETS` full packets, or fewer when the step's
compute would then last longer than :data:`MAX_COMPUTE_PACKET_TIMES` packet times
of a host link; ``D`` follows from the rate. Step times
are reported in the job's own time (emulated seconds / ``D``), beside the ideal:
the same schedule through the fluid model of a perfect transport on the paths
the run used (:func:`fabric.analysis.report.ideal_transfers`).

**Runs.** Per routing policy (ecmp, spray, adaptive) and seed: every job alone,
then all jobs together (with two jobs or more). The default workload is the
PyTorch profiler trace shipped in ``tests/data/traces/kineto`` twice: job ``a``
placed by rail, job ``b`` scattered over the remaining NICs (the seed shuffles
it). ``--trace PATH`` replays one job; ``--workload FILE`` names several::

    {"jobs": [{"name": "a", "trace": "a.json", "placement": "rail"},
              {"name": "b", "trace": "traces/", "placement": "scattered", "dscp": 10}]}

(a trace path is relative to the workload file; ``dscp`` picks the job's lane,
default 26, RDMA's class).
"""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

from fabric.analysis import plotstyle
from fabric.analysis.report import ideal_transfers
from fabric.argtypes import existing_file, existing_path
from fabric.emulation import Emulation, capacity
from fabric.emulation.machine_speed import default_host_mbps
from fabric.errors import UserError
from fabric.experiment import (Experiment, Measured, Mode, Option, RunContext, RunData, Runner,
                               Scheduled)
from fabric.experiment.measures import as_float
from fabric.experiment.options import (POLICIES_OPTION, ROCE_OPTIONS, SPRAY_ENTROPY,
                                       chosen_policies)
from fabric.model import graph as fg
from fabric.model.lanes import DSCP_COLLECTIVE
from fabric.routing.policies import POLICIES as ROUTING_POLICIES, multipath, sprays
from fabric.traffic import sizing
from fabric.traffic.model import SPRAY_ENTROPY_PORTS, Transfer, TransportSpec
from fabric.traffic.result import records, timings
from fabric.traffic.trace import Workload, load_trace
from fabric.traffic.trace.place import PLACEMENTS, endpoint_servers, place_ranks
from fabric.traffic.trace.report import collective_times, key_of, step_times
from fabric.traffic.trace.schedule import Replay, replay

NAME = "replay"
QUESTION = ("How long does a training job's step take on the fabric, how much of it is "
            "exposed communication, and what does a second job sharing the fabric cost it, "
            "under each routing policy?")
DEFAULT_TOPO = "rail-clos"
DEFAULT_TRACE = Path(__file__).resolve().parent.parent / "tests" / "data" / "traces" / "kineto"
POLICIES = ("ecmp", "spray", "adaptive")  # the default comparison (--policies: any of routing's)
# the busiest rank's fabric bytes of one step, in full packets (quick, full; 0.3 and 0.8 s
# of 4 KiB roce packets at 12.5 Mbit/s)...
TARGET_COMM_PACKETS = {True: 112, False: 300}
# ... unless a step's compute would then last longer than this, in packet times
MAX_COMPUTE_PACKET_TIMES = {True: 560, False: 1500}
CHUNKS = 4  # pieces per collective step (the benchmarks: 4 or more keep the ring busy)
DEADLINE_FACTOR = 20.0
BRINGUP_S = 10.0
RUN_OVERHEAD_S = 5.0
_JOB_NAME = re.compile(r"^[A-Za-z0-9_-]{1,32}$")

TRACE = Option("--trace", type=existing_path, metavar="PATH",
               help="a trace to replay as one job: fabric-trace JSON, a PyTorch profiler "
                    "trace (a file per rank, or their directory) or Chakra .et files "
                    "(default: the shipped PyTorch trace, as two jobs)")
WORKLOAD = Option("--workload", type=existing_file, metavar="FILE",
                  help="a JSON file naming several jobs: name, trace, placement, dscp")
PLACEMENT = Option("--placement", default="rail", choices=PLACEMENTS,
                   help="where --trace's ranks go (default: rail)")


@dataclass(frozen=True)
class Job:
    """One job of a workload: its trace, where its ranks go and its traffic class."""

    name: str
    workload: Workload
    placement: str = "rail"
    dscp: int = DSCP_COLLECTIVE


# --- jobs ------------------------------------------------------------------------

def read_jobs(path: Path) -> list[Job]:
    """The jobs a workload file names (see the module docstring).

    Raises
    ------
    UserError
        In one line naming the file and the job, on anything it cannot use.
    """
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: not a JSON workload file ({exc})") from None
    entries = data.get("jobs") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not entries:
        raise UserError(f"{path}: needs a non-empty list \"jobs\"")
    jobs = [_job(path, i, entry) for i, entry in enumerate(entries)]
    names = [j.name for j in jobs]
    if len(set(names)) != len(names):
        raise UserError(f"{path}: job names must be distinct, got {names}")
    return jobs


def _job(path: Path, index: int, entry: Any) -> Job:
    where = f"{path}: job {index}"
    if not isinstance(entry, dict) or not isinstance(entry.get("trace"), str):
        raise UserError(f"{where}: needs a \"trace\" path")
    name = str(entry.get("name", f"job{index}"))
    if not _JOB_NAME.match(name):
        raise UserError(f"{where}: name {name!r} must be 1-32 letters, digits, - or _")
    placement = entry.get("placement", "rail")
    if placement not in PLACEMENTS:
        raise UserError(f"{where} ({name}): placement must be one of {', '.join(PLACEMENTS)}, "
                        f"got {placement!r}")
    dscp = entry.get("dscp", DSCP_COLLECTIVE)
    if not isinstance(dscp, int) or not 0 <= dscp <= 63:
        raise UserError(f"{where} ({name}): dscp must be 0..63, got {dscp!r}")
    trace = (path.parent / entry["trace"]).resolve()
    if not trace.exists():
        raise UserError(f"{where} ({name}): no trace at {trace}")
    return Job(name, load_trace(trace), placement, dscp)


def jobs_of(ctx: RunContext) -> list[Job]:
    """The run's jobs: ``--workload``'s, ``--trace`` as one, or the default two."""
    if ctx.get(TRACE) and ctx.get(WORKLOAD):
        raise UserError(f"{NAME}: give --trace or --workload, not both")
    if ctx.get(WORKLOAD):
        return read_jobs(ctx.get(WORKLOAD))
    if ctx.get(TRACE):
        return [Job("job", load_trace(ctx.get(TRACE)), ctx.get(PLACEMENT))]
    if ctx.values.get("placement") is not None:
        raise UserError(f"{NAME}: --placement needs --trace")
    if not DEFAULT_TRACE.is_dir():
        raise UserError(f"{NAME}: the shipped trace {DEFAULT_TRACE} is missing (an installed "
                        f"copy without the repository's tests/): give --trace")
    default = load_trace(DEFAULT_TRACE)
    return [Job("a", default, "rail"), Job("b", default, "scattered")]


def place_jobs(graph: Any, jobs: list[Job], seed: int) -> dict[str, list[str]]:
    """Each job's endpoints, rank 0 first: the jobs in order, each on NICs no earlier
    job took (``scattered`` shuffles with ``seed``)."""
    taken: list[str] = []
    out = {}
    for job in jobs:
        try:
            out[job.name] = place_ranks(graph, job.workload.ranks, job.placement, seed, taken)
        except UserError as exc:
            raise type(exc)(f"job {job.name} ({job.workload.source}): {exc}") from None
        taken += out[job.name]
    return out


# --- scaling -----------------------------------------------------------------------

def physical_gbps(graph: Any) -> float:
    """The fabric's host link rate, Gbit/s (what the cluster's NICs run at)."""
    return max(graph.edges[a.endpoint, a.switch]["gbps"] for a in fg.attachments(graph))


def busiest_step_bytes(graph: Any, jobs: list[Job], placed: Mapping[str, list[str]]) -> int:
    """Most bytes one endpoint sends into the fabric in one step, over the jobs, at the
    traces' own sizes."""
    most = 1
    for job in jobs:
        schedule = _replay(graph, job, placed[job.name], 1.0, 0.0)
        step_of = {c.key: c.step for c in schedule.collectives}
        sent: dict[tuple, int] = {}
        for t in schedule.transfers:
            key = (t.src, step_of[key_of(t.id)])
            sent[key] = sent.get(key, 0) + t.bytes
        most = max([most, *sent.values()])
    return most


def step_compute_s(jobs: list[Job]) -> float:
    """Most compute one rank of a job does in one step (seconds of the job)."""
    most = 0.0
    for job in jobs:
        steps: dict[tuple[int, int], float] = {}
        for rank, program in enumerate(job.workload.programs):
            for op in program:
                key = (rank, op.step)
                steps[key] = steps.get(key, 0.0) + getattr(op, "seconds", 0.0)
        most = max([most, *steps.values()])
    return most


def byte_scale_of(graph: Any, jobs: list[Job], placed: Mapping[str, list[str]],
                  transport: TransportSpec, quick: bool) -> float:
    """Emulated bytes per byte of the job (module docstring), the same at every rate: the
    busiest step's fabric bytes become :data:`TARGET_COMM_PACKETS` packets of
    ``transport``, unless its compute would then last longer than
    :data:`MAX_COMPUTE_PACKET_TIMES` packet times (a job that hardly communicates is not
    stretched for its few bytes)."""
    comm = (sizing.bytes_of(TARGET_COMM_PACKETS[quick], transport)
            / busiest_step_bytes(graph, jobs, placed))
    compute = step_compute_s(jobs)
    if compute <= 0:
        return comm
    # a second of the job lasts byte_scale x the physical rate's bits on an emulated link
    packet_times_per_s = physical_gbps(graph) * 1e9 / (transport.packet_bytes * 8)
    return min(comm, MAX_COMPUTE_PACKET_TIMES[quick] / (compute * packet_times_per_s))


def scales(graph: Any, jobs: list[Job], placed: Mapping[str, list[str]], host_mbps: float,
           transport: TransportSpec, quick: bool) -> tuple[float, float]:
    """``(byte_scale, dilation)`` of a replay at ``host_mbps`` (module docstring): the
    dilation is the emulated seconds per second of the job that the byte scale takes at
    this rate."""
    byte_scale = byte_scale_of(graph, jobs, placed, transport, quick)
    return byte_scale, byte_scale * physical_gbps(graph) * 1e3 / host_mbps


def _replay(graph: Any, job: Job, endpoints: list[str], byte_scale: float,
            dilation: float) -> Replay:
    return replay(job.workload, endpoints, byte_scale=byte_scale, time_scale=dilation,
                  servers=endpoint_servers(graph, endpoints), dscp=job.dscp,
                  tag_prefix=job.name, chunks=CHUNKS)


def scenarios(jobs: list[Job]) -> list[tuple[str, list[Job]]]:
    """``(scenario, its jobs)``: each job alone, then all together (two jobs or more)."""
    out = [(f"{job.name} alone", [job]) for job in jobs]
    return out + ([("together", list(jobs))] if len(jobs) > 1 else [])


def run_seconds(graph: Any, jobs: list[Job], host_mbps: float, transport: TransportSpec,
                quick: bool) -> float:
    """Emulated seconds of the jobs' steps at line rate, all after one another (pure): the
    dilated compute and communication of every rank's busiest step at ``host_mbps``."""
    placed = place_jobs(graph, jobs, 0)
    _, dilation = scales(graph, jobs, placed, host_mbps, transport, quick)
    comm = busiest_step_bytes(graph, jobs, placed) * 8 / (physical_gbps(graph) * 1e9)
    steps = max(len({op.step for program in j.workload.programs for op in program})
                for j in jobs)
    return steps * dilation * (step_compute_s(jobs) + comm)


# --- rows --------------------------------------------------------------------------

def _mean_ms(values: list[float], dilation: float) -> float | None:
    return round(statistics.fmean(values) / dilation * 1e3, 4) if values else None


def job_fields(name: str, schedule: Replay, measured: Mapping[str, tuple],
               best: Mapping[str, tuple] | None, dilation: float) -> dict[str, Any]:
    """One job's runs.csv fields (pure): mean step time, its ideal, the critical rank's
    compute and the exposed communication, in the job's milliseconds."""
    mine = {t.id for t in schedule.transfers}
    rows = {k: v for k, v in measured.items() if k in mine}
    complete = bool(rows) and all(v[0] is not None and v[1] is not None for v in rows.values())
    steps = step_times(schedule, rows) if complete else []
    ideal = step_times(schedule, {k: v for k, v in best.items() if k in mine}) if best else []
    return {f"step_ms:{name}": _mean_ms([s.seconds for s in steps], dilation),
            f"ideal_ms:{name}": _mean_ms([s.seconds for s in ideal], dilation),
            f"compute_ms:{name}": _mean_ms([s.compute_s for s in steps], dilation),
            f"exposed_ms:{name}": _mean_ms([s.exposed_s for s in steps], dilation),
            f"steps:{name}": len(steps), f"complete:{name}": complete}


def collective_rows(keys: Mapping[str, Any], name: str, schedule: Replay,
                    measured: Mapping[str, tuple], best: Mapping[str, tuple] | None,
                    line_bps: float) -> list[dict[str, Any]]:
    """A row per fabric collective of a job: its bus bandwidth over the host line rate
    beside the ideal's (pure)."""
    ideal = {c.key: c for c in collective_times(schedule, best)} if best else {}
    out = []
    for c in collective_times(schedule, measured):
        perfect = ideal.get(c.key)
        out.append({**keys, "job": name, "collective": c.name, "group": c.group,
                    "step": c.step, "ranks": c.ranks, "bytes": c.bytes,
                    "busbw_frac": round(c.busbw / line_bps, 4) if c.busbw else None,
                    "ideal_frac": (round(perfect.busbw / line_bps, 4)
                                   if perfect and perfect.busbw else None)})
    return out


def _row_function(runner: Runner, emu: Emulation, spray: bool) -> Any:
    graph, plan = emu.graph, emu.report.rate_plan
    table = runner.table("collectives")

    def row_of(run: Scheduled, result: Any, report: dict[str, Any]) -> dict[str, Any]:
        schedules, dilation = run.context["schedules"], run.context["dilation"]
        measured = timings(records(result.transfer_rows()))
        ideal = ideal_transfers(result, graph, plan.link_mbps, spray)
        best = timings(ideal) if ideal else None
        row: dict[str, Any] = {"host_mbps": plan.host_mbps, "dilation": round(dilation, 3),
                               "byte_scale": run.context["byte_scale"],
                               "jobs": "+".join(schedules)}
        for name, schedule in schedules.items():
            row.update(job_fields(name, schedule, measured, best, dilation))
            table.extend(collective_rows(run.keys, name, schedule, measured, best,
                                         plan.host_mbps * 1e6 / 8))
        complete = all(row[f"complete:{n}"] for n in schedules)
        return {**row, "valid": bool(report["valid"] and complete)}

    return row_of


def _runs(graph: Any, jobs: list[Job], policy: str, host_mbps: float,
          transport: TransportSpec, seeds: list[int], quick: bool) -> Iterator[Scheduled]:
    for seed in seeds:
        placed = place_jobs(graph, jobs, seed)
        byte_scale, dilation = scales(graph, jobs, placed, host_mbps, transport, quick)
        for scenario, members in scenarios(jobs):
            schedules = {j.name: _replay(graph, j, placed[j.name], byte_scale, dilation)
                         for j in members}
            transfers: list[Transfer] = [t for s in schedules.values() for t in s.transfers]
            yield Scheduled({"policy": policy, "scenario": scenario, "seed": seed}, transfers,
                            seed, {"schedules": schedules, "dilation": dilation,
                                   "byte_scale": byte_scale})


# --- the summary's table -------------------------------------------------------------

def job_names(rows: list[Mapping[str, Any]]) -> list[str]:
    """The jobs of a run's rows, in order of appearance."""
    names: list[str] = []
    for row in rows:
        names += [n for n in str(row["jobs"]).split("+") if n and n not in names]
    return names


def _values(rows: list[Mapping[str, Any]], field: str) -> list[float]:
    return [v for v in (as_float(r.get(field)) for r in rows) if v is not None]


def table_of(rows: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per policy and job: its step time alone and together, the slowdown, the ideal and
    the exposed communication (job milliseconds, means over seeds)."""
    table = []
    for policy in [p for p in ROUTING_POLICIES if any(r["policy"] == p for r in rows)]:
        mine = [r for r in rows if r["policy"] == policy]
        for name in job_names(mine):
            alone = [r for r in mine if r["scenario"] == f"{name} alone"]
            together = [r for r in mine if r["scenario"] == "together"]

            def mean(group: list, field: str) -> float | None:
                got = _values(group, f"{field}:{name}")
                return round(statistics.fmean(got), 3) if got else None

            step, shared, ideal = (mean(alone, "step_ms"), mean(together, "step_ms"),
                                   mean(alone, "ideal_ms"))
            exposed = mean(alone, "exposed_ms")
            table.append({"policy": policy, "job": name, "runs": len(alone),
                          "step_ms": step, "ideal_ms": ideal,
                          "efficiency": round(ideal / step, 4) if step and ideal else None,
                          "exposed_ms": exposed,
                          "exposed_share": round(exposed / step, 4) if step and exposed
                          is not None else None,
                          "together_ms": shared,
                          "slowdown": round(shared / step, 4) if shared and step else None,
                          "together_ideal_ms": mean(together, "ideal_ms")})
    return table


# --- figures (no root: read the run directory only) ------------------------------------

def step_figure(data: RunData) -> Any:
    """Step time per policy: each job alone and together, with the ideal."""
    runs, names = data.runs, job_names(data.runs)
    policies = [p for p in ROUTING_POLICIES if any(r["policy"] == p for r in runs)]
    bars = [(name, scenario) for name in names
            for scenario in ((f"{name} alone", "together") if len(names) > 1
                             else (f"{name} alone",))]
    width = 0.8 / len(bars)
    fig, ax = data.plt.subplots(figsize=(2.6 + 1.2 * len(policies), 2.8))
    for i, policy in enumerate(policies):
        for j, (name, scenario) in enumerate(bars):
            group = [r for r in runs if r["policy"] == policy and r["scenario"] == scenario]
            values = _values(group, f"step_ms:{name}")
            x = i + (j - (len(bars) - 1) / 2) * width
            label = f"{name} {'alone' if scenario != 'together' else 'with the others'}"
            if values:
                plotstyle.spread_bar(ax, x, values, plotstyle.colour(name, j // 2 * 2 + j % 2),
                                     width=width * 0.9, label=label if i == 0 else None)
            plotstyle.ideal_ticks(ax, x + width * 0.3, _values(group, f"ideal_ms:{name}"),
                                  plotstyle.IDEAL_LABEL if i == j == 0 else None)
            plotstyle.mark_incomplete(ax, x, len(group) - len(values), rotation=90)
    ax.set_xticks(range(len(policies)), policies)
    ax.set_xlabel("routing")
    ax.set_ylabel("step time (job ms)")
    ax.set_ylim(bottom=0)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7)
    return fig


def exposed_figure(data: RunData) -> Any:
    """Each job's step alone, split into the critical rank's compute and the exposed
    communication, per policy."""
    runs, names = data.runs, job_names(data.runs)
    policies = [p for p in ROUTING_POLICIES if any(r["policy"] == p for r in runs)]
    labels, compute, exposed = [], [], []
    for policy in policies:
        for name in names:
            group = [r for r in runs if r["policy"] == policy and r["scenario"] == f"{name} alone"]
            c, e = _values(group, f"compute_ms:{name}"), _values(group, f"exposed_ms:{name}")
            labels.append(f"{policy}\n{name}")
            compute.append(statistics.fmean(c) if c else 0.0)
            exposed.append(statistics.fmean(e) if e else 0.0)
    fig, ax = data.plt.subplots(figsize=(1.6 + 0.6 * len(labels), 2.8))
    ax.bar(range(len(labels)), compute, color=plotstyle.colour("compute", 7), label="compute")
    ax.bar(range(len(labels)), exposed, bottom=compute, color=plotstyle.colour("exposed", 1),
           label="exposed communication")
    ax.set_xticks(range(len(labels)), labels, fontsize=7)
    ax.set_ylabel("step time alone (job ms)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7)
    return fig


# --- the experiment -----------------------------------------------------------------------


class ReplayExperiment(Experiment):
    """A training job's trace, alone and beside the others, under each routing policy."""

    name = NAME
    question = QUESTION
    default_topology = DEFAULT_TOPO
    modes = {"quick": Mode(seeds=1), "full": Mode(seeds=3)}
    options = (TRACE, WORKLOAD, PLACEMENT, *ROCE_OPTIONS, POLICIES_OPTION)
    anchors = {"meta-llama3": "Llama 3 405B training: exposed communication kept small by "
                              "overlap; a second job on shared links slows both",
               "nccl": "NCCL: ring all-reduce busbw close to the link rate on a "
                       "non-blocking fabric"}

    def check(self, ctx: RunContext) -> None:
        """Load every trace, place every job and build every schedule: any problem is a
        one-line error before the fabric comes up."""
        graph = self.graph(ctx)
        jobs = jobs_of(ctx)
        placed = place_jobs(graph, jobs, 0)
        for job in jobs:
            if not _replay(graph, job, placed[job.name], 1.0, 0.0).transfers:
                raise UserError(f"{NAME}: {job.workload.source or job.name}: no communication "
                                f"crosses the fabric (no collective, or every one inside a "
                                f"server, with placement {job.placement})")

    def run_count(self, ctx: RunContext) -> int:
        return (len(chosen_policies(ctx, POLICIES)) * len(self.seeds(ctx))
                * len(scenarios(jobs_of(ctx))))

    def estimate_s(self, ctx: RunContext) -> float:
        jobs, graph = jobs_of(ctx), self.graph(ctx)
        per_run = RUN_OVERHEAD_S + run_seconds(graph, jobs, self._base_mbps(ctx, graph),
                                               ctx.roce(), ctx.quick)
        return len(chosen_policies(ctx, POLICIES)) * (
            BRINGUP_S + len(self.seeds(ctx)) * len(scenarios(jobs)) * per_run)

    @staticmethod
    def _base_mbps(ctx: RunContext, graph: Any) -> float:
        """The host rate asked of every bring-up: the user's, or what the fabric sustains."""
        return ctx.host_mbps or default_host_mbps(graph, packet_bytes=ctx.roce().packet_bytes,
                                                  headroom=capacity.ROCE_RATE_HEADROOM)

    def measure(self, ctx: RunContext, runner: Runner) -> Measured:
        """One bring-up per policy; per seed, every job alone and all together."""
        jobs, graph = jobs_of(ctx), self.graph(ctx)
        base = self._base_mbps(ctx, graph)
        for policy in chosen_policies(ctx, POLICIES):
            entropy = ctx.get(SPRAY_ENTROPY) if sprays(policy) else "flow"
            transport = ctx.roce(entropy=entropy, entropy_ports=SPRAY_ENTROPY_PORTS)
            with runner.bring_up(graph, host_mbps=base, packet_bytes=ctx.roce().packet_bytes,
                                 policy=policy) as emu:
                rate = emu.report.rate_plan.host_mbps
                deadline = DEADLINE_FACTOR * max(5.0, run_seconds(graph, jobs, rate, transport,
                                                                  ctx.quick))
                runner.run(emu, _runs(graph, jobs, policy, rate, transport, self.seeds(ctx),
                                      ctx.quick),
                           transport, f"{policy}-{rate:g}",
                           _row_function(runner, emu, multipath(policy)), deadline_s=deadline)
        return Measured(
            {"topology": ctx.topo or DEFAULT_TOPO, "policies": chosen_policies(ctx, POLICIES),
             "jobs": {j.name: {"trace": j.workload.source, "ranks": j.workload.ranks,
                               "placement": j.placement, "dscp": j.dscp} for j in jobs},
             "transport": "roce", "cc": ctx.roce().cc, "roce_mtu": ctx.roce().mtu_payload,
             "chunks": CHUNKS,
             "spray_entropy": ctx.get(SPRAY_ENTROPY), "host_mbps": ctx.host_mbps or "auto",
             "work": {"busiest_step_packets": TARGET_COMM_PACKETS[ctx.quick],
                      "longest_compute_packet_times": MAX_COMPUTE_PACKET_TIMES[ctx.quick],
                      "payload_bytes": ctx.roce().payload_bytes}},
            {"jobs": [j.name for j in jobs], "physical_gbps": physical_gbps(graph)})

    def table(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return table_of(rows)

    def notes(self, ctx: RunContext, rows: list[dict[str, Any]], measured: Measured
              ) -> list[str]:
        dilations = sorted({float(r["dilation"]) for r in rows if r.get("dilation")})
        return [f"time dilation {', '.join(f'{d:g}' for d in dilations)}: emulated seconds "
                f"per second of the job; step times are in the job's milliseconds",
                "ideal: the same schedule through a perfect transport on the paths the run "
                "used (fluid, headers, ACKs, store-and-forward, compute gaps)",
                "exposed communication: step time minus the compute of the rank that "
                "finished the step last"]

    def figures(self) -> Mapping[str, Any]:
        return {"step_time": step_figure, "exposed": exposed_figure}


EXPERIMENT = ReplayExperiment()
