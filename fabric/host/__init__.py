"""The host machine fabric runs on: commands, sysctls, processes and listen ports.

Modules: :mod:`~fabric.host.system` (preflight checks, commands as argument
lists, sysctls, the processes a run started) and :mod:`~fabric.host.ports`
(a controller's listen port is free; a remote controller is on loopback and
listens). The emulation builds on it, and so does the controllers' launcher,
which checks its own port.

May import: nothing (of fabric's layers; fabric's top-level modules are shared).
"""
