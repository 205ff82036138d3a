// A switch's choice of port: select groups picked by the select hash (ECMP, or the
// adaptive policy's weights), and switch-local adaptive routing by the rule of
// fabric/routing/switch_ar.h (shared with the emulator's datapath), optionally
// sticky per flowlet. No ns-3.
#pragma once

#include "config.h"
#include "hash.h"
#include "packet.h"
#include "switch_ar.h"

#include <algorithm>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace fabric {

// A select group: its buckets' ports and weights, as fabric/routing/hashing.py's
// pick_weighted takes them (weight 0: not eligible).
struct Group {
  std::vector<int> ports;
  std::vector<uint32_t> weights;
  uint64_t total = 0;
  int Pick(uint32_t h) const { return ports[PickIndex(h)]; }
  int PickIndex(uint32_t h) const {
    if (ports.size() == 1 || total == 0) return 0;
    uint64_t r = h % total;
    for (size_t i = 0; i < ports.size(); ++i) {
      if (r < weights[i]) return i;
      r -= weights[i];
    }
    return ports.size() - 1;  // unreachable: r < total
  }
  void SetWeights(const std::vector<uint32_t>& w) {
    weights = w;
    total = 0;
    for (uint32_t x : w) total += x;
  }
};

// a flow's last port and packet at a switch (flowlet stickiness)
struct Flowlet {
  int port = -1;
  double last = -INF;
};

// Switch-local adaptive routing: the least occupied of the group's ports, in whole
// packets (switch_ar.h); with a flowlet gap, a flow keeps its last port until idle.
// ``ports`` are the switch's (each with Queued(now) and its ``turns``).
template <class Ports>
int AdaptivePort(const Config& cfg, Ports& ports, uint32_t basis,
                 std::unordered_map<uint64_t, Flowlet>& flowlets, const Group& g,
                 const Meta& m, double now) {
  Flowlet* fl = nullptr;
  if (cfg.arFlowletGap > 0) {
    uint64_t key = ((uint64_t)m.srcIp << 32 | m.dstIp) * 0x9E3779B97F4A7C15ull ^
                   ((uint64_t)m.sport << 16 | m.dport);
    fl = &flowlets[key];
    bool kept = now - fl->last < cfg.arFlowletGap &&
                std::find(g.ports.begin(), g.ports.end(), fl->port) != g.ports.end();
    fl->last = now;
    if (kept) return fl->port;
  }
  unsigned long long queued[AR_MAX_PORTS];
  unsigned char paused[AR_MAX_PORTS] = {0};  // no lossless lanes in this backend
  int count = std::min((int)g.ports.size(), AR_MAX_PORTS);
  for (int i = 0; i < count; ++i)
    queued[i] = ports[g.ports[i]].Queued(now) / (uint64_t)cfg.arFrameBytes;
  int hashed = g.PickIndex(SelectHash(m.srcIp, m.dstIp, 17, m.sport, m.dport, basis));
  uint64_t turn = ports[g.ports[hashed]].turns++;
  int port = g.ports[ar_choose(count, hashed, turn, queued, paused, (long long)cfg.arKeep)];
  if (fl) fl->port = port;
  return port;
}

}  // namespace fabric
