"""Emulation layer: the graph as a running Mininet network, and everything
that touches the system to build, measure or clean it.

:mod:`~fabric.emulation.network` (:class:`Emulation`, the only Mininet user; it owns
a :mod:`~fabric.emulation.controller_process`, a
:mod:`~fabric.emulation.flow_control_session`, the
:mod:`~fabric.emulation.adaptive_routing` datapath and a
:mod:`~fabric.emulation.link_control`),
:mod:`~fabric.emulation.ovs`, :mod:`~fabric.emulation.shaping`,
:mod:`~fabric.emulation.hostconfig`, :mod:`~fabric.emulation.runstate` (undo
log), :mod:`~fabric.emulation.capacity` (rate scale and forwarding budget),
:mod:`~fabric.emulation.fidelity`, :mod:`~fabric.emulation.linkstats`,
:mod:`~fabric.emulation.flowmon`, :mod:`~fabric.emulation.reachability` and
:mod:`~fabric.emulation.traffic` (runs a traffic plan's host agents). Commands,
sysctls, processes and listen ports are the host layer's (:mod:`fabric.host`).

May import: fabric.model, fabric.routing, fabric.traffic, fabric.host.
"""

from fabric.emulation.network import Emulation, EmulationError, EmulationOptions

__all__ = ["Emulation", "EmulationError", "EmulationOptions"]
