"""The fabric in a packet-level simulator (ns-3), for fabrics past what one
machine can emulate.

The same graph, routes, buffers, transport and ``Transfer`` schedule as the
emulator, simulated by a C++ program built on ns-3 (Debian's ``libns3-dev``):
:mod:`~fabric.simulation.build` compiles it, :mod:`~fabric.simulation.scenario`
writes what it simulates, :mod:`~fabric.simulation.run` runs it and reads its
answer.

May import: fabric.model, fabric.routing, fabric.traffic, fabric.agent (the
transport's parameters; never the emulation layer).
"""

from fabric.simulation.build import SimulatorMissing, simulator_binary
from fabric.simulation.run import SimResult, simulate

__all__ = ["SimResult", "SimulatorMissing", "simulate", "simulator_binary"]
