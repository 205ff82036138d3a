"""Evidence that an emulation run was not CPU-bound and lost nothing unseen.

Checks, each with its measured value and threshold:

* ``ovs_input_delay_ms``: how long packets wait in ovs-vswitchd's receive
  sockets: the mean sampled backlog over the rate at which the switch
  ports receive (Little's law). At most 1 ms, or a tenth of a full-size
  packet's time on a host link where that is longer (below 1.2 Mbit/s). The kernel accounts the backlog in skb
  truesize (a 1514-byte frame takes 2304 bytes, a 4154-byte one 8448, a
  60-byte ACK 832: power-of-two slabs), so the arrival rate is converted to the
  same unit, knowing the run's full-size frame. The backlog is sampled every
  5 ms from /proc/net/packet (by :mod:`fabric.emulation.backlog`, a process of its
  own): a light run carries only a few hundred
  packets in bursts of a few ms, and at 20 ms one sample that happened to
  land on a burst could double its estimate (measured: docs/benchmarks.md,
  "Sampling the OVS backlog"). A datapath that keeps up drains them every
  loop; one that falls behind lets them fill, delaying and then dropping packets
  unseen. (The busiest ovs-vswitchd thread's CPU share is reported too, but
  is no verdict: the userspace datapath polls its sockets busily and shows
  near 100 % with a single 20 Mbit/s flow.)
  No verdict without evidence: when ovs-vswitchd's sockets were not found on
  every switch port, or the sampler took fewer than a quarter of its samples,
  the check fails with no value.
* ``machine_cpu``: share of all cores busy (agents, shaping and OVS compete);
* ``agent_late_share`` (roce runs, added by the traffic runner): the share of
  the NICs' sending time lost because an agent sent later than its pacer had
  planned, with the NIC's queue already empty: the agent waited for a CPU, so
  the link idled for the emulator's sake, not the transport's. At most 2 %.
* ``late_pause_drops`` (flow-control runs, added by the traffic runner): drops at a
  full headroom on a link whose pause came later than the headroom covers (its
  modelled reaction and the frames in flight, with 2 packet times to spare,
  ``spare_headroom_pkts``): the machine ran the flow-control daemon late. They are
  counted here, not in ``lossless_drops`` (the fabric's correctness).
* ``lossless_timeouts`` (roce runs under flow control, added by the traffic runner):
  retransmission timeouts of queue pairs in lossless classes while nothing was lost
  and no deadlock formed: spurious (the timeout floor of a lossless class covers what
  its path's buffers hold);
* ``watchdog_drops`` and ``pfc_deadlocks`` (flow-control runs): what the watchdog
  dropped after it released a pause, and the deadlocks the run-time detector saw
  (:mod:`fabric.emulation.deadlock_watch`). Both are the fabric's behaviour, reported
  beside the checks and never a defect of the run;
* ``hidden_socket_drops``: drops counted by the kernel on ovs-vswitchd's
  packet sockets, which no OVS counter shows;
* ``ovs_send_drops``: packets ovs-vswitchd dropped because its one send socket was
  full (its log says so, no counter does); the bring-up sizes that socket to hold
  every switch queue full (:mod:`fabric.emulation.send_buffer`), so this is 0;
* ``idle_path_rate`` (added by the traffic runner): goodput of one flow on
  an idle path over its configured rate;
* ``tcp_segment_bytes`` (TCP runs, added by the traffic runner): the largest
  segment a connection sent, at most a 1500-byte MTU's 1448 bytes although the
  links carry jumbo frames.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterable

from fabric.emulation import backlog, ovs
from fabric.emulation.shaping import DEFAULT_FRAME_BYTES
from fabric.traffic.model import TCP_SEGMENT_BYTES
from fabric.traffic.result import Check, report  # noqa: F401  (defined there, for both backends)

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
MAX_OVS_INPUT_DELAY_MS = 1.0  # against idle RTTs of 0.7-3 ms across the fabric
# ... or this share of a full-size packet's time on a host link, if that is longer:
# what the emulated dynamics see is the delay in packet times, and below 1.2 Mbit/s
# (large fabrics) a millisecond is less than a tenth of one
INPUT_DELAY_PACKET_SHARE = 0.1
BACKLOG_SAMPLE_S = 0.005
# skb truesize of received frames (measured on veth into an AF_PACKET socket, as
# ovs-vswitchd reads its ports): the kernel allocates a frame's data with its headroom
# and shared info (~384 bytes) in a power-of-two slab, plus ~256 bytes of sk_buff. A
# 60-byte ACK takes 832, a 1514-byte frame 2304-2391, a 4154-byte one 8448-9024.
SMALL_FRAME_BYTES, SMALL_FRAME_TRUESIZE = 60, 832
SKB_DATA_EXTRA_BYTES = 384
SKB_STRUCT_BYTES = 256
# the sampler must have taken at least this share of its samples for a verdict: fewer
# is a sample every 20 ms or more, too coarse for runs' millisecond bursts (see above)
MIN_SAMPLE_SHARE = 0.25
MAX_MACHINE_CPU = 0.95
MAX_AGENT_LATE_SHARE = 0.02
MIN_IDLE_PATH_RATE = 0.90


def thread_cpu_ticks(pid: int) -> dict[int, int]:
    """``{thread id: utime + stime ticks}`` of every thread of ``pid``."""
    ticks = {}
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            fields = (task / "stat").read_text().rsplit(") ", 1)[1].split()
            ticks[int(task.name)] = int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            continue
    return ticks


def machine_ticks() -> tuple[int, int, int]:
    """(busy, total, softirq) jiffies of all CPUs from /proc/stat."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return sum(fields) - idle, sum(fields), fields[6] if len(fields) > 6 else 0


