"""Routing layer: pure functions from the graph, port stats, ``now`` and a
seeded RNG to per-switch intents. Nothing here reads the clock, the global
RNG or a datapath; the os-ken apps in ``controllers/`` only translate.

:mod:`~fabric.routing.tables` (shortest-path next hops, groups, pipeline),
:mod:`~fabric.routing.policies` (ecmp, spray, adaptive),
:mod:`~fabric.routing.adaptive` (telemetry-driven bucket weights) and
:mod:`~fabric.routing.config` (a controller's configuration file) and
:mod:`~fabric.routing.runtime` (the graph and config handed to the app that runs in
this process).

May import: fabric.model.
"""
