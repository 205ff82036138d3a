"""Mininet's network and switch classes as fabric runs them (Mininet imported lazily).

Two fixes for Mininet's CLI on these machines:

* ``dpctl`` runs ``ovs-ofctl``, which speaks OpenFlow 1.0 unless told; the
  bridges speak 1.3 and 1.5 only, so every ``dpctl`` command failed.
* ``iperf`` waited for the server's second ``.../sec`` line, the first one
  coming from its telnet probe; iperf 2.1 prints none for a connection that
  sends nothing, so every TCP test hung (Mininet issue #1060). Here readiness
  is read with ``ss`` in the server's namespace, and no ``killall -9 iperf``
  reaches processes outside the two hosts.
"""

from __future__ import annotations

import functools
import subprocess
import time
from typing import Any

IPERF_START_TIMEOUT_S = 10.0


@functools.cache
def switch_class() -> type:
    """OVSSwitch whose ``dpctl`` speaks OpenFlow 1.5 and whose bridge names its run.

    The switch parameter ``fabric_run`` goes into the bridge's external_ids,
    so ``fabric clean`` finds the bridge even when the run's state is gone.
    """
    from mininet.node import OVSSwitch

    from fabric.emulation.ovs import RUN_TAG

    class FabricSwitch(OVSSwitch):
        def bridgeOpts(self) -> str:
            run = self.params.get("fabric_run")
            return super().bridgeOpts() + (f" external_ids:{RUN_TAG}={run}" if run else "")

        def dpctl(self, *args: str) -> str:
            return self.cmd("ovs-ofctl", "-O", "OpenFlow15", args[0], self, *args[1:])

    return FabricSwitch


@functools.cache
def network_class() -> type:
    """Mininet whose ``iperf`` (the CLI's ``iperf`` and ``iperfudp``) works with iperf 2.1."""
    from mininet.log import output
    from mininet.net import Mininet

    class FabricNet(Mininet):
        def iperf(self, hosts: Any = None, l4Type: str = "TCP", udpBw: str = "10M",
                  fmt: str | None = None, seconds: int = 5, port: int = 5001) -> list[str]:
            client, server = hosts or (self.hosts[0], self.hosts[-1])
            if l4Type not in ("TCP", "UDP"):
                raise ValueError(f"unexpected l4 type: {l4Type}")
            output(f"*** Iperf: testing {l4Type} bandwidth between {client} and {server}\n")
            udp = l4Type == "UDP"
            args = f"iperf -p {int(port)} " + ("-u " if udp else "") + (f"-f {fmt} " if fmt
                                                                         else "")
            server.sendCmd(args + "-s")
            if not _listening(server, int(port), udp):
                server.sendInt()
                server.waitOutput()
                raise RuntimeError(f"iperf did not start on {server} port {port}")
            cliout = client.cmd(args + f"-t {int(seconds)} -c {server.IP()} "
                                + (f"-b {udpBw}" if udp else ""))
            servout = ""
            deadline = time.monotonic() + seconds + 10
            while "/sec" not in servout and time.monotonic() < deadline:
                servout += server.monitor(timeoutms=1000)
            server.sendInt()
            servout += server.waitOutput()
            result = [self._parseIperf(servout), self._parseIperf(cliout)]
            if udp:
                result.insert(0, udpBw)
            output(f"*** Results: {result}\n")
            return result

    return FabricNet


def _listening(host: Any, port: int, udp: bool) -> bool:
    """Whether something listens on ``port`` in ``host``'s namespace (its shell is busy)."""
    deadline = time.monotonic() + IPERF_START_TIMEOUT_S
    while time.monotonic() < deadline:
        probe = host.popen(["ss", "-Hln" + ("u" if udp else "t"), f"sport = :{port}"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        out, _ = probe.communicate(timeout=5)
        if out.strip():
            return True
        time.sleep(0.05)
    return False