def switch_rx(devices: list[str]) -> tuple[int, int]:
    """(bytes, packets) the switch ports (root-namespace veths) have received."""
    nbytes = packets = 0
    for dev in devices:
        stats = Path(f"/sys/class/net/{dev}/statistics")
        try:
            nbytes += int((stats / "rx_bytes").read_text())
            packets += int((stats / "rx_packets").read_text())
        except (OSError, ValueError):
            continue
    return nbytes, packets


def frame_truesize(frame_bytes: int) -> int:
    """Receive memory one frame of ``frame_bytes`` takes in a socket (power-of-two slab)."""
    return (1 << (frame_bytes + SKB_DATA_EXTRA_BYTES - 1).bit_length()) + SKB_STRUCT_BYTES


def truesize_bytes(nbytes: int, packets: int, frame_bytes: int = DEFAULT_FRAME_BYTES) -> float:
    """Receive memory ``packets`` frames totalling ``nbytes`` take in a socket, when
    they are full-size frames of ``frame_bytes`` and small ACKs: linear between the
    two, since only the totals are known."""
    per_byte = ((frame_truesize(frame_bytes) - SMALL_FRAME_TRUESIZE)
                / (frame_bytes - SMALL_FRAME_BYTES))
    return packets * (SMALL_FRAME_TRUESIZE - SMALL_FRAME_BYTES * per_byte) + nbytes * per_byte


def input_delay_limit_ms(packet_time_s: float | None) -> float:
    """The input-delay threshold for hosts whose full-size packet takes
    ``packet_time_s`` (None: unknown, the absolute limit)."""
    share = INPUT_DELAY_PACKET_SHARE * packet_time_s * 1e3 if packet_time_s else 0.0
    return max(MAX_OVS_INPUT_DELAY_MS, round(share, 3))


