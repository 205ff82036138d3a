"""Make the small traces the trace readers' tests read (needs torch and mlc-chakra).

Run it with a Python that has ``torch==2.13.0`` (the CPU build) and
``mlc-chakra==1.0.0``, never the project's own virtualenv::

    python3 -m venv /tmp/torchenv
    /tmp/torchenv/bin/pip install torch==2.13.0 mlc-chakra==1.0.0
    /tmp/torchenv/bin/python tests/data/traces/make_traces.py

It writes, beside itself (or under ``--out``):

``kineto/rank{0..3}.json``
    A real ``torch.profiler`` run (torch 2.13.0, CPU, gloo) of 4 processes on
    this machine (rendezvous and gloo on 127.0.0.1), seen as 2 servers of 2
    GPUs: tensor-parallel groups ``{0,1}``, ``{2,3}`` (torch names them "1"
    and "2"), data-parallel groups ``{0,2}``, ``{1,3}`` ("3", "4") and the
    default group "0". Each of the :data:`STEPS` profiled steps (schedule:
    wait 1, warmup 1, active 3, so ``ProfilerStep#2..#4``) runs
    :func:`step`, a small training step sized so that, on a 400 Gbit/s
    fabric (50 GB/s per NIC), its communication is a sizeable share of it:
    a compute phase, an all-gather of :data:`TP_GATHER_IN` float32 per rank
    (32 MiB of output) on the tensor-parallel group, a compute phase, a
    reduce-scatter of :data:`TP_SCATTER_IN` float32 (32 MiB of input) on it,
    a compute phase (the backward pass), an all-reduce of :data:`DP_REDUCE`
    bfloat16 (256 MiB) on the data-parallel group, a compute phase, an
    all-to-all of :data:`A2A` float32 per rank (32 MiB) on the default group
    and a send of :data:`P2P` float32 (8 MiB) from rank 0 to rank 2 (received
    by rank 2). Each compute phase is one float32 matmul of :data:`PHASES`
    (n x n, one thread per rank: 2.6 ms for 512 and 1.8 ms for 448 alone on
    the 2-core AMD EPYC they were made on, 2-14 ms as recorded, the 4 ranks
    and gloo's threads sharing the 2 cores), so a profiled step holds about
    20-30 ms of compute; at 50 GB/s a rank's fabric traffic of a step (the
    all-reduce, the all-to-all and the send; the tensor-parallel collectives
    stay in a server) takes about 6 ms. Every buffer is allocated once,
    before the profiled steps, so that the compute gaps hold only the
    matmuls; the sizes are only recorded (``Input Dims``), so the files stay
    small. The reader tells gloo's groups apart by their worker threads'
    ids: the job makes its groups one at a time on one CPU and runs again
    when the ids came out interleaved (:func:`groups_told_apart`).
    What torch 2.13 records there: no ``record_param_comms`` (NCCL only); on
    the main thread ``c10d::_allgather_base_``, ``c10d::_reduce_scatter_base_``,
    ``c10d::allreduce_``, ``c10d::alltoall_base_``, ``c10d::send``,
    ``c10d::recv_`` with ``Input Dims``, ``Input type`` (none for tensor
    lists) and ``Concrete Inputs`` (the peer of a send); on the groups' worker
    threads ``gloo:all_gather``, ``gloo:all_reduce`` (also for the
    reduce-scatter), ``gloo:all_to_all``; ``ProfilerStep#N`` spans; and
    ``distributedInfo`` (backend, rank, world_size, pg_config with each
    group's pg_name and ranks). To keep the files small, the ``aten::*``
    events (the matmuls, tensor allocation) are dropped: the reader
    uses none of them.
``chakra/dp.{0..3}.et``
    Made by mlc-chakra 1.0.0's own converter (``chakra_converter Text``) from
    :data:`CHAKRA_TEXT`, a data-parallel model of two layers, two passes, on
    4 NPUs: per pass a forward and a backward compute node per layer and an
    all-reduce of each layer's weight gradient. Chakra's PyTorch path
    (``chakra_trace_link`` then ``chakra_converter PyTorch``) cannot run
    here: ``chakra_trace_link`` needs ``et_replay``, which is not on PyPI
    (mlc-chakra asks for a git install of facebookresearch/param), and on
    CPU there are no GPU kernels, the only operators its converter turns into
    communication nodes.
``example.json``
    The ``fabric-trace`` example of docs/guide/trace-format.md (written by
    hand into :data:`EXAMPLE`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

WORLD = 4
STEPS = 3
MIB = 1 << 20
TP_GATHER_IN = 4 * MIB   # float32 per rank -> all-gather of 2 x 4 Mi x 4 = 32 MiB (output)
TP_SCATTER_IN = 8 * MIB  # float32, total input -> reduce-scatter of 32 MiB
DP_REDUCE = 128 * MIB    # bfloat16 -> all-reduce of 256 MiB
A2A = 8 * MIB            # float32 per rank -> all-to-all of 32 MiB
P2P = 2 * MIB            # float32 -> 8 MiB from rank 0 to rank 2
# n of each compute phase's n x n float32 matmul: before the all-gather, before the
# reduce-scatter, before the all-reduce (the backward pass), before the all-to-all
PHASES = (512, 448, 512, 448)
CHAKRA_TEXT = """DATA
2
layer0 -1 100 NONE 0 80 NONE 0 60 ALLREDUCE 65536 10
layer1 -1 200 NONE 0 160 NONE 0 120 ALLREDUCE 131072 10
"""
EXAMPLE = {
    "format": "fabric-trace", "version": 1, "ranks": 4,
    "groups": {"world": [0, 1, 2, 3], "tp0": [0, 1], "tp1": [2, 3],
               "dp0": [0, 2], "dp1": [1, 3]},
    "programs": [[
        {"op": "compute", "seconds": 0.004, "step": 0},
        {"op": "all_gather", "bytes": 32 * MIB, "group": f"tp{r // 2}", "step": 0},
        {"op": "compute", "seconds": 0.006, "step": 0},
        {"op": "reduce_scatter", "bytes": 32 * MIB, "group": f"tp{r // 2}", "step": 0},
        {"op": "all_reduce", "bytes": 256 * MIB, "group": f"dp{r % 2}", "step": 0},
        {"op": "compute", "seconds": 0.002, "step": 1},
        {"op": "all_to_all", "bytes": 32 * MIB, "group": "world", "step": 1},
    ] + ([{"op": "send", "bytes": 8 * MIB, "peer": 2, "step": 1}] if r == 0 else [])
      + ([{"op": "recv", "bytes": 8 * MIB, "peer": 0, "step": 1}] if r == 2 else [])
        for r in range(4)],
}


def allocate(rank: int) -> SimpleNamespace:
    """Every tensor :func:`step` uses, made once (the compute gaps then hold only matmuls)."""
    import torch

    torch.manual_seed(rank)
    return SimpleNamespace(
        weights=[(torch.randn(n, n), torch.randn(n, n)) for n in PHASES],
        gather_in=torch.ones(TP_GATHER_IN), gathered=torch.zeros(2 * TP_GATHER_IN),
        scatter_in=torch.ones(TP_SCATTER_IN), shard=torch.zeros(TP_SCATTER_IN // 2),
        grads=torch.zeros(DP_REDUCE, dtype=torch.bfloat16),
        a2a_in=torch.ones(A2A), a2a_out=torch.zeros(A2A), message=torch.zeros(P2P))


def step(rank: int, tp, dp, buf: SimpleNamespace) -> None:  # noqa: ANN001 (process groups)
    """One training step's compute and communication (see the module docstring)."""
    import torch.distributed as dist

    def compute(phase: int) -> None:
        a, b = buf.weights[phase]
        a @ b

    compute(0)  # forward
    dist.all_gather_into_tensor(buf.gathered, buf.gather_in, group=tp)
    compute(1)
    dist.reduce_scatter_tensor(buf.shard, buf.scatter_in, group=tp)
    compute(2)  # backward
    dist.all_reduce(buf.grads, group=dp)
    compute(3)
    dist.all_to_all_single(buf.a2a_out, buf.a2a_in)
    if rank == 0:
        dist.send(buf.message, 2)
    elif rank == 2:
        dist.recv(buf.message, 0)


