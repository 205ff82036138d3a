"""Open vSwitch: pick the datapath and make sure the daemons run.

The kernel datapath is used when the ``openvswitch`` module is (or can be)
loaded; otherwise ovs-vswitchd forwards in userspace (``netdev``). In
userspace mode, ovs-vswitchd sends through one AF_PACKET socket, created
once per daemon, whose buffer comes from ``net.core.wmem_default`` at that
moment: so we (re)start it while that sysctl is raised and remember its pid,
and restart it again only when someone else started it.

In userspace mode one thread, ovs-vswitchd's main thread, forwards every
packet of the fabric, and it shares the cores with the host agents and the
kernel's shaping. As an ordinary thread it would wait for a core whenever
those run, and packets would wait in its sockets meanwhile: that wait, not
its CPU time, is what holds the forwarding budget down. So the main thread
runs ``SCHED_FIFO`` (a real switch forwards whatever its host is doing), with
reset-on-fork so its handler and revalidator threads stay ordinary; it blocks
in ``poll`` when idle. The agents wait behind it instead.

The daemon starts with (:func:`vswitchd_env`):

* glibc's heap trimming off: the datapath allocates a batch of 32 receive
  buffers for every port on every main-loop iteration and runs with
  ``mlockall``, so a trimmed heap top was populated and locked again on every
  iteration;
* tcmalloc preloaded when installed (``scripts/setup.sh`` installs it): those
  buffers then come from a per-size free list, which matters where the sweep
  of the ports is long;
* :mod:`fabric.emulation.idle_accept` preloaded: the main loop tries every
  listening socket (each bridge's ``.mgmt`` and ``.snoop``) on every
  iteration, and the library answers the tries that would find nothing
  without the kernel (``ovs-ofctl`` works as before).

A run also lifts the kernel's real-time throttling
(:func:`forwarding_sysctls`) on machines with a second core: the throttle
stopped every switch for the rest of any second in which the thread had
forwarded for more than 95 % of a core, and with a second core everything
else keeps running even if the thread ever needed a whole one (the
input-delay check then fails the run). And on two or more cores the
forwarding thread is pinned to a core of its own, the host agents running on
the others (:func:`agent_cpus`): unpinned, it preempted whichever process
shared its core, and with one agent process for all hosts that stalled every
host's NIC at once.

What each of these settings bought, and what was tried and left out, was
measured with ``benchmarks/ovs_loop.py`` and ``benchmarks/traffic.py``:
docs/benchmarks.md, "ovs-vswitchd's forwarding thread" and "Real-time
priority and throttling".
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from fabric.emulation import idle_accept
from fabric.host import system

OVS_SCRIPTS = Path("/usr/share/openvswitch/scripts")
OVS_RUNDIR = Path("/var/run/openvswitch")
STATE_DIR = Path("/run/fabric")
VSWITCHD_MARKER = STATE_DIR / "ovs-vswitchd.pid"
# the environment variable that records the send buffer a daemon was started with
SEND_BUFFER_ENV = "FABRIC_SEND_BUFFER_BYTES"
FORWARDING_RT_PRIORITY = 10  # SCHED_FIFO, below the kernel's own real-time threads (50, 99)
RT_RUNTIME_SYSCTL = "kernel.sched_rt_runtime_us"  # -1: real-time threads are not throttled
RUN_TAG = "fabric-run"  # external_ids key naming the run that made a bridge
TCMALLOC = "libtcmalloc_minimal.so.4"


def _library(name: str) -> Path | None:
    """Where the shared library ``name`` is installed (multiarch directories first)."""
    found = sorted(Path("/usr/lib").glob(f"*/{name}")) + [Path("/usr/lib") / name]
    return next((path for path in found if path.exists()), None)


def vswitchd_env(tcmalloc: Path | None, accept_library: Path | None = None) -> dict[str, str]:
    """ovs-vswitchd's environment: glibc keeps the top of its heap however much of it
    is free, up to 256 MiB; tcmalloc, when installed, serves its allocations; and
    fabric's idle-accept library, when built, spares it the ``accept`` calls that
    would find nothing (see the module docstring)."""
    env = {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=268435456"}
    preload = [str(path) for path in (tcmalloc, accept_library) if path is not None]
    if preload:
        env["LD_PRELOAD"] = " ".join(preload)
    return env


def vswitchd_settings() -> tuple[dict[str, str], list[str]]:
    """The environment ovs-vswitchd should run with here, and fidelity warnings for
    what is missing from it (tcmalloc not installed, the idle-accept library not
    built); builds that library if needed (root: it is kept in /run/fabric)."""
    warnings = []
    tcmalloc = _library(TCMALLOC)
    if tcmalloc is None:
        warnings.append(f"{TCMALLOC} is not installed (scripts/setup.sh installs it): "
                        f"ovs-vswitchd allocates its receive buffers with glibc, and packets "
                        f"wait longer in its sockets on fabrics with many ports")
    try:
        shim: Path | None = idle_accept.library()
    except idle_accept.BuildError as exc:
        shim = None
        warnings.append(f"fabric's idle-accept library for ovs-vswitchd was not built ({exc}): "
                        f"its main loop calls accept on two sockets per bridge every time it "
                        f"forwards, and packets wait longer in its sockets")
    return vswitchd_env(tcmalloc, shim), warnings


def kernel_datapath_available() -> bool:
    """Return True when the openvswitch kernel module is loaded or loadable."""
    if Path("/sys/module/openvswitch").exists():
        return True
    if shutil.which("modprobe") is None:
        return False
    result = subprocess.run(["modprobe", "-q", "openvswitch"], capture_output=True)
    return result.returncode == 0 and Path("/sys/module/openvswitch").exists()


def choose_datapath(requested: str = "auto") -> str:
    """Return ``"kernel"`` or ``"user"`` for ``requested`` in auto/kernel/user."""
    if requested not in ("auto", "kernel", "user"):
        raise ValueError(f"datapath must be auto, kernel or user, got {requested!r}")
    if requested == "auto":
        return "kernel" if kernel_datapath_available() else "user"
    if requested == "kernel" and not kernel_datapath_available():
        raise system.HostSetupError("the openvswitch kernel module is not available; "
                                    "use --datapath user")
    return requested


def _daemon_pid(name: str) -> int | None:
    try:
        pid = int((OVS_RUNDIR / f"{name}.pid").read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if system.pid_alive(pid) else None


def vswitchd_pid() -> int | None:
    """The running ovs-vswitchd's pid, or None."""
    return _daemon_pid("ovs-vswitchd")


