"""The RoCE engine's own cost per packet, with no event-loop wake-up in between.

``python benchmarks/agent_hotpath.py [--batches 40] [--batch 200] [--mtu 4096]``
(no root; loopback only). Receiving: a socket fills the engine's listener with
``--batch`` data packets of one message, then a single loop iteration reads
them all (and sends their ACKs). Sending: an engine with an unlimited pacer and
window sends a ``--batch``-packet message in one service call. Each prints the
CPU time per packet, system calls included (on loopback a send also pays for
the delivery to the receiving socket).

Compare with ``python -m fabric.agent.local.bench``, which paces one flow in real
time: the difference is what each wake-up of the loop costs (waiting, being
scheduled, running the code again with cold caches).
"""

from __future__ import annotations

import argparse
import socket
import sys
import time

from fabric.agent.core.loop import EventLoop
from fabric.agent.core.records import SEND, TransferRecord
from fabric.agent.local.processes import loopback_hosts
from fabric.agent.roce import bth
from fabric.agent.roce.engine import RoceEngine
from fabric.traffic.model import DEFAULT_ROCE_MTU, ROCE_MTUS, Transfer, TransportSpec


def _drain(sock: socket.socket) -> None:
    try:
        while True:
            sock.recv(65536)
    except BlockingIOError:
        pass


def receive_cost(spec: TransportSpec, own: str, peer: str, batches: int, batch: int) -> float:
    """CPU seconds per data packet to read, account and acknowledge it."""
    loop = EventLoop()
    engine = RoceEngine(loop, spec, [own], lambda r: None, lambda r, e: None)
    loop.add_service(engine.service)
    source = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        engine.bind()
        source.bind((peer, 0))
        source.setblocking(False)
        total = batches * batch
        record = TransferRecord(Transfer("r", "b", "a", total * spec.mtu_payload), "recv",
                                qpn=0x300)
        engine.add_recv(record)
        payload = bytes(spec.mtu_payload)
        cpu, psn = 0.0, 0
        for _ in range(batches):
            for _ in range(batch):
                opcode = (bth.SEND_FIRST if psn == 0 else
                          bth.SEND_LAST if psn == total - 1 else bth.SEND_MIDDLE)
                packet = bytearray(bth.data_packet(opcode, 0x300, psn, payload))
                bth.SEND_TIME.pack_into(packet, bth.BTH_LEN, time.monotonic_ns())
                source.sendto(packet, (own, bth.ROCE_PORT))
                psn += 1
            start = time.process_time()
            loop.run_once(0.0)
            cpu += time.process_time() - start
            _drain(source)  # the ACKs
        if record.end is None:
            raise RuntimeError("the receiver did not get the whole message (socket buffer?)")
        return cpu / total
    finally:
        engine.close()
        loop.close()
        source.close()


def send_cost(spec: TransportSpec, own: str, peer: str, batches: int, batch: int) -> float:
    """CPU seconds per data packet to choose, stamp and send it."""
    sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sink.bind((peer, bth.ROCE_PORT))
    sink.setblocking(False)
    cpu, sent = 0.0, 0
    try:
        for i in range(batches):
            loop = EventLoop()
            engine = RoceEngine(loop, spec, [own], lambda r: None, lambda r, e: None)
            try:
                record = TransferRecord(Transfer(f"t{i}", "a", "b", batch * spec.mtu_payload),
                                        SEND, qpn=0x100, src_ip=own, dst_ip=peer)
                engine.start_send(record, time.monotonic())
                qp = engine.senders[0x100].qp
                qp.cwnd = float(batch)  # no ACKs come: the window must hold the message
                bucket = engine.pacers[own].bucket
                start = time.process_time()
                while qp.next_new < qp.count:
                    bucket.depth = bucket.tokens = float("inf")
                    engine.service(time.monotonic())
                cpu += time.process_time() - start
                sent += qp.count
                _drain(sink)
            finally:
                engine.close()
                loop.close()
        return cpu / sent
    finally:
        sink.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--batch", type=int, default=200,
                        help="packets per loop iteration (at most ~400: socket buffer)")
    parser.add_argument("--mtu", type=int, default=DEFAULT_ROCE_MTU,
                        help=f"payload bytes per packet (default {DEFAULT_ROCE_MTU})")
    args = parser.parse_args()
    if not 1 <= args.batch <= 400 or args.batches < 1 or not ROCE_MTUS[0] <= args.mtu <= ROCE_MTUS[-1]:
        parser.error(f"--batch 1-400, --batches >= 1, --mtu {ROCE_MTUS[0]}-{ROCE_MTUS[-1]}")
    hosts = loopback_hosts(["a", "b"])
    own, peer = (hosts[h][0].split("/")[0] for h in ("a", "b"))
    spec = TransportSpec(kind="roce", rate_mbps=12, mtu_payload=args.mtu, entropy="packet")
    for _ in range(2):  # the first round warms up the interpreter and the sockets
        rx = receive_cost(spec, own, peer, args.batches, args.batch)
        tx = send_cost(spec, own, peer, args.batches, args.batch)
    print(f"roce engine, {args.mtu}-byte payloads, {args.batch} packets per loop iteration: "
          f"receive {rx * 1e6:.1f} us per packet (ACKs included), send {tx * 1e6:.1f} us")


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:  # every socket is closed by the finally blocks
        sys.exit("agent_hotpath: interrupted")