def run_rank(rank: int, out_dir: str, port: int) -> None:
    """One process of the profiled job."""
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, schedule

    torch.set_num_threads(1)  # 4 ranks share this machine's 2 cores
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="lo")
    # The reader tells gloo's groups apart by their worker threads' ids (see
    # groups_told_apart). A group's members start their worker threads at the same moment, so
    # the ids of two processes can interleave: while the groups are made, every thread of
    # every rank runs on one CPU (a process then starts its threads before another runs),
    # and the groups are made one at a time.
    cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cpus)})  # the main thread; the threads it starts inherit it
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    groups = []
    for ranks in ([0, 1], [2, 3], [0, 2], [1, 3]):  # every rank, in the same order
        groups.append(dist.new_group(ranks))
        dist.barrier()
    tps, dps = groups[:2], groups[2:]
    for tid in os.listdir("/proc/self/task"):
        os.sched_setaffinity(int(tid), cpus)
    buf = allocate(rank)
    path = Path(out_dir) / f"rank{rank}.json"

    def ready(prof) -> None:  # noqa: ANN001
        prof.export_chrome_trace(str(path))

    plan = schedule(wait=1, warmup=1, active=STEPS, repeat=1)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, schedule=plan,
                 on_trace_ready=ready) as prof:
        for _ in range(2 + STEPS):
            step(rank, tps[rank // 2], dps[rank % 2], buf)
            prof.step()
    dist.barrier()
    dist.destroy_process_group()


def shrink(path: Path) -> None:
    """Drop the ``aten::*`` events (unused by the reader) and rewrite compactly."""
    data = json.loads(path.read_text())
    data["traceEvents"] = [e for e in data["traceEvents"]
                           if not str(e.get("name", "")).startswith("aten::")]
    data["traceName"] = path.name  # not the temporary directory it was written in
    path.write_text(json.dumps(data, separators=(",", ":")) + "\n")


def worker_threads(path: Path) -> tuple[list[int], int]:
    """The ids of the threads off the main thread that ran gloo work, and the group count."""
    data = json.loads(path.read_text())
    events = data["traceEvents"]
    main = {e.get("tid") for e in events if str(e.get("name", "")).startswith("c10d::")}
    tids = sorted({e["tid"] for e in events if str(e.get("name", "")).startswith("gloo:")
                   and isinstance(e.get("tid"), int) and e["tid"] not in main})
    return tids, len(data["distributedInfo"]["pg_config"])


def groups_told_apart(path: Path) -> bool:
    """Whether the reader can tell which group ran each collective of this rank's trace.

    gloo names no group: the reader goes by the worker threads that ran the work
    (``gloo:*`` spans off the main thread), whose ids form one run of consecutive ids per
    group, in the order of ``distributedInfo.pg_config``. Another process that starts a
    thread while a group starts its own (4 processes run at once) breaks a run in two.
    """
    tids, groups = worker_threads(path)
    runs = sum(1 for i, tid in enumerate(tids) if i == 0 or tid != tids[i - 1] + 1)
    return runs == groups


def make_kineto(out: Path, port: int, attempts: int = 5) -> None:
    """Run the profiled job and keep its shrunk traces in ``out/kineto``.

    The job runs again (up to ``attempts`` times) while some rank's worker threads do not
    tell its groups apart (:func:`groups_told_apart`).
    """
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        for attempt in range(attempts):
            mp.spawn(run_rank, args=(tmp, port + attempt), nprocs=WORLD)
            bad = [r for r in range(WORLD) if not groups_told_apart(Path(tmp) / f"rank{r}.json")]
            if not bad:
                break
            print(f"attempt {attempt + 1}: the worker threads' ids do not tell the groups "
                  f"apart (rank, thread ids, groups: "
                  f"{[(r, *worker_threads(Path(tmp) / f'rank{r}.json')) for r in bad]}); "
                  f"running the job again", file=sys.stderr)
        else:
            raise SystemExit(f"no run in {attempts} told the groups apart")
        target = out / "kineto"
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        for rank in range(WORLD):
            shutil.copy(Path(tmp) / f"rank{rank}.json", target / f"rank{rank}.json")
            shrink(target / f"rank{rank}.json")


def make_chakra(out: Path) -> None:
    """Convert :data:`CHAKRA_TEXT` with mlc-chakra's converter into ``out/chakra``."""
    target = out / "chakra"
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "dp.txt"
        model.write_text(CHAKRA_TEXT)
        converter = Path(sys.executable).parent / "chakra_converter"
        subprocess.run([str(converter), "--log-filename", str(Path(tmp) / "log"), "Text",
                        "--input", str(model), "--output", str(target / "dp"),
                        "--num-npus", str(WORLD), "--num-passes", "2"], check=True)


def main() -> None:
    """Make every trace (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    parser.add_argument("--port", type=int, default=29517, help="rendezvous port (loopback)")
    parser.add_argument("--only", choices=("kineto", "chakra", "example"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.only in (None, "kineto"):
        make_kineto(args.out, args.port)
    if args.only in (None, "chakra"):
        make_chakra(args.out)
    if args.only in (None, "example"):
        (args.out / "example.json").write_text(json.dumps(EXAMPLE, indent=1) + "\n")


if __name__ == "__main__":
    main()
