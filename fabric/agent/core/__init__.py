"""What every transport of the agent shares.

- :mod:`~fabric.agent.core.loop`: the single-threaded event loop (sockets,
  timers, services);
- :mod:`~fabric.agent.core.engine`: the state and interface of a transport
  engine, which the runner drives;
- :mod:`~fabric.agent.core.records`: what an agent knows about each of its
  transfers, and their result rows.

May import: fabric.traffic (the plan format; never a transport).
"""
