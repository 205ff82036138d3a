"""What each userspace Open vSwitch port type costs per forwarded packet here (root).

A chain of ``--hops`` bridges in a private ovs-vswitchd (its own ovsdb and
run directory, so the fabric's daemons are not touched): ``--flows`` host
pairs send UDP across the whole chain (iperf, 1400-byte datagrams, offloads
off), and one more pair pings across it every 10 ms. Every switch egress
toward the next switch is shaped (HTB at 1 Gbit/s, head-drop leaf, so the
shaping is paid for but never binds), as in a fabric. Port types:

* ``system``: AF_PACKET ports, what fabric runs today; HTB on the port.
* ``afxdp-nonpmd``: AF_XDP ports (generic XDP on veth) polled by the main
  thread. AF_XDP transmits past the port's qdisc, so each link crosses a
  shaping hop: switch port -> veth into a link namespace -> a two-port Linux
  bridge -> a shaped veth -> the next switch. (tc ``mirred`` cannot be that
  hop: generic XDP ignores packets that mirred redirected, so they never
  reach the next switch's socket.)
* ``afxdp``: the same ports polled by one PMD thread on the last core, which
  sleeps up to ``--pmd-maxsleep`` microseconds when it finds little to do.

``--daemons`` spreads the chain's bridges over several ovs-vswitchd daemons
(one, a count, or ``per-bridge``; consecutive bridges share one), each with
its own ovsdb-server and run directory: a daemon then reads only its own
bridges' ports on each wake-up, and the daemons run on both cores. A second
userspace daemon cannot create the tap device named after the ``netdev``
datapath (``ovs-netdev``: EBUSY), so split chains run ``--enable-dummy``
daemons with ``datapath_type=dummy`` bridges: the same userspace datapath
code, whose only difference is a local port with no kernel device. Their
``system`` ports are real AF_PACKET ports.

Per offered rate it prints the packets carried and lost, packet-hops per
second, the CPU of ovs-vswitchd, of the iperf processes and of everything
else (kernel forwarding, shaping), and the ping RTT through the chain,
beside the idle RTT. Compare the port types at the same packet-hop rate.

Usage::

    sudo .venv/bin/python benchmarks/datapath.py [--ports system,afxdp-nonpmd,afxdp]
        [--hops 3] [--flows 16] [--kpps 3.7,7.3,14.7] [--seconds 10] [--pmd-maxsleep 200]
        [--daemons one,2,per-bridge]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fabric.emulation import runstate
from fabric.host import system

PREFIX = "dpb"  # every name this benchmark makes starts with it
LINK_NS = f"{PREFIX}-links"
SCHEMA = Path("/usr/share/openvswitch/vswitch.ovsschema")
PORT_TYPES = ("system", "afxdp-nonpmd", "afxdp")
PAYLOAD_BYTES = 1400
TRUNK_RATE = "1000mbit"  # shaped but never binding: the cost is what is measured
QUEUE_PKTS = 64
SYSCTLS = {"net.core.rmem_default": "8388608", "net.core.wmem_default": "4194304",
           "net.ipv6.conf.default.disable_ipv6": "1"}
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def daemon_count(daemons: str, hops: int) -> int:
    """How many ovs-vswitchd daemons ``--daemons`` asks for on a chain of ``hops``.

    Parameters
    ----------
    daemons : str
        ``one``, ``per-bridge`` or a count from 1 to ``hops``.
    hops : int
        Bridges in the chain.

    Raises
    ------
    ValueError
        For anything else.
    """
    if daemons == "one":
        return 1
    if daemons == "per-bridge":
        return hops
    if daemons.isdigit() and 1 <= int(daemons) <= hops:
        return int(daemons)
    raise ValueError(f"expected one, per-bridge or a count from 1 to {hops}, got {daemons!r}")


def daemon_of(bridge: int, hops: int, daemons: int) -> int:
    """The daemon that serves ``bridge`` (0-based) of a chain of ``hops`` shared by
    ``daemons``: consecutive bridges share one, so most hops stay within a daemon."""
    return bridge * daemons // hops


def run(*args: str, ns: str | None = None, env: dict | None = None,
        check: bool = True) -> str:
    """Run a command (in namespace ``ns``); return its stdout."""
    argv = (["ip", "netns", "exec", ns] if ns else []) + list(args)
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
    if check and proc.returncode:
        raise RuntimeError(f"{' '.join(argv)}: {proc.stderr.strip()}")
    return proc.stdout


class Chain:
    """The bridges, hosts and links of one measurement, and their removal."""

    def __init__(self, port_type: str, hops: int, flows: int, maxsleep_us: int,
                 daemons: str = "one") -> None:
        self.port_type, self.hops, self.flows = port_type, hops, flows
        self.maxsleep_us = maxsleep_us
        # one run directory (ovsdb-server + ovs-vswitchd) per daemon
        self.rundirs = [Path(tempfile.mkdtemp(prefix=f"{PREFIX}-ovs-"))
                        for _ in range(daemon_count(daemons, hops))]
        self.namespaces: list[str] = []
        self.root_devs: list[str] = []
        self.sysctls = {key: system.read_sysctl(key) for key in SYSCTLS}
        self.iperfs: list[subprocess.Popen] = []

    # -- building --------------------------------------------------------------------
    def env(self, bridge: str) -> dict[str, str]:
        """The environment that points OVS's tools at ``bridge``'s daemon."""
        k = int(bridge.removeprefix(f"{PREFIX}-br"))
        return _ovs_env(self.rundirs[daemon_of(k, self.hops, len(self.rundirs))])

    def vsctl(self, bridge: str, *args: str) -> str:
        return run("ovs-vsctl", "--timeout=20", *args, env=self.env(bridge))

    def ofctl(self, bridge: str, flow: str) -> None:
        run("ovs-ofctl", "add-flow", bridge, flow, env=self.env(bridge))

    def bridge(self, k: int) -> str:
        return f"{PREFIX}-br{k}"

    def build(self) -> None:
        for key, value in SYSCTLS.items():
            system.write_sysctl(key, value)
        for k in range(len(self.rundirs)):
            self._start_ovs(k)
        if self.port_type != "system":
            self._netns(LINK_NS)
        # a second userspace daemon cannot create the tap named after the netdev
        # datapath; the dummy datapath class is the same code with a dummy local port
        dp_type = "dummy" if len(self.rundirs) > 1 else "netdev"
        for k in range(self.hops):
            br = self.bridge(k)
            self.vsctl(br, "add-br", br, "--", "set", "bridge", br, f"datapath_type={dp_type}",
                       "fail-mode=secure")
        for k in range(self.hops - 1):
            self._trunk(k)
        pairs = [(f"{PREFIX}-a{i}", f"{PREFIX}-b{i}", f"10.0.{i}.1", f"10.0.{i}.2")
                 for i in range(self.flows + 1)]  # the last pair pings
        for a, b, ip_a, ip_b in pairs:
            port_a, port_b = self._host(a, ip_a, 0), self._host(b, ip_b, self.hops - 1)
            run("ip", "neigh", "add", ip_b, "lladdr", self._mac(b), "dev", "eth0", ns=a)
            run("ip", "neigh", "add", ip_a, "lladdr", self._mac(a), "dev", "eth0", ns=b)
            self._flows(port_a, ip_a, port_b, ip_b)
        for k in range(1, self.hops - 1):  # middle switches pass everything along
            self.ofctl(self.bridge(k), f"in_port=t{k - 1}b,actions=output:t{k}a")
            self.ofctl(self.bridge(k), f"in_port=t{k}a,actions=output:t{k - 1}b")
        time.sleep(1)
        run("ping", "-c", "3", "-i", "0.2", pairs[-1][3], ns=pairs[-1][0])

    def _start_ovs(self, k: int) -> None:
        """Start daemon k: its ovsdb-server and ovs-vswitchd."""
        d = self.rundirs[k]
        env = _ovs_env(d)
        run("ovsdb-tool", "create", str(d / "conf.db"), str(SCHEMA))
        run("ovsdb-server", str(d / "conf.db"), f"--remote=punix:{d}/db.sock",
            f"--pidfile={d}/ovsdb-server.pid", f"--unixctl={d}/ovsdb-server.ctl", "--detach",
            f"--log-file={d}/ovsdb-server.log", env=env)
        config = ["other_config:n-handler-threads=1", "other_config:n-revalidator-threads=1"]
        if self.port_type == "afxdp":
            last_core = 1 << (os.cpu_count() - 1)
            config += [f"other_config:pmd-cpu-mask={last_core:#x}",
                       f"other_config:pmd-maxsleep={self.maxsleep_us}"]
        run("ovs-vsctl", "--no-wait", "init", "--", "set", "Open_vSwitch", ".", *config, env=env)
        dummy = ["--enable-dummy"] if len(self.rundirs) > 1 else []
        run("ovs-vswitchd", f"unix:{d}/db.sock", f"--pidfile={d}/ovs-vswitchd.pid", "--detach",
            *dummy, f"--log-file={d}/ovs-vswitchd.log", env=env)

    def _netns(self, name: str) -> None:
        run("ip", "netns", "add", name)
        self.namespaces.append(name)
        run("ip", "link", "set", "lo", "up", ns=name)
        # no IPv6 chatter in the counted traffic
        run("sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1",
            "net.ipv6.conf.default.disable_ipv6=1", ns=name)

    def _veth(self, name: str, peer: str, peer_ns: str | None = None) -> None:
        run("ip", "link", "add", name, "type", "veth", "peer", "name", peer,
            *(["netns", peer_ns] if peer_ns else []))
        self.root_devs.append(name)

    def _up(self, dev: str, ns: str | None = None) -> None:
        run("ip", "link", "set", dev, "up", ns=ns)
        run("ethtool", "-K", dev, "tx", "off", "rx", "off", "tso", "off", "gso", "off", "gro",
            "off", ns=ns, check=False)

    def _shape(self, dev: str, rate: str, ns: str | None = None) -> None:
        run("tc", "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "1",
            ns=ns)
        run("tc", "class", "add", "dev", dev, "parent", "1:", "classid", "1:1", "htb", "rate",
            rate, "ceil", rate, ns=ns)
        run("tc", "qdisc", "add", "dev", dev, "parent", "1:1", "pfifo_head_drop", "limit",
            str(QUEUE_PKTS), ns=ns)

    def _bridge_hop(self, name: str, devs: tuple[str, str]) -> None:
        """A two-port Linux bridge in the link namespace joining ``devs``."""
        run("ip", "link", "add", name, "type", "bridge", ns=LINK_NS)
        for dev in devs:
            self._up(dev, LINK_NS)
            run("ip", "link", "set", dev, "master", name, ns=LINK_NS)
            run("bridge", "link", "set", "dev", dev, "learning", "off", ns=LINK_NS)
        run("ip", "link", "set", name, "up", ns=LINK_NS)

    def _add_port(self, bridge: str, dev: str) -> None:
        if self.port_type == "system":
            self.vsctl(bridge, "add-port", bridge, dev)
        else:
            self.vsctl(bridge, "add-port", bridge, dev, "--", "set", "interface", dev,
                       f"type={self.port_type}", "options:xdp-mode=generic", "options:n_rxq=1")

    def _trunk(self, k: int) -> None:
        """Link bridge k (port t{k}a) to bridge k+1 (port t{k}b); shape both egresses."""
        a, b = f"t{k}a", f"t{k}b"
        if self.port_type == "system":
            self._veth(a, b)
            self.root_devs.append(b)
            for dev in (a, b):
                self._up(dev)
                self._shape(dev, TRUNK_RATE)
        else:
            # root a <-> link-ns b, root b <-> link-ns a: link-ns device X transmits
            # what switch port X sent, so its qdisc is X's egress queue
            self._veth(a, b, LINK_NS)
            self._veth(b, a, LINK_NS)
            for dev in (a, b):
                self._up(dev)
            self._bridge_hop(f"t{k}x", (a, b))
            for dev in (a, b):
                self._shape(dev, TRUNK_RATE, LINK_NS)
        self._add_port(self.bridge(k), a)
        self._add_port(self.bridge(k + 1), b)

    def _host(self, host: str, ip: str, k: int) -> str:
        """Namespace ``host`` on bridge k; returns the switch port's name."""
        port = f"{PREFIX}-{host.rsplit('-', 1)[1]}"
        self._netns(host)
        if self.port_type == "system":
            self._veth(port, "eth0", host)
            self._up(port)
        else:  # the switch's egress toward the host crosses a hop too
            self._veth(port, f"{port}h", LINK_NS)
            run("ip", "link", "add", f"{port}g", "type", "veth", "peer", "name", "eth0",
                "netns", host, ns=LINK_NS)
            self._up(port)
            self._bridge_hop(f"{port}x", (f"{port}h", f"{port}g"))
        run("ip", "addr", "add", f"{ip}/16", "dev", "eth0", ns=host)
        self._up("eth0", host)
        self._add_port(self.bridge(k), port)
        return port

    def _mac(self, host: str) -> str:
        return run("ip", "-br", "link", "show", "eth0", ns=host).split()[2]

    def _flows(self, port_a: str, ip_a: str, port_b: str, ip_b: str) -> None:
        first, last = self.bridge(0), self.bridge(self.hops - 1)
        if self.hops == 1:
            self.ofctl(first, f"in_port={port_a},actions=output:{port_b}")
            self.ofctl(first, f"in_port={port_b},actions=output:{port_a}")
            return
        self.ofctl(first, f"in_port={port_a},actions=output:t0a")
        self.ofctl(first, f"ip,nw_dst={ip_a},actions=output:{port_a}")
        self.ofctl(last, f"in_port={port_b},actions=output:t{self.hops - 2}b")
        self.ofctl(last, f"ip,nw_dst={ip_b},actions=output:{port_b}")

    # -- measuring -------------------------------------------------------------------
    def measure(self, kpps: float, seconds: float) -> dict:
        """Offer ``kpps`` (all flows together) for ``seconds``; return the readings: rates
        and CPU over the measuring window, losses over the whole offer."""
        pairs = range(self.flows)
        ping_src, ping_dst = f"{PREFIX}-a{self.flows}", f"10.0.{self.flows}.2"
        sent0, got0 = self._counters()
        if kpps > 0:
            per_flow_bps = kpps * 1e3 / self.flows * PAYLOAD_BYTES * 8
            for i in pairs:
                self.iperfs.append(subprocess.Popen(
                    ["ip", "netns", "exec", f"{PREFIX}-b{i}", "iperf", "-s", "-u", "-l",
                     str(PAYLOAD_BYTES)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            time.sleep(0.5)
            for i in pairs:
                self.iperfs.append(subprocess.Popen(
                    ["ip", "netns", "exec", f"{PREFIX}-a{i}", "iperf", "-c", f"10.0.{i}.2", "-u",
                     "-l", str(PAYLOAD_BYTES), "-b", f"{per_flow_bps:.0f}", "-t",
                     str(int(seconds + 4))], stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL))
            time.sleep(2)
        ovs_pids = [int((d / "ovs-vswitchd.pid").read_text()) for d in self.rundirs]
        iperf_pids = [p.pid for p in self.iperfs]
        ovs0, iperf0, machine0 = _ticks(ovs_pids), _ticks(iperf_pids), _machine_ticks()
        iperf_pids = list(iperf0)  # those alive now
        window0 = self._counters()[0]
        start = time.monotonic()
        ping = run("ping", "-q", "-i", "0.01", "-c", str(int(seconds * 80)), ping_dst,
                   ns=ping_src, check=False)
        elapsed = time.monotonic() - start
        ovs1, iperf1, machine1 = _ticks(ovs_pids), _ticks(iperf_pids), _machine_ticks()
        window1 = self._counters()[0]
        self._stop_iperfs()
        time.sleep(1)
        sent1, got1 = self._counters()
        busy = (machine1[0] - machine0[0]) / max(machine1[1] - machine0[1], 1) * os.cpu_count()
        ovs_cores = _cores(ovs0, ovs1, elapsed)
        iperf_cores = _cores(iperf0, iperf1, elapsed)
        rtt = re.search(r"= [\d.]+/([\d.]+)/([\d.]+)/", ping)
        sent = sent1 - sent0
        return {"kpps_offered": kpps, "kpps_sent": (window1 - window0) / elapsed / 1e3,
                "packets_sent": sent, "lost": sent - (got1 - got0),
                "ovs_cores": ovs_cores, "iperf_cores": iperf_cores,
                "other_cores": busy - ovs_cores - iperf_cores,
                "rtt_avg_ms": float(rtt.group(1)) if rtt else None,
                "rtt_max_ms": float(rtt.group(2)) if rtt else None}

    def _counters(self) -> tuple[int, int]:
        """Packets the flows' senders sent and their receivers got, so far."""
        def count(host: str, key: str) -> int:
            return int(run("cat", f"/sys/class/net/eth0/statistics/{key}", ns=host))
        return (sum(count(f"{PREFIX}-a{i}", "tx_packets") for i in range(self.flows)),
                sum(count(f"{PREFIX}-b{i}", "rx_packets") for i in range(self.flows)))

    def _stop_iperfs(self) -> None:
        for proc in self.iperfs:
            proc.terminate()
        for proc in self.iperfs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.iperfs = []

    # -- removal ---------------------------------------------------------------------
    def remove(self) -> None:
        """Remove every daemon, namespace, device and setting this chain made."""
        self._stop_iperfs()
        for rundir in self.rundirs:
            for daemon in ("ovs-vswitchd", "ovsdb-server"):
                try:
                    pid = int((rundir / f"{daemon}.pid").read_text())
                except (OSError, ValueError):
                    continue
                system.kill_tree(pid, expect=daemon)
        for name in self.namespaces:
            run("ip", "netns", "del", name, check=False)
        # the root ends of links into namespaces went with them; trunks, taps remain
        leftovers = [dev for dev in self.root_devs + [self.bridge(k) for k in range(self.hops)]
                     + ["ovs-netdev"] if Path(f"/sys/class/net/{dev}").exists()]
        for dev in leftovers:
            run("ip", "link", "del", dev, check=False)
        for key, value in self.sysctls.items():
            system.write_sysctl(key, value)
        for rundir in self.rundirs:
            shutil.rmtree(rundir, ignore_errors=True)


def _ovs_env(rundir: Path) -> dict[str, str]:
    """The environment that points OVS's daemons and tools at ``rundir``."""
    return dict(os.environ, OVS_RUNDIR=str(rundir), OVS_LOGDIR=str(rundir),
                OVS_DBDIR=str(rundir))


def _ticks(pids: list[int]) -> dict[int, int]:
    """``{pid: utime + stime}`` for the ``pids`` still alive (a process's own stat
    counts all its threads, also those that ended)."""
    found = {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
        except OSError:
            continue
        found[pid] = int(fields[11]) + int(fields[12])
    return found


def _cores(before: dict[int, int], after: dict[int, int], seconds: float) -> float:
    """Cores the processes alive at both readings used in between."""
    ticks = sum(after[pid] - before[pid] for pid in before if pid in after)
    return ticks / CLOCK_TICKS / seconds


def _machine_ticks() -> tuple[int, int]:
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return sum(fields) - fields[3] - fields[4], sum(fields)


def check_machine() -> None:
    """Refuse to run beside a fabric, or where our names or OVS's datapath device exist."""
    system.preflight()
    for tool in ("iperf", "ovsdb-tool", "ovsdb-server", "ovs-vswitchd"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is missing: run scripts/setup.sh")
    live = [s for s in runstate.load_all() if system.running(s.owner_pid)]
    if live:
        raise SystemExit(f"a fabric run (pid {live[0].owner_pid}) is active: benchmarks run alone")
    if Path("/sys/class/net/ovs-netdev").exists():
        raise SystemExit("another ovs-vswitchd has a userspace datapath (device ovs-netdev): "
                         "stop it first (fabric clean; ovs-appctl -t ovs-vswitchd exit)")
    ours = [ns for ns in run("ip", "netns", "list").split() if ns.startswith(f"{PREFIX}-")]
    if ours:
        raise SystemExit(f"namespaces {', '.join(ours[:3])} exist: an earlier run was killed; "
                         f"remove them with `ip netns del`")


def _parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ports", default=",".join(PORT_TYPES),
                        help=f"port types to compare, of {', '.join(PORT_TYPES)}")
    parser.add_argument("--hops", type=int, default=3, help="switches in the chain (1-8)")
    parser.add_argument("--flows", type=int, default=16, help="UDP flows (1-64)")
    parser.add_argument("--kpps", default="3.7,7.3,14.7",
                        help="offered packet rates, thousands/s, all flows together")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--daemons", default="one",
                        help="ovs-vswitchd daemons to compare, comma-separated: one (for the "
                             "chain), per-bridge (each sweeps only its own ports) or a count "
                             "(consecutive bridges share one)")
    parser.add_argument("--pmd-maxsleep", type=int, default=200,
                        help="afxdp: microseconds the PMD thread may sleep (0-10000)")
    args = parser.parse_args()
    args.ports = args.ports.split(",")
    args.kpps = [float(k) for k in args.kpps.split(",")]
    bad = [p for p in args.ports if p not in PORT_TYPES]
    args.daemons = args.daemons.split(",")
    try:
        for daemons in args.daemons:
            daemon_count(daemons, args.hops)
    except ValueError as exc:
        parser.error(f"--daemons: {exc}")
    if bad or not 1 <= args.hops <= 8 or not 1 <= args.flows <= 64 \
            or not 0 <= args.pmd_maxsleep <= 10_000 or args.seconds < 1 \
            or any(not 0 <= k <= 200 for k in args.kpps):
        parser.error("unknown port type " + ", ".join(bad) if bad else
                     "--hops 1-8, --flows 1-64, --seconds >= 1, --kpps 0-200 each, "
                     "--pmd-maxsleep 0-10000")
    return args


def main() -> None:
    """Measure every port type at every rate and print one line per measurement."""
    args = _parse_args()
    check_machine()
    # a terminated benchmark removes what it made, as an interrupted one does
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    print(f"{args.hops} switches in a chain, {args.flows} UDP flows of {PAYLOAD_BYTES}-byte "
          f"datagrams, {os.cpu_count()} cores", flush=True)
    for port_type, daemons in itertools.product(args.ports, args.daemons):
        chain = Chain(port_type, args.hops, args.flows, args.pmd_maxsleep, daemons)
        try:
            chain.build()
            idle = chain.measure(0, min(args.seconds, 3))
            label = port_type + (f" (maxsleep {args.pmd_maxsleep} us)"
                                 if port_type == "afxdp" else "") + f", {daemons} daemon(s)"
            print(f"{label}: idle RTT {idle['rtt_avg_ms']} ms", flush=True)
            for kpps in args.kpps:
                r = chain.measure(kpps, args.seconds)
                print(f"  {kpps:5.1f} kpps offered: {r['kpps_sent'] * args.hops:5.1f} k "
                      f"packet-hops/s, "
                      f"lost {r['lost'] / max(r['packets_sent'], 1):6.2%}; cores: ovs "
                      f"{r['ovs_cores']:.2f}, iperf {r['iperf_cores']:.2f}, other "
                      f"{r['other_cores']:.2f}; RTT avg {r['rtt_avg_ms']} max "
                      f"{r['rtt_max_ms']} ms", flush=True)
                print("    " + json.dumps({"port_type": port_type, "daemons": daemons, **r}),
                      file=sys.stderr)
        finally:
            chain.remove()


if __name__ == "__main__":
    main()
