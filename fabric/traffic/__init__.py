"""Traffic layer: what the hosts send, as plain data, and how to measure it.

:mod:`~fabric.traffic.model` (transfers, transports, the plan the host agents
read), :mod:`~fabric.traffic.collectives` and :mod:`~fabric.traffic.storage`
(schedules), :mod:`~fabric.traffic.patterns` (named patterns of ``fabric
traffic``), :mod:`~fabric.traffic.placement` (ranks onto hosts) and
:mod:`~fabric.traffic.metrics` (FCT, collisions, fairness, rounds),
:mod:`~fabric.traffic.sizing` (work in packets) and :mod:`~fabric.traffic.result` (what
a run gives back, on either backend, and its fidelity checks).

May import: fabric.model.
"""