def input_delay_check(mean_backlog: float, rx_bytes: int, rx_packets: int,
                      elapsed_s: float, packet_time_s: float | None = None,
                      frame_bytes: int = DEFAULT_FRAME_BYTES) -> Check:
    """Mean wait in OVS's receive sockets by Little's law, in consistent units.

    Parameters
    ----------
    mean_backlog : float
        Mean sampled receive memory queued on the sockets (truesize bytes).
    rx_bytes, rx_packets : int
        What the switch ports received over the run.
    elapsed_s : float
        Length of the run.
    packet_time_s : float, optional
        A full-size packet's time on a host link (sets the threshold, see
        :func:`input_delay_limit_ms`).
    frame_bytes : int
        Wire bytes of the run's full-size frames (converts the arrivals to
        truesize, :func:`truesize_bytes`).
    """
    elapsed_s = max(elapsed_s, 1e-6)
    arrivals = truesize_bytes(rx_bytes, rx_packets, frame_bytes) / elapsed_s
    delay_ms = mean_backlog / arrivals * 1e3 if arrivals > 0 else 0.0
    limit = input_delay_limit_ms(packet_time_s)
    return Check("ovs_input_delay_ms", round(delay_ms, 3), limit, delay_ms <= limit,
                 f"mean backlog {mean_backlog:.0f} bytes of skb memory while the switches "
                 f"received {rx_bytes * 8 / elapsed_s / 1e6:.1f} Mbit/s in "
                 f"{rx_packets / elapsed_s:.0f} packets/s")


def unmeasured_input_delay(reason: str, packet_time_s: float | None = None) -> Check:
    """The input-delay check failed for want of evidence (``reason``): no value."""
    return Check("ovs_input_delay_ms", math.nan, input_delay_limit_ms(packet_time_s), False,
                 f"not measured: {reason}")


