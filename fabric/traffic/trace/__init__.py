"""Training-job traces: read them, check them, replay them as transfer schedules.

Part of the traffic layer. :mod:`~fabric.traffic.trace.schema` (the workload
model and the project's own ``fabric-trace`` JSON format),
:mod:`~fabric.traffic.trace.kineto` (PyTorch profiler traces),
:mod:`~fabric.traffic.trace.chakra` (MLCommons Chakra execution traces),
:mod:`~fabric.traffic.trace.load` (:func:`load_trace`, any of them),
:mod:`~fabric.traffic.trace.schedule` (ranks onto endpoints, the workload as
transfers) and :mod:`~fabric.traffic.trace.report` (step and collective
times from the transfers' timing rows).
"""

from fabric.traffic.trace.load import load_trace
from fabric.traffic.trace.schema import Collective, Compute, TraceError, Workload

__all__ = ["Collective", "Compute", "TraceError", "Workload", "load_trace"]
