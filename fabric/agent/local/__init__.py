"""Agents as local processes on loopback, for tests and benchmarks (no Mininet).

- :mod:`~fabric.agent.local.processes`: start one ``python -m fabric.agent``
  process per host on fresh loopback addresses and collect their results;
- :mod:`~fabric.agent.local.impair`: a UDP relay that drops, delays and
  marks datagrams;
- :mod:`~fabric.agent.local.bench`: ``python -m fabric.agent.local.bench``
  measures one RoCE flow between two local agents (goodput, CPU).

May import: fabric.agent.core, fabric.agent.roce, fabric.agent.tcp, fabric.agent.runner, fabric.traffic
"""
