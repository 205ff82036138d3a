"""The fidelity checks' arithmetic and the OVS socket backlog reader (pure code)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time

import pytest

from fabric.emulation import backlog, fidelity, ovs

PROC_NET_PACKET = """\
sk               RefCnt Type Proto  Iface R Rmem   User   Inode
0000000000000001 3      3    0003   12    1 2304   0      5001
0000000000000002 3      3    0003   13    1 832    0      5002
0000000000000003 3      3    0003   0     0 9999   0      5003
0000000000000004 3      3    0003   14    1 4608   0      7777
"""


def test_backlog_sums_bound_sockets_of_the_process_only():
    # 5003 is the process's unbound send socket, 7777 another process's socket
    assert backlog.packet_socket_backlog({5001, 5002, 5003}, PROC_NET_PACKET) == 2304 + 832
    assert backlog.packet_socket_backlog(set(), PROC_NET_PACKET) == 0


def _sampler(tmp_path) -> subprocess.Popen:
    source = tmp_path / "packet"
    source.write_text(PROC_NET_PACKET)
    return subprocess.Popen([*backlog.command(sys.executable, {5002, 5001}, 0.01),
                             "--source", str(source)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def test_the_sampler_process_samples_from_go_until_its_input_closes(tmp_path):
    sampler = _sampler(tmp_path)
    time.sleep(0.2)  # armed: it waits
    go = time.monotonic()
    sampler.stdin.write("go\n")
    sampler.stdin.flush()
    time.sleep(0.3)
    out, _ = sampler.communicate(timeout=10)
    most = (time.monotonic() - go) / 0.01 + 1  # one per 10 ms, one at go
    found = json.loads(out)
    assert sampler.returncode == 0 and 1 <= found["samples"] <= most
    assert found["total"] == found["samples"] * (2304 + 832)


def test_a_sampler_closed_before_go_took_no_sample(tmp_path):
    out, _ = _sampler(tmp_path).communicate(timeout=10)
    assert json.loads(out) == {"samples": 0, "total": 0}


def test_truesize_matches_the_kernels_accounting_of_data_and_acks():
    assert fidelity.truesize_bytes(1514, 1) == pytest.approx(2304, rel=0.01)
    assert fidelity.truesize_bytes(60, 1) == pytest.approx(832, rel=0.01)
    # measured into an AF_PACKET socket on veth: power-of-two slabs, not linear
    assert fidelity.frame_truesize(1514) == 2304
    assert fidelity.frame_truesize(4154) == 8448
    assert fidelity.truesize_bytes(4154, 1, frame_bytes=4154) == pytest.approx(8448)
    assert fidelity.truesize_bytes(60, 1, frame_bytes=4154) == pytest.approx(832)


def test_a_run_of_jumbo_frames_converts_its_arrivals_with_their_truesize():
    # 1000 frames of 4154 bytes/s, one frame (8448 bytes of skb memory) queued: 1 ms
    check = fidelity.input_delay_check(8448.0, 4154 * 1000, 1000, 1.0, frame_bytes=4154)
    assert check.value == pytest.approx(1.0, rel=0.001)


def test_input_delay_is_littles_law_in_one_unit():
    # 1000 full frames/s arrive; half a frame queued on average: 0.5 ms wait
    check = fidelity.input_delay_check(1152.0, rx_bytes=1514 * 1000, rx_packets=1000,
                                       elapsed_s=1.0)
    assert check.value == pytest.approx(0.5, rel=0.01) and check.ok
    slow = fidelity.input_delay_check(3 * 2304.0, 1514 * 1000, 1000, 1.0)
    assert slow.value == pytest.approx(3.0, rel=0.01) and not slow.ok


def test_no_traffic_means_no_delay():
    assert fidelity.input_delay_check(0.0, 0, 0, 1.0).value == 0.0
    assert fidelity.input_delay_check(0.0, 0, 0, 0.0).ok


def test_input_delay_limit_is_a_millisecond_or_a_tenth_of_a_packet_time():
    """1 ms down to 1.2 Mbit/s hosts (a 1500-byte packet takes 10 ms there), then a
    tenth of a packet time: 2.4 ms at 0.5 Mbit/s."""
    assert fidelity.input_delay_limit_ms(None) == 1.0
    assert fidelity.input_delay_limit_ms(12000 / 3e6) == 1.0      # 3 Mbit/s: 4 ms
    assert fidelity.input_delay_limit_ms(12000 / 1.2e6) == 1.0    # 10 ms
    assert fidelity.input_delay_limit_ms(12000 / 0.5e6) == pytest.approx(2.4)
    # 2 ms of waiting: a fifth of a packet time at 0.5 Mbit/s, half of one at 3
    slow_hosts = fidelity.input_delay_check(2 * 2304.0, 1514 * 1000, 1000, 1.0,
                                            packet_time_s=12000 / 0.5e6)
    assert slow_hosts.threshold == pytest.approx(2.4) and slow_hosts.ok
    assert not fidelity.input_delay_check(2 * 2304.0, 1514 * 1000, 1000, 1.0,
                                          packet_time_s=12000 / 3e6).ok


def test_tcp_segments_larger_than_a_1500_byte_mtus_make_a_run_invalid():
    assert fidelity.tcp_segment_check([1448, 1448, 1000]).ok
    jumbo = fidelity.tcp_segment_check([1448, 8948])
    assert not jumbo.ok and jumbo.value == 8948 and jumbo.threshold == 1448
    assert fidelity.tcp_segment_check([]).ok  # nothing sent, nothing to judge


def test_the_sockets_ports_are_named_by_their_interface_index():
    text = PROC_NET_PACKET.replace("   12    1 2304", "   1     1 2304")  # ifindex 1: lo
    assert ovs.packet_socket_devices({5001, 5003}, text) == {"lo"}  # 5003 is unbound
    assert ovs.packet_socket_devices(set(), text) == set()


def _monitored(monkeypatch: pytest.MonkeyPatch, ports_read: set[str], samples: int,
               total: float = 0.0) -> fidelity.Check:
    """The input-delay check of a monitor whose ovs-vswitchd has sockets on
    ``ports_read`` and whose sampler took ``samples`` samples summing to ``total``."""
    monkeypatch.setattr(ovs, "vswitchd_pid", lambda: None)
    monkeypatch.setattr(ovs, "packet_sockets", lambda: [])
    monkeypatch.setattr(ovs, "packet_socket_devices", lambda inodes: ports_read)
    monkeypatch.setattr(fidelity, "switch_rx", lambda devices: (0, 0))
    monkeypatch.setattr(fidelity.FidelityMonitor, "_sampled", lambda self: (samples, total))
    monitor = fidelity.FidelityMonitor(["s0-eth1", "s0-eth2"])
    monitor.start()
    time.sleep(0.2)  # 40 samples due
    return {c.name: c for c in monitor.stop()}["ovs_input_delay_ms"]


def test_input_delay_without_a_socket_on_every_port_is_no_verdict(monkeypatch):
    check = _monitored(monkeypatch, {"s0-eth1"}, samples=1000)
    assert not check.ok and math.isnan(check.value)
    assert "1 of 2 switch ports (s0-eth2)" in check.detail
    # reported as null, never as a delay of 0
    assert fidelity.report([check])["checks"][0]["value"] is None


def test_input_delay_from_a_starved_sampler_is_no_verdict(monkeypatch):
    check = _monitored(monkeypatch, {"s0-eth1", "s0-eth2"}, samples=1)
    assert not check.ok and math.isnan(check.value) and "sampler" in check.detail


def test_input_delay_with_every_port_read_and_samples_is_a_verdict(monkeypatch):
    check = _monitored(monkeypatch, {"s0-eth1", "s0-eth2"}, samples=1000)
    assert check.ok and check.value == 0.0  # nothing arrived, nothing waited
    assert "1000 samples of" in check.detail


def test_agent_lateness_is_the_share_of_the_nics_sending_time_lost():
    agents = [{"roce": {"pacer_busy_s": 9.0, "pacer_late_s": 0.1}},
              {"roce": {"pacer_busy_s": 0.8, "pacer_late_s": 0.1}},
              {"roce": {}}, {"transfers": []}]
    check = fidelity.agent_lateness_check(agents)
    assert check.value == pytest.approx(0.2 / 10.0) and check.ok  # at the limit
    late = fidelity.agent_lateness_check([{"roce": {"pacer_busy_s": 9.0,
                                                    "pacer_late_s": 0.3}}])
    assert late.value == pytest.approx(0.3 / 9.3, abs=1e-4) and not late.ok
    assert fidelity.agent_lateness_check([{"roce": {}}, {}]) is None  # no roce sending


def test_a_timeout_in_a_lossless_class_with_nothing_lost_is_a_defect():
    from fabric.emulation.fidelity import Check, lossless_timeout_check

    agents = [{"transfers": [
        {"role": "send", "dscp": 26, "rto_count": 2},
        {"role": "send", "dscp": 0, "rto_count": 5},  # a lossy class: its own business
        {"role": "recv", "dscp": 26}]}]
    clean = [Check("lossless_drops", 0, 0, True), Check("ovs_send_drops", 0, 0, True)]
    check = lossless_timeout_check(agents, (26,), clean)
    assert (check.name, check.value, check.ok) == ("lossless_timeouts", 2, False)
    assert "spurious" in check.detail
    lost = clean + [Check("hidden_socket_drops", 3, 0, False)]
    assert lossless_timeout_check(agents, (26,), lost).ok  # maybe the repair of a loss
    assert lossless_timeout_check(agents, (10,), clean).value == 0


def test_timeouts_in_a_deadlock_or_after_watchdog_drops_are_not_spurious():
    from fabric.emulation.fidelity import lossless_timeout_check
    from fabric.traffic.result import Check

    agents = [{"transfers": [{"role": "send", "dscp": 26, "rto_count": 3}]}]
    assert not lossless_timeout_check(agents, [26], []).ok
    assert lossless_timeout_check(agents, [26], [Check("pfc_deadlocks", 1, None, True)]).ok
    assert lossless_timeout_check(agents, [26], [Check("watchdog_drops", 5, None, True)]).ok
