// What a packet carries lives beside it, found by the packet's uid: the
// simulated bytes are the wire's, whatever our bookkeeping needs (no ns-3).
#pragma once

#include <cstdint>
#include <vector>

namespace fabric {

struct Meta {
  bool ack = false;
  uint32_t srcIp = 0, dstIp = 0;
  int dstNic = -1;           // the NIC dstIp names
  uint16_t sport = 0, dport = 0;
  int msg = -1;              // transfer index
  // data
  int psn = 0, len = 0;
  bool ackreq = false, echoWanted = false;
  double sentAt = 0;
  // ack
  int cum = 0, trigger = 0, duplicates = 0;
  std::vector<int> sacked;   // PSNs above cum the receiver holds (its bitmap)
  uint64_t owdNs = 0;
  std::vector<uint16_t> echo;
};

}  // namespace fabric