def _ovs_ctl(*args: str, env: dict[str, str] | None = None) -> None:
    system.run([str(OVS_SCRIPTS / "ovs-ctl"), *args], timeout=60, env=env)


def started_with(pid: int, settings: dict[str, str]) -> bool:
    """True when process ``pid`` started with every variable of ``settings`` (False if
    its environment cannot be read: it is then restarted, as a foreign daemon is)."""
    try:
        environ = set(Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"))
    except OSError:
        return False
    return all(f"{key}={value}".encode() in environ for key, value in settings.items())


def bridges() -> list[str]:
    """Return the names of all OVS bridges."""
    out = system.run(["ovs-vsctl", "--timeout=5", "list-br"]).stdout
    return [line for line in out.splitlines() if line]


def ensure_db() -> None:
    """Start ovsdb-server if it is not running (bridges persist in its database)."""
    if _daemon_pid("ovsdb-server") is None:
        _ovs_ctl("--system-id=random", "--no-ovs-vswitchd", "start")


def tagged_bridges() -> dict[str, str]:
    """Return ``{bridge: run id}`` for bridges tagged by a fabric run; empty without ovsdb."""
    if _daemon_pid("ovsdb-server") is None:
        return {}
    out = system.run(["ovs-vsctl", "--timeout=5", "--format=json",
                      "--columns=name,external_ids", "list", "Bridge"]).stdout
    found = {}
    for name, (_kind, pairs) in json.loads(out)["data"]:
        tags = dict(pairs)
        if RUN_TAG in tags:
            found[name] = tags[RUN_TAG]
    return found


def _uuids(value: list) -> set[str]:
    """The UUIDs of an OVSDB JSON value: ``["uuid", u]`` or ``["set", [...]]``."""
    kind, data = value
    return {data} if kind == "uuid" else {item[1] for item in data}


def connected_bridges(names: list[str]) -> set[str]:
    """The bridges among ``names`` with every controller connection up."""
    def table(*args: str) -> list:
        return json.loads(system.run(["ovs-vsctl", "--timeout=5", "--format=json",
                                      *args]).stdout)["data"]

    up = set().union(*(_uuids(uuid) for (uuid,) in table(
        "--columns=_uuid", "find", "Controller", "is_connected=true")))
    return {name for name, controllers in table("--columns=name,controller", "list", "Bridge")
            if name in names and _uuids(controllers) and _uuids(controllers) <= up}


def delete_bridges(names: list[str]) -> None:
    """Delete ``names`` from ovsdb, and the devices ovs-vswitchd would have removed."""
    if not names:
        return
    args = ["ovs-vsctl", "--timeout=20"]
    if vswitchd_pid() is None:
        args.append("--no-wait")  # nobody to wait for: the database change is what matters
    for br in names:
        args += ["--", "--if-exists", "del-br", br]
    system.run(args, check=False, timeout=60)
    # A userspace bridge's own port is a persistent tap device; it outlives ovs-vswitchd.
    taps = [br for br in names if Path(f"/sys/class/net/{br}/tun_flags").exists()]
    if taps:
        system.run(["ip", "-force", "-batch", "-"], check=False,
                   input_text="".join(f"link del dev {tap}\n" for tap in taps))


def started_send_buffer(pid: int) -> int:
    """The send buffer fabric started ovs-vswitchd ``pid`` with (0: unknown)."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return 0
    prefix = f"{SEND_BUFFER_ENV}=".encode()
    return next((int(item[len(prefix):]) for item in environ if item.startswith(prefix)), 0)


def ensure_running(datapath: str, send_buffer: int) -> list[str]:
    """Start ovsdb-server and ovs-vswitchd as needed; in userspace mode, ovs-vswitchd
    with a send buffer of at least ``send_buffer`` bytes (restarted when smaller).

    Returns
    -------
    list of str
        Fidelity warnings (e.g. a foreign ovs-vswitchd that could not be
        restarted with the socket buffers userspace forwarding needs).
    """
    warnings: list[str] = []
    if _daemon_pid("ovsdb-server") is None:
        _ovs_ctl("--system-id=random", "--no-ovs-vswitchd", "start")
    vswitchd = _daemon_pid("ovs-vswitchd")
    if datapath == "kernel":
        if vswitchd is None:
            _ovs_ctl("--no-ovsdb-server", "--no-monitor", "start")
        return warnings
    env, missing = vswitchd_settings()
    if (vswitchd is not None and vswitchd == _marker_pid()
            and started_with(vswitchd, env) and started_send_buffer(vswitchd) >= send_buffer):
        return warnings + prioritize_forwarding(vswitchd)
    if vswitchd is not None and bridges():
        warnings.append("ovs-vswitchd was started elsewhere (or by an older fabric) and has "
                        "bridges, so it was not restarted: its send buffer may be too small "
                        "and drop bursts, and its heap trimming may stall forwarding")
        return warnings
    if vswitchd is not None:
        system.run(["ovs-appctl", "-t", "ovs-vswitchd", "exit"], check=False)
    return warnings + missing + prioritize_forwarding(_start_vswitchd_with_wmem(env,
                                                                               send_buffer))


def forwarding_sysctls(datapath: str, cpus: int | None = None) -> dict[str, str]:
    """Global sysctls the forwarding thread needs for a run on ``datapath``.

    Userspace forwarding on two or more cores lifts the kernel's real-time
    throttling (see the module docstring); on one core it stays, so that a
    busy switch can never take the only core.
    """
    if cpus is None:
        cpus = os.cpu_count() or 1
    if datapath == "user" and cpus >= 2:
        return {RT_RUNTIME_SYSCTL: "-1"}
    return {}


def forwarding_cpu(cpus: set[int] | None = None) -> int | None:
    """The CPU the userspace forwarding thread is pinned to: the first of ``cpus``
    (default: those this process may use), or None with fewer than two."""
    cpus = os.sched_getaffinity(0) if cpus is None else cpus
    return min(cpus) if len(cpus) >= 2 else None


def agent_cpus(datapath: str, cpus: set[int] | None = None) -> set[int] | None:
    """CPUs the host agents run on: all but the forwarding thread's, for userspace
    forwarding on two or more CPUs; None (anywhere) otherwise."""
    cpus = os.sched_getaffinity(0) if cpus is None else cpus
    pinned = forwarding_cpu(cpus)
    if datapath != "user" or pinned is None:
        return None
    return cpus - {pinned}


def prioritize_forwarding(pid: int) -> list[str]:
    """Run ovs-vswitchd ``pid``'s main (forwarding) thread at real-time priority,
    on a core of its own when there are two or more (:func:`forwarding_cpu`).

    Returns
    -------
    list of str
        A fidelity warning when the priority or the core cannot be set (e.g. a
        container without CAP_SYS_NICE): forwarding then waits behind the agents.
    """
    policy = os.SCHED_FIFO | os.SCHED_RESET_ON_FORK
    try:
        if os.sched_getscheduler(pid) != policy:
            os.sched_setscheduler(pid, policy, os.sched_param(FORWARDING_RT_PRIORITY))
    except OSError as exc:
        return [f"ovs-vswitchd's forwarding thread could not get real-time priority "
                f"({exc.strerror}): packets wait for a core whenever the hosts' agents run, "
                f"and the forwarding budget assumes they do not"]
    cpu = forwarding_cpu()
    try:
        if cpu is not None:
            os.sched_setaffinity(pid, {cpu})  # the main thread's id is the pid
    except OSError as exc:
        return [f"ovs-vswitchd's forwarding thread could not be pinned to CPU {cpu} "
                f"({exc.strerror}): it preempts the hosts' agents on whichever core it runs"]
    return []


def restart_vswitchd(timeout_s: float = 10.0) -> list[str]:
    """Stop and start ovs-vswitchd (bridges persist in ovsdb and come back).

    Used to test that a fabric survives a switch restart; must run while an
    emulation holds the socket-buffer sysctls raised. Returns fidelity
    warnings, as :func:`ensure_running` does.
    """
    env, missing = vswitchd_settings()
    pid = _daemon_pid("ovs-vswitchd")
    if pid is not None:
        system.run(["ovs-appctl", "-t", "ovs-vswitchd", "exit"], check=False)
        deadline = time.monotonic() + timeout_s
        while system.pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
    send_buffer = int(system.read_sysctl("net.core.wmem_default"))
    return missing + prioritize_forwarding(_start_vswitchd_with_wmem(env, send_buffer))


def _marker_pid() -> int | None:
    try:
        return int(VSWITCHD_MARKER.read_text().strip())
    except (OSError, ValueError):
        return None


_CONTROL_SOCKET_RE = re.compile(r"(?:ovs-vswitchd|ovsdb-server)\.(\d+)\.ctl")


def remove_stale_control_sockets(rundir: Path = OVS_RUNDIR) -> list[str]:
    """Remove the control sockets (``<daemon>.<pid>.ctl``) that OVS daemons which
    died without cleaning up left in ``rundir``; return their names. A daemon
    killed, or restarted by fabric, leaves one behind every time."""
    removed = []
    for path in rundir.glob("*.ctl"):
        match = _CONTROL_SOCKET_RE.fullmatch(path.name)
        if match and not system.pid_alive(int(match.group(1))):
            path.unlink(missing_ok=True)
            removed.append(path.name)
    return sorted(removed)


def _start_vswitchd_with_wmem(env: dict[str, str], send_buffer: int) -> int:
    # The caller holds net.core.wmem_default raised for the whole run, so the
    # send socket, created at the first packet, gets the large buffer.
    if int(system.read_sysctl("net.core.wmem_default")) < send_buffer:
        raise system.HostSetupError("raise net.core.wmem_default before starting ovs-vswitchd")
    remove_stale_control_sockets()
    # ovs-ctl passes its environment on to the daemon
    _ovs_ctl("--no-ovsdb-server", "--no-monitor", "start",
             env={**os.environ, **env, SEND_BUFFER_ENV: str(send_buffer)})
    pid = _daemon_pid("ovs-vswitchd")
    if pid is None:
        raise system.HostSetupError("ovs-vswitchd did not start; see /var/log/openvswitch/")
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    VSWITCHD_MARKER.write_text(f"{pid}\n")
    os.chmod(VSWITCHD_MARKER, 0o644)
    return pid


VSWITCHD_LOG = Path("/var/log/openvswitch/ovs-vswitchd.log")
# what ovs-vswitchd logs when its send socket is full (EAGAIN, ENOBUFS) and it drops the
# packet, not a send to a link that is down; the message is rate-limited, its suppressed
# repeats counted in a "Dropped N" line
_SEND_ERROR = re.compile(r"\|netdev_linux\|WARN\|error sending Ethernet packet on \S+: "
                         r"(?:Resource temporarily unavailable|No buffer space available)")
_SUPPRESSED = re.compile(r"\|netdev_linux\|INFO\|Dropped (\d+) log messages")


def send_drops_logged(log: str) -> int:
    """Packets ovs-vswitchd's log says it could not send (pure): one per logged send
    error, and its suppressed repeats (their count may include other netdev messages;
    repeats suppressed past the log's end are missed). Only its zero is exact."""
    errors = len(_SEND_ERROR.findall(log))
    return errors + sum(int(n) for n in _SUPPRESSED.findall(log)) if errors else 0


def vswitchd_log_size(path: Path = VSWITCHD_LOG) -> int | None:
    """The log's size now, to read what a run adds to it; None without a log."""
    try:
        return path.stat().st_size
    except OSError:
        return None


def vswitchd_log_since(offset: int, path: Path = VSWITCHD_LOG) -> str:
    """What the log gained after ``offset`` (all of it when it was rotated since)."""
    try:
        with path.open("rb") as log:
            if log.seek(0, os.SEEK_END) < offset:
                offset = 0
            log.seek(offset)
            return log.read().decode(errors="replace")
    except OSError:
        return ""


@dataclass(frozen=True)
class PacketSocket:
    """One of ovs-vswitchd's AF_PACKET sockets, as ``ss -0 -m`` reports it."""

    device: str  # "*" for the unbound send socket
    rcvbuf_bytes: int
    sndbuf_bytes: int
    drops: int


_SKMEM_RE = re.compile(r"\*:(\S+)\s.*skmem:\(([^)]*)\)|\[\d+\]:\*\s.*skmem:\(([^)]*)\)")


def packet_sockets() -> list[PacketSocket]:
    """Return ovs-vswitchd's packet sockets with buffer sizes and drop counts.

    OVS counts none of the drops that happen at these sockets; the kernel
    does (the ``d`` field of ``skmem``).
    """
    out = system.run(["ss", "-0", "-m", "-p", "-n"], check=False).stdout
    found = []
    for line in _join_ss_lines(out):
        if "ovs-vswitchd" not in line:
            continue
        match = _SKMEM_RE.search(line)
        if not match:
            continue
        device = match.group(1) or "*"
        fields = dict(re.findall(r"([a-z]+)(\d+)", match.group(2) or match.group(3)))
        found.append(PacketSocket(device, int(fields.get("rb", 0)), int(fields.get("tb", 0)),
                                  int(fields.get("d", 0))))
    return found


def socket_inodes(pid: int) -> set[int]:
    """Inodes of the sockets process ``pid`` holds open."""
    inodes: set[int] = set()
    fd_dir = Path(f"/proc/{pid}/fd")
    try:
        entries = list(fd_dir.iterdir())
    except OSError:
        return inodes
    for entry in entries:
        try:
            target = os.readlink(entry)
        except OSError:
            continue  # closed while we looked
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return inodes


def packet_socket_devices(inodes: set[int], proc_net_packet: str | None = None) -> set[str]:
    """Names of the devices that the bound packet sockets in ``inodes`` receive from."""
    text = proc_net_packet if proc_net_packet is not None else \
        Path("/proc/net/packet").read_text()
    names = set()
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 9 and fields[4] != "0" and int(fields[8]) in inodes:
            try:
                names.add(socket.if_indextoname(int(fields[4])))
            except OSError:
                continue  # the device went while we looked
    return names


def _join_ss_lines(out: str) -> list[str]:
    # ss wraps skmem onto a continuation line that starts with whitespace.
    lines: list[str] = []
    for line in out.splitlines():
        if line[:1].isspace() and lines:
            lines[-1] += " " + line.strip()
        else:
            lines.append(line)
    return lines


def socket_buffer_warnings(devices: list[str], rcvbuf_min: int, sndbuf_min: int) -> list[str]:
    """Fidelity warnings when OVS's sockets for ``devices`` have small buffers."""
    sockets = packet_sockets()
    by_dev = {s.device: s for s in sockets}
    warnings = []
    small = [d for d in devices if d in by_dev and by_dev[d].rcvbuf_bytes < rcvbuf_min]
    if small:
        warnings.append(f"{len(small)} switch ports have receive buffers below {rcvbuf_min} "
                        f"bytes (e.g. {small[0]}): bursts may be lost unseen")
    senders = [s for s in sockets if s.device == "*"]
    if senders and max(s.sndbuf_bytes for s in senders) < sndbuf_min:
        warnings.append(f"ovs-vswitchd's send socket buffer is below {sndbuf_min} bytes: "
                        f"bursts may be lost unseen (remove other OVS bridges so fabric "
                        f"can restart ovs-vswitchd)")
    return warnings
