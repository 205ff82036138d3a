"""The kernel-TCP transport: persistent connections, parts, DONE frames.

- :mod:`~fabric.agent.tcp.engine`: :class:`~fabric.agent.tcp.engine.TcpEngine`,
  the connections and the parts of each transfer;
- :mod:`~fabric.agent.tcp.receiver`: :class:`~fabric.agent.tcp.receiver.TcpReceiver`,
  the engine's receiving side (listeners, accepted connections, DONE frames);
- :mod:`~fabric.agent.tcp.framing`: the frames (header, payload, DONE);
- :mod:`~fabric.agent.tcp.tcpinfo`: the kernel's ``struct tcp_info``.

May import: fabric.agent.core, fabric.traffic (never the RoCE transport).
"""
