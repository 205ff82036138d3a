"""The RoCEv2-like transport: UDP 4791, selective repeat, spraying, pacing.

- :mod:`~fabric.agent.roce.engine`: :class:`~fabric.agent.roce.engine.RoceEngine`,
  the sockets, pacing and dispatch of an agent's queue pairs; its receiving side
  (listeners, ACKs, CNPs) is :mod:`~fabric.agent.roce.receiver`, and what it reports
  is built by :mod:`~fabric.agent.roce.report`;
- :mod:`~fabric.agent.roce.send` and :mod:`~fabric.agent.roce.recv`: the
  requester and responder of one queue pair (pure logic);
- :mod:`~fabric.agent.roce.bth`: the wire format (BTH, AETH, our ACK extension);
- :mod:`~fabric.agent.roce.cc`: congestion control (``loss``, ``swift``, ``dcqcn``);
- :mod:`~fabric.agent.roce.entropy`: which source port a sprayed packet takes;
- :mod:`~fabric.agent.roce.pacing`: the NIC's token bucket.

May import: fabric.agent.core, fabric.traffic (never the TCP transport).
"""
