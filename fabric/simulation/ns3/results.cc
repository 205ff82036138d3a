// The answer on standard output, which fabric/simulation/run.py parses: a line per
// transfer, per directed link, and the end (simulated and wall seconds, peak memory).
#include "fabric.h"

#include <fstream>
#include <iostream>
#include <string>

using namespace ns3;

namespace fabric {

// This program's own peak resident memory (VmHWM): the parent's getrusage would count
// the memory of the process it was forked from, which exec inherits into ru_maxrss.
namespace {

long PeakMemoryKb() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

}  // namespace

void Report(Sim& sim, double wall) {
  std::cout.precision(12);
  for (auto& tp : sim.transfers) {
    Transfer& t = *tp;
    SendQP& s = *t.sq;
    RecvQP& r = *t.rq;
    std::cout << "transfer " << t.index << ' ' << t.sendStart << ' ' << t.sendEnd << ' '
              << t.recvStart << ' ' << t.recvEnd << ' ' << r.bytes << ' ' << s.packetsSent << ' '
              << s.retransmitted << ' ' << s.lostDetected << ' ' << s.rtoCount << ' '
              << s.acksReceived << ' ' << r.packetsReceived << ' ' << r.duplicates << ' '
              << r.outOfOrder << ' ' << r.acksSent << ' ' << (s.failed ? 1 : 0) << ' '
              << s.win->control.decreases << ' '
              // a transfer that sim.finished before a window edge had all its bytes by then
              << (t.atWindowStart >= 0 ? t.atWindowStart : r.bytes) << ' '
              << (t.atWindowEnd >= 0 ? t.atWindowEnd : r.bytes) << '\n';
  }
  for (size_t i = 0; i < sim.links.size(); ++i) {
    LinkStats& l = sim.links[i];
    for (int dir = 0; dir < 2; ++dir) {
      Ptr<HeadDropQueue> q = l.queue[dir];
      std::cout << "link " << i << ' ' << dir << ' ' << l.packets[dir] << ' ' << l.bytes[dir]
                << ' ' << q->GetTotalDroppedPackets() << '\n';
    }
  }
  std::cout << "end " << Now() << ' ' << wall << ' ' << PeakMemoryKb() << '\n';
}

}  // namespace fabric
