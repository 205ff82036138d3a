"""Unit-test os-ken controllers against a fake fabric: no root, no switches.

:class:`FakeFabric` turns a fabric graph into fake OpenFlow switches
(:class:`FakeSwitch`) behind fake datapaths (:class:`FakeDatapath`), connects
os-ken apps to them, and traces scapy packets through the tables the apps
installed. Like Faucet's ``clib/fakeoftable.py``, but with the group
semantics fabric's policies live in:

* select groups hash the 5-tuple deterministically and honour bucket
  weights and watch ports (:mod:`fabric.routing.hashing` documents the
  hash); fast-failover groups take the first live bucket; all groups copy;
* ``set_queue`` is recorded on every hop (:class:`Hop`);
* connections speak OpenFlow 1.5, or 1.3 when the apps' ``OFP_VERSIONS``
  ask for it, as Ryu apps often do (:mod:`fabric.testing.of13`);
* barriers, port descriptions and port, flow and group statistics (counted
  from traced packets) are answered, port changes are reported
  (``EventOFPPortStatus``), packet-ins delivered (:meth:`FakeFabric.send`
  keeps delivering them, and those the apps' packet-outs cause, for
  reactive apps such as a learning switch);
* refused messages raise :class:`OpenFlowError` (or are answered with an
  error message), unmodelled features raise :class:`UnsupportedFeature`;
* traces can be written as pcap (:func:`write_pcap`).

Example
-------
>>> fabric = FakeFabric(topologies.build("leaf-spine"))           # doctest: +SKIP
>>> app = fabric.connect(MyApp())                                 # doctest: +SKIP
>>> trace = fabric.trace(fabric.packet("h0", "h5"), src="h0")     # doctest: +SKIP
>>> trace.delivered_to, [h.switch for h in trace.hops]            # doctest: +SKIP
('h5', ['l0', 's2', 'l1'])

This package imports os-ken and scapy (it is a testing tool) but never
Mininet; ``make_app`` hands fabric's own apps their graph and config through
:mod:`fabric.routing.runtime`, as the controllers' launcher does.

May import: fabric.model, fabric.routing.
"""

from fabric.testing.connection import HarnessError
from fabric.testing.datapath import FakeDatapath
from fabric.testing.fakeswitch import FakeSwitch, PortCounters
from fabric.testing.harness import FakeFabric
from fabric.routing.hashing import select_hash
from fabric.testing.packets import arp_request, ip_packet, packet_fields, write_pcap
from fabric.testing.tables import OpenFlowError, UnsupportedFeature
from fabric.testing.tracing import Exchange, Hop, PacketIn, Trace

__all__ = ["Exchange", "FakeDatapath", "FakeFabric", "FakeSwitch", "HarnessError", "Hop",
           "OpenFlowError", "PacketIn", "PortCounters", "Trace", "UnsupportedFeature", "arp_request",
           "ip_packet", "packet_fields", "select_hash", "write_pcap"]
