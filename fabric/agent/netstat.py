"""TCP loss and UDP buffer counters from ``/proc/net/netstat`` and ``/proc/net/snmp``.

``/proc/net`` belongs to the reading process's network namespace, so inside a
Mininet host these are that host's own counters; on the root namespace (the
loopback tests) they are the whole machine's.
"""

from __future__ import annotations

from pathlib import Path

# (file, section, counter) pairs the agent reports as deltas over its run.
COUNTERS = (
    ("netstat", "TcpExt", "TCPTimeouts"),
    ("netstat", "TcpExt", "TCPLossProbes"),
    ("netstat", "TcpExt", "TCPSackRecovery"),
    ("netstat", "TcpExt", "TCPLostRetransmit"),
    ("snmp", "Tcp", "RetransSegs"),
    # datagrams the kernel dropped because an agent's socket buffer was full: loss on
    # the host, not in the fabric
    ("snmp", "Udp", "RcvbufErrors"),
    ("snmp", "Udp", "SndbufErrors"),
)


def parse_proc_table(text: str) -> dict[str, dict[str, int]]:
    """Parse the ``Section: names`` / ``Section: values`` line pairs.

    Parameters
    ----------
    text : str
        Contents of ``/proc/net/netstat`` or ``/proc/net/snmp``.

    Returns
    -------
    dict
        section -> counter -> value (non-integer values are skipped).
    """
    tables: dict[str, dict[str, int]] = {}
    lines = [line.split() for line in text.splitlines() if line.strip()]
    for names, values in zip(lines[::2], lines[1::2]):
        if not names or names[0] != values[0]:
            continue
        section = names[0].rstrip(":")
        row = tables.setdefault(section, {})
        for name, value in zip(names[1:], values[1:]):
            try:
                row[name] = int(value)
            except ValueError:
                pass
    return tables


def read_counters(root: Path = Path("/proc/net")) -> dict[str, int]:
    """Current values of :data:`COUNTERS` (missing ones read as 0)."""
    tables: dict[str, dict[str, dict[str, int]]] = {}
    for name in {file for file, _, _ in COUNTERS}:
        try:
            tables[name] = parse_proc_table((root / name).read_text())
        except OSError:
            tables[name] = {}
    return {counter: tables[file].get(section, {}).get(counter, 0)
            for file, section, counter in COUNTERS}


def delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """``after - before`` per counter."""
    return {name: after.get(name, 0) - before.get(name, 0) for name in after}
