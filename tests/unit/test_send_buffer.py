"""The OVS send buffer holds every switch queue of the fabric full at once."""

import topologies
from fabric.emulation.ovs import send_drops_logged, vswitchd_log_since, vswitchd_log_size
from fabric.emulation.send_buffer import (MAX_SEND_BUFFER_BYTES, MIN_SEND_BUFFER_BYTES,
                                          fabric_queue_packets, send_buffer_bytes)
from fabric.model import graph as fg
from fabric.model.flowcontrol import FlowControl
from fabric.model.lanes import SINGLE_LANE
from fabric.model.presets import RDMA_LOSSLESS


def _ports(graph):
    return sum(graph.degree(s) for s in fg.switches(graph))


def test_lossy_lanes_hold_a_queue_on_every_switch_port():
    graph = topologies.build("leaf-spine")
    assert fabric_queue_packets(graph, 64, SINGLE_LANE, None) == 64 * _ports(graph)
    assert fabric_queue_packets(graph, 64, RDMA_LOSSLESS, None) == 2 * 64 * _ports(graph)


def test_lossless_lanes_share_each_switch_buffer():
    graph = topologies.build("rail-clos")
    fc = FlowControl(buffer_pkts_per_port=2000)
    # one lossless lane (the switch's buffer) and one lossy lane (a queue per port)
    assert fabric_queue_packets(graph, 64, RDMA_LOSSLESS, fc) == (2000 + 64) * _ports(graph)
    assert fabric_queue_packets(graph, 64, SINGLE_LANE, FlowControl()) == 64 * _ports(graph)


def test_the_buffer_is_a_power_of_two_between_its_bounds():
    assert send_buffer_bytes(0, 1514) == MIN_SEND_BUFFER_BYTES
    size = send_buffer_bytes(10_000, 4160)
    assert size >= 10_000 * 4160 * 2 and size & (size - 1) == 0 and size < 2 * 10_000 * 9344
    assert send_buffer_bytes(10**9, 9000) == MAX_SEND_BUFFER_BYTES


LOG = """\
2026-12-07T12:18:20.483Z|04236|netdev_linux|WARN|error sending Ethernet packet on r1l1-eth8: Resource temporarily unavailable
2026-12-07T12:18:21.001Z|04237|netdev_linux|INFO|Dropped 41 log messages in last 1 seconds (most recently, 0 seconds ago) due to excessive rate
2026-12-07T12:18:22.000Z|04238|connmgr|INFO|r1l1<->tcp:127.0.0.1:6653: 12 flow_mods
"""


def test_the_send_drops_are_read_from_the_log():
    assert send_drops_logged(LOG) == 42
    assert send_drops_logged(LOG.splitlines()[2]) == 0
    # suppressed messages count only beside a send error
    assert send_drops_logged(LOG.splitlines()[1]) == 0
    # a send onto a link that is down (a cut in the failures experiment) is the fault's
    assert send_drops_logged("2026-12-07T13:40:01.000Z|05301|netdev_linux|WARN|error sending "
                             "Ethernet packet on r0l0-eth3: Network is down\n") == 0


def test_the_log_is_read_from_the_runs_start(tmp_path):
    log = tmp_path / "ovs-vswitchd.log"
    log.write_text("old\n")
    offset = vswitchd_log_size(log)
    log.write_text("old\n" + LOG)
    assert vswitchd_log_since(offset, log) == LOG
    log.write_text("n\n")  # rotated (shorter than the offset): all of it
    assert vswitchd_log_since(offset, log) == "n\n"
    assert vswitchd_log_size(tmp_path / "none") is None
