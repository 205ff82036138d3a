// Telemetry for the adaptive policy (fabric/simulation/adaptive.py answers it): the
// simulation stops every interval, writes every switch port's counters and backlog,
// and reads the groups' new weights from its standard input.
#include "fabric.h"

#include <iostream>
#include <sstream>
#include <string>
#include <vector>

using namespace ns3;

namespace fabric {

namespace {

// Every switch port's counters, as an OpenFlow port-stats reply gives them, and its
// backlog (what a probe sent now would wait behind):
// ``port SWITCH PORT TX_BYTES TX_DROPPED BACKLOG_BYTES`` after ``tick NOW``.
void WriteTelemetry(Sim& sim) {
  std::cout.precision(12);
  std::cout << "tick " << Now() << '\n';
  for (size_t i = 0; i < sim.nodes.size(); ++i) {
    if (sim.nodes[i].host) continue;
    for (size_t port = 0; port < sim.nodes[i].ports.size(); ++port) {
      const Port& pt = sim.nodes[i].ports[port];
      if (pt.link < 0) continue;
      const LinkStats& ls = sim.links[pt.link];
      int dir = pt.forward ? 0 : 1;
      Ptr<HeadDropQueue> q = ls.queue[dir];
      uint64_t backlog = q->GetNBytes();
      std::cout << "port " << i << ' ' << port << ' '
                << ls.bytes[dir] - backlog - q->GetTotalDroppedBytes() << ' '
                << q->GetTotalDroppedPackets() << ' ' << backlog << '\n';
    }
  }
  std::cout << "ready" << std::endl;
}

// ``weights SWITCH N PORT... WEIGHT...`` lines until ``go``: a group's new weights.
void ReadWeights(Sim& sim) {
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream f(line);
    std::string kind;
    f >> kind;
    if (kind == "go") return;
    int sw, count;
    if (kind != "weights" || !(f >> sw >> count) || sw < 0 || sw >= (int)sim.nodes.size() ||
        count < 1)
      Fail("telemetry: bad line: " + line);
    std::vector<int> ports(count);
    std::vector<uint32_t> weights(count);
    for (int& p : ports) f >> p;
    for (uint32_t& w : weights) f >> w;
    auto g = sim.nodes[sw].groupOf.find(ports);
    if (!f || g == sim.nodes[sw].groupOf.end()) Fail("telemetry: no such group: " + line);
    sim.nodes[sw].groups[g->second].SetWeights(weights);
  }
  Fail("telemetry: input closed");
}

}  // namespace

// Runs to the end, stopping every telemetry interval (if there is one) to report and
// take new weights.
void RunSliced(Sim& sim) {
  Simulator::Stop(Seconds(sim.cfg.endTime));
  if (sim.cfg.telemetryInterval <= 0) {
    Simulator::Run();
    return;
  }
  while (true) {
    Simulator::Stop(Seconds(sim.cfg.telemetryInterval));
    Simulator::Run();
    // (the end-time stop stays queued, so the queue never runs dry before it)
    if (sim.finished == (int)sim.transfers.size() || Now() >= sim.cfg.endTime) return;
    WriteTelemetry(sim);
    ReadWeights(sim);
  }
}

}  // namespace fabric