class FidelityMonitor:
    """Measure OVS input backlog, CPU and hidden drops between start and stop.

    Parameters
    ----------
    switch_ports : list of str
        The switches' interfaces, whose receive rate OVS must sustain.
    packet_time_s : float, optional
        A full-size packet's time on a host link (the input-delay threshold
        grows with it below 1.2 Mbit/s).
    frame_bytes : int
        Wire bytes of the run's full-size frames.
    """

    def __init__(self, switch_ports: list[str], packet_time_s: float | None = None,
                 frame_bytes: int = DEFAULT_FRAME_BYTES) -> None:
        self.switch_ports = switch_ports
        self.packet_time_s, self.frame_bytes = packet_time_s, frame_bytes
        self.checks: list[Check] = []
        self._t0 = 0.0
        self._ovs_pid: int | None = None
        self._threads0: dict[int, int] = {}
        self._machine0 = (0, 0, 0)
        self._drops0 = 0
        self._log0: int | None = None
        self._rx0 = (0, 0)
        self._ports_read: set[str] = set()  # switch ports with a socket of ovs-vswitchd
        self._sampler: subprocess.Popen | None = None

    def arm(self) -> None:
        """Find ovs-vswitchd's sockets and start the backlog sampler, which waits for
        :meth:`start`: call it before the traffic's processes start, or the sampler
        starts up beside them and misses the beginning."""
        self._ovs_pid = ovs.vswitchd_pid()
        inodes = ovs.socket_inodes(self._ovs_pid) if self._ovs_pid else set()
        self._ports_read = ovs.packet_socket_devices(inodes)
        if inodes:
            # its own process: see fabric.emulation.backlog for why not a thread
            self._sampler = subprocess.Popen(
                backlog.command(sys.executable, inodes, BACKLOG_SAMPLE_S),
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                start_new_session=True)

    def start(self) -> None:
        """Take the first readings and start sampling the socket backlog (arming the
        monitor first if :meth:`arm` was not called)."""
        if self._ovs_pid is None:
            self.arm()
        self._t0 = time.monotonic()
        if self._sampler is not None:
            assert self._sampler.stdin is not None  # arm() starts it with stdin=PIPE
            try:
                self._sampler.stdin.write(b"go\n")
                self._sampler.stdin.flush()
            except OSError:
                pass  # it died: no samples, no verdict (stop)
        self._rx0 = switch_rx(self.switch_ports)
        self._threads0 = thread_cpu_ticks(self._ovs_pid) if self._ovs_pid else {}
        self._machine0 = machine_ticks()
        # last: it runs `ss`, which under load takes up to a second
        self._drops0 = sum(s.drops for s in ovs.packet_sockets())
        self._log0 = ovs.vswitchd_log_size() if self._ovs_pid else None

    def _sampled(self) -> tuple[int, float]:
        """End the sampler; return its number of samples and their sum (0, 0 without)."""
        if self._sampler is None:
            return 0, 0.0
        try:
            out, _ = self._sampler.communicate(timeout=10)  # closes its input: it ends
            found = json.loads(out)
            return int(found["samples"]), float(found["total"])
        except (subprocess.TimeoutExpired, ValueError, KeyError, TypeError):
            return 0, 0.0
        finally:
            self.close()

    def close(self) -> None:
        """Stop the sampler if it still runs (a run that failed before :meth:`stop`)."""
        if self._sampler is not None:
            if self._sampler.poll() is None:
                self._sampler.kill()
                self._sampler.wait()
            for pipe in (self._sampler.stdin, self._sampler.stdout):
                assert pipe is not None  # arm() starts it with both pipes
                pipe.close()
            self._sampler = None

    def stop(self) -> list[Check]:
        """Take the second readings and return the checks."""
        samples, total = self._sampled()
        elapsed = max(time.monotonic() - self._t0, 1e-6)
        checks = []
        rx_bytes, rx_packets = (now - before for now, before
                                in zip(switch_rx(self.switch_ports), self._rx0))
        missing = sorted(set(self.switch_ports) - self._ports_read)
        expected = elapsed / BACKLOG_SAMPLE_S
        if missing:
            checks.append(unmeasured_input_delay(
                f"no ovs-vswitchd socket on {len(missing)} of {len(self.switch_ports)} switch "
                f"ports ({', '.join(missing[:3])})", self.packet_time_s))
        elif samples < max(1.0, MIN_SAMPLE_SHARE * expected):
            checks.append(unmeasured_input_delay(
                f"{samples} backlog samples of {expected:.0f} (the sampler waited for a "
                f"CPU)", self.packet_time_s))
        else:
            check = input_delay_check(total / samples, rx_bytes, rx_packets, elapsed,
                                      self.packet_time_s, self.frame_bytes)
            checks.append(replace(check, detail=f"{check.detail}; {samples} samples of "
                                                f"{expected:.0f}"))
        if self._ovs_pid:
            threads1 = thread_cpu_ticks(self._ovs_pid)
            used = {t: threads1[t] - self._threads0.get(t, 0) for t in threads1}
            share = max(used.values(), default=0) / CLOCK_TICKS / elapsed
            checks.append(Check("ovs_busiest_thread", round(share, 3), 1.0, True,
                                "CPU share of one core (informational: the datapath polls)"))
            checks.append(Check("ovs_cpu_cores", round(sum(used.values()) / CLOCK_TICKS
                                                       / elapsed, 3), float(os.cpu_count() or 1),
                                True, "all ovs-vswitchd threads (informational)"))
        busy1, total1, softirq1 = machine_ticks()
        busy = (busy1 - self._machine0[0]) / max(total1 - self._machine0[1], 1)
        checks.append(Check("softirq_cores", round((softirq1 - self._machine0[2]) / CLOCK_TICKS
                                                   / elapsed, 3), float(os.cpu_count() or 1),
                            True, "kernel packet processing in softirq (informational)"))
        checks.append(Check("machine_cpu", round(busy, 3), MAX_MACHINE_CPU,
                            busy <= MAX_MACHINE_CPU, f"{os.cpu_count()} cores"))
        drops = sum(s.drops for s in ovs.packet_sockets()) - self._drops0
        checks.append(Check("hidden_socket_drops", drops, 0, drops == 0,
                            "kernel drops on ovs-vswitchd packet sockets"))
        if self._log0 is not None:
            sent = ovs.send_drops_logged(ovs.vswitchd_log_since(self._log0))
            checks.append(Check("ovs_send_drops", sent, 0, sent == 0,
                                "packets ovs-vswitchd could not send (its send socket was "
                                "full) and dropped uncounted, from its log"))
        self.checks = checks
        return checks


