"""The host agent: executes a traffic plan for one or several emulated hosts.

``python -m fabric.agent --plan PLAN.json --host NAME --out RESULT.json``
(:mod:`fabric.agent.__main__`). Sub-packages and modules:

- :mod:`~fabric.agent.runner`: life cycle, dependencies, deadline, result; the
  one module that drives both transports. Beside it, what only the life cycle
  uses: :mod:`~fabric.agent.netns` (sockets in a host's network namespace,
  opened from a process that serves several hosts), :mod:`~fabric.agent.netstat`
  (the kernel's loss counters) and :mod:`~fabric.agent.addressing` (which own
  address a transfer leaves from);
- :mod:`fabric.agent.core`: what every transport shares: the single-threaded
  event loop, the engine interface and the transfer records;
- :mod:`fabric.agent.roce`: a RoCEv2-like reliable transport over UDP 4791
  with selective repeat, RACK-style loss detection, spraying, pacing and
  congestion control;
- :mod:`fabric.agent.tcp`: kernel TCP with parts over N connections;
- :mod:`fabric.agent.local`: run agents as local processes on loopback and
  impair UDP between them (tests, benchmarks); ``python -m
  fabric.agent.local.bench`` measures one RoCE flow (goodput, CPU).

Inside the agent, core imports no transport, the two transports import core
and never each other, the runner nor local, and the runner imports core and
both transports; each sub-package states what it may import in its docstring.

Result JSON: ``{"host", "transport", "transfers": [row, ...], "netstat",
"roce", "errors", "ok", "started_at", "start_at", "finished_at", "cpu_s",
"setup_cpu_s", "wakeups", "wake_late", "pid", "process_hosts"}`` (``cpu_s``: the
process's CPU time once it was ready to start the traffic, ``setup_cpu_s`` before;
``wakeups``: how often the event loop returned from its selector; ``wake_late``: how
late it woke for its timers, :func:`~fabric.agent.core.loop.lateness_summary`; these
four belong to the process, which serves ``process_hosts`` hosts: count them once per
``pid``, :func:`~fabric.agent.runner.per_process`) where a row is
:func:`fabric.traffic.model.result_dict` (``id, role, start, end, bytes``)
plus ``peer, expected_bytes, tag, dscp, channel, src_ip, dst_ip, ready,
error`` and the transport's counters. ``end`` is None for an
unfinished transfer, which then has an ``error``.

May import: fabric.traffic (the plan format; never the emulation layer).
"""
