// The scenario's settings and the wire's fixed sizes (no ns-3: the transport's twin
// test compiles this natively, tests/unit/test_transport_twins.py).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <string>

namespace fabric {

const double INF = std::numeric_limits<double>::infinity();
const uint16_t ROCE_PORT = 4791;
const int MAX_BITMAP_BYTES = 128;
const int MAX_SPAN = MAX_BITMAP_BYTES * 8;
const int MAX_ECHO = 32;
const int L2_L3_L4 = 14 + 20 + 8;        // Ethernet, IPv4, UDP
const int DATA_OVERHEAD = L2_L3_L4 + 12 + 4;  // + BTH, ICRC
const int ACK_FIXED = L2_L3_L4 + 32 + 4;      // + BTH, AETH and its extension, ICRC
const int PPP_HEADER = 2;  // what ns-3's point-to-point devices add to every packet

struct Config {
  int mtu = 4096;
  std::string cc = "swift";
  std::string entropy = "flow";
  int ackEvery = 8;
  double ackDelay = 0, packetTime = 0;
  double initCwnd = 16, maxCwnd = 512;
  double minRto = 0.2, maxRto = 1, initRto = 0.2, rttFactor = 1.25, minReorder = 0.001;
  int maxReorderMult = 16, reorderPersist = 16, maxTimeouts = 10;
  // swift
  double ai = 1, beta = 0.8, maxMdf = 0.5, endpointAllowance = 2, hopAllowance = 4,
         baseCap = 0.5, minCwnd = 0.05;
  double endTime = 10;
  double telemetryInterval = 0;  // seconds between telemetry stops (0: none)
  double defaultWeight = 1;      // every bucket's weight until told otherwise
  // switch-local adaptive routing: on (1), the hashed port's threshold in packets (-1:
  // none), the bytes of a full-size frame (its queues' unit), the flowlet gap
  double ar = 0, arKeep = -1, arFrameBytes = 1, arFlowletGap = 0;
  // bytes each transfer had delivered when these times passed (steady-state windows)
  double windowStart = INF, windowEnd = INF;
};

[[noreturn]] inline void Fail(const std::string& what) {
  std::cerr << "fabric-sim: " << what << std::endl;
  std::exit(2);
}

}  // namespace fabric
