// The fabric on ns-3: the emulator's switches, buffers and roce transport as a
// discrete-event simulation, for fabrics larger than one machine can emulate.
//
// Built by fabric/simulation/build.py against Debian's libns3-dev (3.37); fed a
// scenario file by fabric/simulation/scenario.py (the format is documented
// there) and answers on standard output (fabric/simulation/run.py reads it).
//
// What it models, each as the emulator does it:
// - links: ns-3 point-to-point devices at the graph's rates; switch ports keep a
//   head-drop buffer of ``buffer`` packets (the emulator's pfifo_head_drop);
// - switches: per destination address, the equal-cost ports of
//   fabric.routing.tables.route_tables, one select group per port set; a group
//   picks by the fake switch harness's documented select hash
//   (fabric/routing/hashing.py: CRC-32 of the 5-tuple and the switch's basis,
//   MurmurHash3's finaliser, then the buckets' weights);
// - adaptive routing: with ``telemetry_interval`` set the simulation stops every
//   interval, writes every switch port's counters and backlog, and reads the
//   groups' new weights from its standard input (fabric/simulation/adaptive.py
//   asks the adaptive policy's own code, fabric/routing/adaptive.py);
// - switch-local adaptive routing (``ar``): per packet, the least occupied of the
//   route's ports by the rule of fabric/routing/switch_ar.h (shared with the
//   emulator's datapath), occupancy being a port's fluid virtual queue as the
//   emulator's datapath keeps it; optionally sticky per flowlet;
// - hosts: a NIC that sends its transport's ACKs ahead of its data and data at
//   line rate, one packet after the other;
// - the roce transport (fabric/agent/roce): connections whose messages share a
//   window, RACK-style loss detection with a reordering allowance, selective
//   repeat, retransmission timeouts with backoff, SACK ACKs every ``ack_every``
//   packets or ``ack_delay`` after the first unacknowledged one, swift / loss /
//   none congestion control, flow / packet / recycle entropy.
//
// The parts, one concern each: config.h (settings, sizes), hash.h (the select hash),
// queue.h (head-drop buffer), routing.h (groups, ECMP, switch-local ar, flowlets),
// transport.h (the roce transport, no ns-3), fabric.h / fabric.cc (nodes, NICs, the
// events and the one simulation state, Sim), scenario.cc (input), telemetry.cc
// (adaptive policy's stops), results.cc (output).
#include "fabric.h"

#include <chrono>
#include <fstream>
#include <string>

using namespace ns3;

int main(int argc, char** argv) {
  if (argc != 2) fabric::Fail("usage: fabric-sim SCENARIO");
  std::ifstream in(argv[1]);
  if (!in) fabric::Fail(std::string("cannot read ") + argv[1]);
  // a calendar queue: on a k=8 fat-tree's permutation 13.8 s, where the default map
  // took 16.1 s and a binary heap 19.4 s (benchmarks/simulation.py scale)
  ObjectFactory scheduler("ns3::CalendarScheduler");
  Simulator::SetScheduler(scheduler);
  fabric::Sim sim;
  fabric::ReadScenario(sim, in);
  if (sim.cfg.packetTime <= 0) fabric::Fail("config packet_time must be > 0");
  fabric::Setup(sim);
  auto t0 = std::chrono::steady_clock::now();
  fabric::RunSliced(sim);
  double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fabric::Report(sim, wall);
  Simulator::Destroy();
  return 0;
}
