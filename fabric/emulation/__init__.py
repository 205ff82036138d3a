"""Emulation layer: the graph as a running Mininet network, and everything
that touches the system to build, measure or clean it.

:mod:`~fabric.emulation.network` (:class:`Emulation`, the only Mininet user),
:mod:`~fabric.emulation.ovs`, :mod:`~fabric.emulation.shaping`,
:mod:`~fabric.emulation.hostconfig`, :mod:`~fabric.emulation.runstate` (undo
log), :mod:`~fabric.emulation.capacity` (rate scale and forwarding budget),
:mod:`~fabric.emulation.fidelity`, :mod:`~fabric.emulation.linkstats`,
:mod:`~fabric.emulation.flowmon`, :mod:`~fabric.emulation.reachability` and
:mod:`~fabric.emulation.traffic` (runs a traffic plan's host agents). Commands,
sysctls, processes and listen ports are the host layer's (:mod:`fabric.host`).

May import: fabric.model, fabric.routing, fabric.traffic, fabric.host.
"""

from fabric.emulation.network import (PROJECT_ROOT, Emulation, EmulationError,
                                      EmulationOptions)

__all__ = ["PROJECT_ROOT", "Emulation", "EmulationError", "EmulationOptions"]