# the checks whose values count packets the fabric or the emulator lost
LOSS_CHECKS = ("lossless_drops", "late_pause_drops", "hidden_socket_drops", "ovs_send_drops",
               "watchdog_drops")


def lossless_timeout_check(agents: Iterable[dict[str, Any]], lossless_dscps: Iterable[int],
                           checks: Iterable[Check]) -> Check:
    """The retransmission timeouts of roce queue pairs in lossless classes: with nothing
    lost (``checks``' :data:`LOSS_CHECKS` all 0) and no deadlock (``pfc_deadlocks``)
    each was spurious, a defect of the run (a paused packet is late, not lost); with a
    loss they may be its repair, in a deadlock nothing arrives at all."""
    classes = set(lossless_dscps)
    checks = list(checks)
    timeouts = sum(record.get("rto_count") or 0 for agent in agents
                   for record in agent.get("transfers", [])
                   if record.get("role") == "send" and record.get("dscp") in classes)
    lost = sum(c.value or 0 for c in checks if c.name in LOSS_CHECKS)
    deadlocks = sum(c.value or 0 for c in checks if c.name == "pfc_deadlocks")
    why = (f" ({lost:g} packets lost: maybe their repair)" if lost else
           f" ({deadlocks:g} deadlocks: nothing could arrive)" if deadlocks else
           ", nothing lost: spurious")
    return Check("lossless_timeouts", timeouts, 0, timeouts == 0 or lost > 0 or deadlocks > 0,
                 "retransmission timeouts in lossless classes" + why)


def agent_lateness_check(agents: Iterable[dict[str, Any]]) -> Check | None:
    """The share of the NICs' sending time lost to the agents' lateness (``roce`` totals
    ``pacer_late_s`` and ``pacer_busy_s`` of each agent's result); None without roce
    sending."""
    busy = late = 0.0
    for agent in agents:
        roce = agent.get("roce") or {}
        busy += roce.get("pacer_busy_s", 0.0)
        late += roce.get("pacer_late_s", 0.0)
    if busy <= 0:
        return None
    share = late / (busy + late)
    return Check("agent_late_share", round(share, 4), MAX_AGENT_LATE_SHARE,
                 share <= MAX_AGENT_LATE_SHARE,
                 f"{late * 1e3:.0f} ms of {busy + late:.1f} s of NIC sending time idle while "
                 f"an agent waited for a CPU")


def idle_path_check(achieved_mbps: float, configured_mbps: float) -> Check:
    """Goodput of one flow on an idle path against the configured rate."""
    ratio = achieved_mbps / configured_mbps if configured_mbps else 0.0
    return Check("idle_path_rate", round(ratio, 3), MIN_IDLE_PATH_RATE,
                 ratio >= MIN_IDLE_PATH_RATE,
                 f"{achieved_mbps:.2f} of {configured_mbps:.2f} Mbit/s")


def tcp_segment_check(segment_bytes: Iterable[int]) -> Check:
    """TCP's largest segment against a 1500-byte MTU's, which the hosts' routes
    advertise: a larger one means a route lost that and TCP ran on jumbo frames."""
    largest = max(segment_bytes, default=0)
    return Check("tcp_segment_bytes", largest, TCP_SEGMENT_BYTES, largest <= TCP_SEGMENT_BYTES,
                 "largest data bytes per segment a connection sent")
