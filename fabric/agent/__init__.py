"""The host agent: executes a traffic plan for one or several emulated hosts.

``python -m fabric.agent --plan PLAN.json --host NAME --out RESULT.json``
(:mod:`fabric.agent.__main__`). Modules:

- :mod:`~fabric.agent.runner`: life cycle, dependencies, deadline, result;
- :mod:`~fabric.agent.tcp` (+ :mod:`~fabric.agent.framing`,
  :mod:`~fabric.agent.tcpinfo`): kernel TCP with parts over N connections;
- :mod:`~fabric.agent.roce` (+ :mod:`~fabric.agent.bth`,
  :mod:`~fabric.agent.roce_send`, :mod:`~fabric.agent.roce_recv`,
  :mod:`~fabric.agent.pacing`): a RoCEv2-like reliable transport over UDP
  4791 with selective repeat, RACK-style loss detection and spraying;
- :mod:`~fabric.agent.loop`: the single-threaded event loop;
- :mod:`~fabric.agent.netns`: sockets in a host's network namespace, opened
  from a process that serves several hosts;
- :mod:`~fabric.agent.netstat`, :mod:`~fabric.agent.addressing`;
- :mod:`~fabric.agent.local` and :mod:`~fabric.agent.impair`: run agents as
  local processes on loopback and impair UDP between them (tests, benchmarks);
  :mod:`~fabric.agent.bench` measures one RoCE flow (goodput, CPU).

Result JSON: ``{"host", "transport", "transfers": [row, ...], "netstat",
"roce", "errors", "ok", "started_at", "start_at", "finished_at", "cpu_s",
"setup_cpu_s", "wakeups", "wake_late", "pid", "process_hosts"}`` (``cpu_s``: the
process's CPU time once it was ready to start the traffic, ``setup_cpu_s`` before;
``wakeups``: how often the event loop returned from its selector; ``wake_late``: how
late it woke for its timers, :func:`~fabric.agent.loop.lateness_summary`; these four
belong to the process, which serves ``process_hosts`` hosts: count them once per
``pid``, :func:`~fabric.agent.runner.per_process`) where a row is
:func:`fabric.traffic.model.result_dict` (``id, role, start, end, bytes``)
plus ``peer, expected_bytes, tag, dscp, channel, src_ip, dst_ip, ready,
error`` and the transport's counters. ``end`` is None for an
unfinished transfer, which then has an ``error``.

May import: fabric.traffic (the plan format; never the emulation layer).
"""
