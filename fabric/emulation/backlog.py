"""What waits in ovs-vswitchd's receive sockets: a reader, and a sampler process.

The sampler runs as a process of its own (``python -I backlog.py``, standard
library only): as a thread of the launcher it would wait for Python's
interpreter lock behind the launcher's other threads and miss its samples. It is
started before the agents (it is slow to come up beside them) and waits: it
samples from a line ``go`` on its standard input until that input closes (also
when the launcher dies), then prints ``{"samples": n, "total": bytes}``; it runs
at normal priority, so that the agents keep their CPU (measured:
docs/benchmarks.md, "Sampling the OVS backlog").
"""

from __future__ import annotations

import argparse
import json
import os
import select
import time

PROC_NET_PACKET = "/proc/net/packet"


def packet_socket_backlog(inodes: set[int], proc_net_packet: str) -> int:
    """Receive memory (skb truesize, bytes) queued on the bound packet sockets in
    ``inodes``, from the text of ``/proc/net/packet``.

    Its ``Rmem`` column is the socket's receive allocation, as ``ss -m`` shows
    it; reading the file rather than spawning ``ss`` costs well under a
    millisecond a sample.
    """
    # nine columns: sk RefCnt Type Proto Iface R Rmem User Inode, under a header of nine
    # words; one split of the whole text costs a fraction of one per line (every 5 ms)
    fields = proc_net_packet.split()
    total = 0
    for i in range(9, len(fields) - 8, 9):
        # Iface 0 is the process's unbound send socket
        if fields[i + 4] != "0" and int(fields[i + 8]) in inodes:
            total += int(fields[i + 6])
    return total


def command(python: str, inodes: set[int], interval_s: float) -> list[str]:
    """The sampler's command line."""
    return [python, "-I", os.path.abspath(__file__), "--interval", str(interval_s),
            "--inodes", ",".join(map(str, sorted(inodes)))]


def sample(inodes: set[int], interval_s: float, source: str = PROC_NET_PACKET) -> dict:
    """Once standard input says ``go``, sample the backlog of ``inodes`` every
    ``interval_s`` until it closes; return the count and the sum of the samples."""
    samples = total = 0
    if not os.read(0, 16).startswith(b"go"):
        return {"samples": 0, "total": 0}  # closed before the run started
    due = time.monotonic()
    while True:  # one sample at go at least, however soon the input closes
        with open(source) as handle:
            total += packet_socket_backlog(inodes, handle.read())
        samples += 1
        due = max(due + interval_s, time.monotonic())  # late: no catching up in a burst
        ready, _, _ = select.select([0], [], [], max(0.0, due - time.monotonic()))
        if ready:  # end of input: the run is over
            return {"samples": samples, "total": total}


def main() -> None:
    """Sample the sockets given on the command line; print the result as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inodes", required=True, help="socket inodes, comma-separated")
    parser.add_argument("--interval", type=float, required=True, help="seconds")
    parser.add_argument("--source", default=PROC_NET_PACKET)
    args = parser.parse_args()
    try:
        inodes = {int(i) for i in args.inodes.split(",") if i}
    except ValueError:
        parser.error(f"--inodes must be numbers separated by commas, got {args.inodes!r}")
    if not 0.001 <= args.interval <= 1:
        parser.error(f"--interval must be 0.001..1 s, got {args.interval}")
    print(json.dumps(sample(inodes, args.interval, args.source)), flush=True)


if __name__ == "__main__":
    main()
