"""What a run changed on the system, on disk, so it can always be undone.

Before an emulation touches anything it writes a state file under
``/run/fabric/runs`` naming the bridges and root-namespace interfaces it
will create and the sysctls it will change (with their old values); as it
starts processes it adds their pids and network namespaces. Teardown and
``fabric clean`` both undo exactly what the file names, so a run killed with
SIGKILL can still be cleaned up, and nothing foreign is touched.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from fabric.emulation import ovs
from fabric.host import system
from fabric.emulation.ovs import STATE_DIR

RUNS_DIR = STATE_DIR / "runs"


@dataclass
class RunState:
    """The undo log of one emulation run."""

    run_id: str
    owner_pid: int
    bridges: list[str] = field(default_factory=list)
    root_intfs: list[str] = field(default_factory=list)
    sysctls: dict[str, str] = field(default_factory=dict)
    processes: list[dict] = field(default_factory=list)  # {"pid", "expect"}
    netns_inodes: list[int] = field(default_factory=list)
    host_intfs: list[str] = field(default_factory=list)

    @property
    def path(self) -> Path:
        """Where this state lives."""
        return RUNS_DIR / f"{self.run_id}.json"

    @property
    def tmp_path(self) -> Path:
        """Where :meth:`save` writes before it renames (never left behind by a signal)."""
        return self.path.with_suffix(".tmp")

    @property
    def workdir(self) -> Path:
        """Scratch files of the run (batch files, controller status and log)."""
        return RUNS_DIR / self.run_id

    def save(self) -> None:
        """Write the state atomically.

        A signal (SIGTERM, SIGINT raise in this process) can land between the
        write and the rename: a complete new state is then still renamed into
        place, a partial one removed, so no temporary file is left behind.
        """
        RUNS_DIR.mkdir(parents=True, exist_ok=True)
        tmp, written = self.tmp_path, False
        try:
            tmp.write_text(json.dumps(asdict(self), indent=1))
            written = True
            os.replace(tmp, self.path)
        except BaseException:
            try:
                if written:
                    os.replace(tmp, self.path)
                else:
                    tmp.unlink(missing_ok=True)
            except OSError:
                pass
            raise

    def add_process(self, pid: int, expect: str) -> None:
        """Record a process we started (``expect``: part of its command line)."""
        self.processes.append({"pid": pid, "expect": expect})
        self.save()


def new_run_state() -> RunState:
    """Create (not yet saved) state for a run of this process."""
    return RunState(run_id=f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}",
                    owner_pid=os.getpid())


def load_all() -> list[RunState]:
    """Return every run state on disk, oldest first.

    A temporary file left by a run killed (SIGKILL) between writing its new
    state and renaming it is that run's newest state when it is complete: it
    takes the place of the older one; an incomplete one is removed. A live
    run's temporary file is its own business.
    """
    if not RUNS_DIR.exists():
        return []
    for tmp in sorted(RUNS_DIR.glob("*.tmp")):
        owner = tmp.stem.rsplit("-", 1)[-1]
        if owner.isdigit() and system.running(int(owner)):
            continue
        try:
            RunState(**json.loads(tmp.read_text()))
            os.replace(tmp, tmp.with_suffix(".json"))
        except (OSError, ValueError, TypeError):
            tmp.unlink(missing_ok=True)
    states = []
    for path in sorted(RUNS_DIR.glob("*.json")):
        try:
            states.append(RunState(**json.loads(path.read_text())))
        except (OSError, ValueError, TypeError):
            path.unlink(missing_ok=True)  # unreadable: nothing we can undo from it
    return states


def processes_in_netns(inodes: set[int]) -> dict[int, list[int]]:
    """Return ``{netns inode: pids}`` for processes in the namespaces ``inodes``."""
    found: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            inode = os.stat(entry / "ns" / "net").st_ino
        except OSError:
            continue
        if inode in inodes:
            found.setdefault(inode, []).append(int(entry.name))
    return found


def stray_processes(state: RunState) -> list[int]:
    """Pids still running inside this run's emulated hosts.

    Namespace inode numbers are recycled once a namespace is freed, so a
    namespace only counts as ours when it still holds one of our host
    interfaces.
    """
    me = os.getpid()
    strays = []
    for pids in processes_in_netns(set(state.netns_inodes)).values():
        probe = system.run(["nsenter", "-t", str(pids[0]), "-n", "ip", "-o", "link", "show"],
                           check=False)
        names = {line.split(":")[1].strip().split("@")[0]
                 for line in probe.stdout.splitlines() if line.count(":") >= 2}
        if names & set(state.host_intfs):
            strays += [pid for pid in pids if pid != me]
    return strays


def undo(state: RunState) -> list[str]:
    """Undo everything ``state`` names; return a line per action taken.

    Idempotent: whatever is already gone is skipped.
    """
    done = []
    expect = {proc["pid"]: proc["expect"] for proc in state.processes}
    # Processes started inside emulated hosts (daemons) keep their namespace alive.
    strays = [pid for pid in stray_processes(state) if pid not in expect]
    stopped = system.kill_trees([*expect.items(), *((pid, None) for pid in strays)])
    done += [f"stopped process {pid} ({expect[pid]})" if pid in expect
             else f"stopped process {pid} left in an emulated host" for pid in stopped]
    existing = [br for br in state.bridges if Path(f"/sys/class/net/{br}").exists()
                or _ovs_has_bridge(br)]
    if existing:
        ovs.delete_bridges(existing)
        done.append(f"deleted {len(existing)} bridges")
    intfs = [i for i in state.root_intfs if Path(f"/sys/class/net/{i}").exists()]
    if intfs:
        batch = "".join(f"link del dev {i}\n" for i in intfs)
        system.run(["ip", "-force", "-batch", "-"], check=False, input_text=batch)
        done.append(f"deleted {len(intfs)} interfaces")
    for key, value in state.sysctls.items():
        try:
            if system.read_sysctl(key) != value:
                system.write_sysctl(key, value)
                done.append(f"restored {key}={value}")
        except OSError:
            pass
    shutil.rmtree(state.workdir, ignore_errors=True)
    state.path.unlink(missing_ok=True)
    state.tmp_path.unlink(missing_ok=True)
    return done


def orphan_bridges() -> list[str]:
    """Bridges tagged by a fabric run that no state file names any more.

    A run's bridges outlive its state when ``/run`` is wiped (a reboot: ovsdb
    keeps its bridges on disk) or when ovsdb was down while the run was undone.
    """
    live = {state.run_id for state in load_all()}
    return sorted(br for br, run in ovs.tagged_bridges().items() if run not in live)


def leftovers(state: RunState) -> list[str]:
    """Return what ``state`` names that still exists; empty after a clean undo."""
    found = [f"bridge {br}" for br in state.bridges if _ovs_has_bridge(br)]
    found += [f"interface {i}" for i in state.root_intfs if Path(f"/sys/class/net/{i}").exists()]
    found += [f"process {p['pid']} ({p['expect']})" for p in state.processes
              if system.pid_alive(p["pid"])
              and p["expect"] in system.settled_cmdline(p["pid"])]
    found += [f"process {pid} in an emulated host" for pid in stray_processes(state)]
    for key, value in state.sysctls.items():
        if system.read_sysctl(key) != value:
            found.append(f"sysctl {key} not restored to {value}")
    if state.path.exists():
        found.append(f"state file {state.path}")
    return found


def _ovs_has_bridge(name: str) -> bool:
    return system.run(["ovs-vsctl", "--timeout=5", "br-exists", name], check=False).returncode == 0
