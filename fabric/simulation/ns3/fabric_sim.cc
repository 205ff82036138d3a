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
#include "ns3/core-module.h"
#include "ns3/network-module.h"
#include "ns3/point-to-point-module.h"

#include "switch_ar.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <deque>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

using namespace ns3;

namespace {

const double INF = std::numeric_limits<double>::infinity();
const uint16_t ROCE_PORT = 4791;
const int MAX_BITMAP_BYTES = 128;
const int MAX_SPAN = MAX_BITMAP_BYTES * 8;
const int MAX_ECHO = 32;
const int L2_L3_L4 = 14 + 20 + 8;        // Ethernet, IPv4, UDP
const int DATA_OVERHEAD = L2_L3_L4 + 12 + 4;  // + BTH, ICRC
const int ACK_FIXED = L2_L3_L4 + 32 + 4;      // + BTH, AETH and its extension, ICRC
const int PPP_HEADER = 2;  // what ns-3's point-to-point devices add to every packet

// ---------------------------------------------------------------- the select hash
uint32_t Crc32(const uint8_t* data, size_t len) {
  static uint32_t table[256];
  static bool ready = false;
  if (!ready) {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      table[i] = c;
    }
    ready = true;
  }
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < len; ++i) c = table[(c ^ data[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t Fmix32(uint32_t h) {
  h ^= h >> 16;
  h *= 0x85EBCA6Bu;
  h ^= h >> 13;
  h *= 0xC2B2AE35u;
  return h ^ (h >> 16);
}

// fabric/routing/hashing.py: struct.pack("!IIBHHI", src, dst, proto, sport, dport, basis)
uint32_t SelectHash(uint32_t src, uint32_t dst, uint8_t proto, uint16_t sport, uint16_t dport,
                    uint32_t basis) {
  uint8_t key[17];
  auto put32 = [&](int at, uint32_t v) {
    key[at] = v >> 24; key[at + 1] = v >> 16; key[at + 2] = v >> 8; key[at + 3] = v;
  };
  put32(0, src);
  put32(4, dst);
  key[8] = proto;
  key[9] = sport >> 8; key[10] = sport & 0xFF;
  key[11] = dport >> 8; key[12] = dport & 0xFF;
  put32(13, basis);
  return Fmix32(Crc32(key, sizeof key));
}

// ---------------------------------------------------------------- head-drop buffer
// A full queue drops its oldest packet, as Linux's pfifo_head_drop: the newest
// data, whose loss the sender would find last, gets through.
class HeadDropQueue : public Queue<Packet> {
 public:
  static TypeId GetTypeId() {
    static TypeId tid = TypeId("fabric::HeadDropQueue")
                            .SetParent<Queue<Packet>>()
                            .AddConstructor<HeadDropQueue>();
    return tid;
  }
  bool Enqueue(Ptr<Packet> item) override {
    // DoRemove counts the head as dropped (GetTotalDroppedPackets)
    if (GetCurrentSize().GetValue() + 1 > GetMaxSize().GetValue()) DoRemove(GetContainer().begin());
    return DoEnqueue(GetContainer().end(), item);
  }
  Ptr<Packet> Dequeue() override { return DoDequeue(GetContainer().begin()); }
  Ptr<Packet> Remove() override { return DoRemove(GetContainer().begin()); }
  Ptr<const Packet> Peek() const override { return DoPeek(GetContainer().begin()); }
};

// ---------------------------------------------------------------- configuration
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
Config cfg;

// ---------------------------------------------------------------- packets
// What a packet carries lives beside it, found by the packet's uid: the
// simulated bytes are the wire's, whatever our bookkeeping needs.
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
std::unordered_map<uint64_t, Meta> metas;

// ---------------------------------------------------------------- swift and friends
struct Control {
  std::string name;
  int hops = 2;
  double baseDelay = INF, lastDecrease = -INF;
  bool slowStart = true;
  int decreases = 0;

  double Allowance() const { return cfg.endpointAllowance + hops * cfg.hopAllowance; }
  double InitialWindow() const {
    if (name == "swift") return cfg.endpointAllowance + hops;
    if (name == "none") return cfg.maxCwnd;
    return cfg.initCwnd;
  }
  double Target() const {
    if (std::isinf(baseDelay)) return INF;
    double base = std::min(baseDelay, hops * cfg.baseCap * cfg.packetTime);
    return base + Allowance() * cfg.packetTime;
  }
  double OnAck(double cwnd, int newly, double delay, double now, double rtt) {
    if (name == "none") return cfg.maxCwnd;
    if (name == "loss") return std::min(cwnd + newly / std::max(cwnd, 1.0), cfg.maxCwnd);
    if (delay <= 0) return cwnd;
    baseDelay = std::min(baseDelay, delay);
    double target = Target();
    double allowed = Allowance() * cfg.packetTime;
    if (delay > target - allowed / 2) slowStart = false;
    if (delay < target) {
      if (slowStart) {
        cwnd += newly;
        slowStart = cwnd < Allowance();
      } else if (newly) {
        cwnd += cwnd >= 1 ? cfg.ai * newly / cwnd : cfg.ai * newly;
      }
    } else if (now - lastDecrease >= rtt) {
      cwnd *= std::max(1 - cfg.beta * (delay - target) / delay, 1 - cfg.maxMdf);
      lastDecrease = now;
      ++decreases;
    }
    return std::min(std::max(cwnd, cfg.minCwnd), cfg.maxCwnd);
  }
  double OnLoss(double cwnd) {
    if (name == "none") return cwnd;
    if (name == "loss") return std::max(1.0, cwnd / 2);
    slowStart = false;
    return std::max(cwnd * (1 - cfg.maxMdf), cfg.minCwnd);
  }
};

enum State : uint8_t { UNSENT = 0, IN_FLIGHT = 1, LOST = 2, ACKED = 3 };

// One connection's shared congestion state (fabric.agent.roce.send.Window).
struct Window {
  Control control;
  double cwnd = 1;
  int inflight = 0;
  double srtt = -1, latestRtt = 0, rttvar = 0, rto = 0;
  double nextSendAt = -INF;
  int64_t tx = 0, rackTx = -1;
  double lastCut = -INF;
  double undoCwnd = -1;
  int undoPending = 0;
  int reorderMult = 1;
  double lastMultChange = -INF;
  int episodesSinceWidening = 0;
  double Rtt() const { return srtt >= 0 ? srtt : rto; }
  bool Full() const { return inflight >= std::max(1, (int)cwnd); }
};

struct Transfer;
struct Connection;

// One message's sender (fabric.agent.roce.send.SendQP).
struct SendQP {
  Transfer* t = nullptr;
  Window* win = nullptr;
  int count = 0, lastLen = 0;
  std::vector<uint8_t> state, retx;
  std::vector<double> sentAt;
  std::vector<int64_t> sentTx;
  std::deque<std::pair<int, int64_t>> outstanding;
  std::deque<int> lost;
  int nextNew = 0, una = 0, acked = 0, inflight = 0;
  int backoff = 1, timeoutsInRow = 0;
  bool overtakenLate = false;
  int peerDuplicates = 0;
  bool failed = false;
  uint64_t timerGen = 0;
  double timerAt = INF;
  // counters
  int packetsSent = 0, retransmitted = 0, lostDetected = 0, rtoCount = 0, acksReceived = 0;

  bool Done() const { return acked == count; }
  int Length(int psn) const { return psn == count - 1 ? lastLen : cfg.mtu; }
  bool HasPacket() {
    if (Done() || failed) return false;
    while (!lost.empty() && state[lost.front()] != LOST) lost.pop_front();
    return !lost.empty() || (nextNew < count && nextNew < una + MAX_SPAN);
  }
  bool CanSend(double now) {
    if (Done() || failed || win->inflight >= std::max(1, (int)win->cwnd)) return false;
    if (win->cwnd < 1 && now < win->nextSendAt) return false;
    return HasPacket();
  }
  double PacedUntil(double now) {
    if (now >= win->nextSendAt || !HasPacket()) return -1;
    return (win->cwnd < 1 && !win->inflight) ? win->nextSendAt : -1;
  }
  // Commit the next packet: (psn, ackreq).
  std::pair<int, bool> Next(double now) {
    int psn;
    bool ackreq;
    if (!lost.empty()) {
      psn = lost.front();
      lost.pop_front();
      retx[psn] = 1;
      ++retransmitted;
      ackreq = true;
    } else {
      psn = nextNew++;
      ackreq = psn == count - 1;
    }
    state[psn] = IN_FLIGHT;
    sentAt[psn] = now;
    sentTx[psn] = ++win->tx;
    outstanding.emplace_back(psn, win->tx);
    ++inflight;
    ++win->inflight;
    ++packetsSent;
    if (win->cwnd < 1) win->nextSendAt = now + win->Rtt() / win->cwnd;
    return {psn, ackreq};
  }
  void Deliver(int psn) {
    if (state[psn] == IN_FLIGHT) {
      --inflight;
      --win->inflight;
    } else if (state[psn] == LOST && !retx[psn]) {
      overtakenLate = true;
      Spurious(1);
    }
    state[psn] = ACKED;
    ++acked;
    if (!retx[psn] && sentTx[psn] > win->rackTx) win->rackTx = sentTx[psn];
  }
  int OnAck(const Meta& a, double now) {
    ++acksReceived;
    int before = acked;
    int trigger = a.trigger;
    bool fresh = trigger >= 0 && trigger < count && state[trigger] != ACKED && !retx[trigger];
    int cum = std::min(a.cum, count);
    if (cum > una) {
      for (int psn = una; psn < cum; ++psn)
        if (state[psn] != ACKED) Deliver(psn);
      una = cum;
    }
    for (int psn : a.sacked)
      if (psn < count && state[psn] != ACKED) Deliver(psn);
    int newly = acked - before;
    if (fresh && state[trigger] == ACKED) RttSample(now - sentAt[trigger]);
    bool duplicated = a.duplicates > peerDuplicates;
    if (duplicated || overtakenLate) {
      if (now - win->lastMultChange >= win->Rtt()) {
        win->reorderMult = std::min(win->reorderMult + 1, cfg.maxReorderMult);
        win->lastMultChange = now;
        win->episodesSinceWidening = 0;
      }
      overtakenLate = false;
    }
    if (duplicated) Spurious(a.duplicates - peerDuplicates);
    peerDuplicates = std::max(peerDuplicates, a.duplicates);
    double delay = a.owdNs ? a.owdNs * 1e-9 : 0;
    win->cwnd = win->control.OnAck(win->cwnd, newly, delay, now, win->Rtt());
    if (newly) {
      timeoutsInRow = 0;
      backoff = 1;
      DetectLosses(now);
    }
    return newly;
  }
  void RttSample(double rtt) {
    win->latestRtt = rtt;
    if (win->srtt < 0) {
      win->srtt = rtt;
      win->rttvar = rtt / 2;
    } else {
      win->rttvar += 0.25 * (std::fabs(win->srtt - rtt) - win->rttvar);
      win->srtt += 0.125 * (rtt - win->srtt);
    }
    win->rto = std::min(std::max(win->srtt + 4 * win->rttvar, cfg.minRto), cfg.maxRto);
  }
  double LossThreshold() const {
    if (win->srtt < 0) return -1;
    double rtt = std::max(win->srtt, win->latestRtt);
    double allowance = win->reorderMult * std::max(cfg.minReorder, rtt / 4);
    return rtt * cfg.rttFactor + allowance;
  }
  bool Head(int& psn, int64_t& tx) {
    while (!outstanding.empty()) {
      auto [p, t] = outstanding.front();
      if (state[p] == IN_FLIGHT && sentTx[p] == t) {
        psn = p;
        tx = t;
        return true;
      }
      outstanding.pop_front();
    }
    return false;
  }
  int DetectLosses(double now) {
    double threshold = LossThreshold();
    if (threshold < 0) return 0;
    int found = 0, psn;
    int64_t tx;
    while (Head(psn, tx)) {
      if (tx > win->rackTx || now - sentAt[psn] < threshold) break;
      outstanding.pop_front();
      MarkLost(psn);
      ++found;
    }
    if (found) Cut(now, found);
    return found;
  }
  void MarkLost(int psn) {
    state[psn] = LOST;
    --inflight;
    --win->inflight;
    lost.push_back(psn);
    ++lostDetected;
  }
  void Cut(double now, int marked) {
    if (now - win->lastCut >= win->Rtt()) {
      win->undoCwnd = win->cwnd;
      win->undoPending = marked;
      win->cwnd = win->control.OnLoss(win->cwnd);
      win->lastCut = now;
      if (++win->episodesSinceWidening >= cfg.reorderPersist) {
        win->reorderMult = 1;
        win->episodesSinceWidening = 0;
      }
    } else if (win->undoCwnd >= 0) {
      win->undoPending += marked;
    }
  }
  void Spurious(int n) {
    if (win->undoCwnd < 0) return;
    win->undoPending -= n;
    if (win->undoPending <= 0) {
      win->cwnd = std::max(win->cwnd, win->undoCwnd);
      win->undoCwnd = -1;
    }
  }
  double Deadline() {
    int psn;
    int64_t tx;
    if (!Head(psn, tx)) return INF;
    double rtoAt = sentAt[psn] + win->rto * backoff;
    double threshold = LossThreshold();
    if (threshold >= 0 && tx < win->rackTx) return std::min(rtoAt, sentAt[psn] + threshold);
    return rtoAt;
  }
  void OnTimer(double now) {
    DetectLosses(now);
    int psn;
    int64_t tx;
    if (!Head(psn, tx) || now - sentAt[psn] < win->rto * backoff) return;
    ++rtoCount;
    if (++timeoutsInRow > cfg.maxTimeouts) {
      failed = true;
      return;
    }
    int marked = 0;
    while (Head(psn, tx)) {
      outstanding.pop_front();
      MarkLost(psn);
      ++marked;
    }
    backoff = std::min(backoff * 2, 64);
    if (win->rto * backoff > cfg.maxRto) backoff = std::max(1, (int)(cfg.maxRto / win->rto));
    Cut(now, marked);
  }
};

// One message's receiver (fabric.agent.roce.recv.RecvQP); ``baseOwd`` is the
// connection's (Inbound).
struct RecvQP {
  int count = 0, lastLen = 0;
  std::vector<uint8_t> got;
  int cum = 0, maxSeen = -1, trigger = 0;
  uint64_t owdSumNs = 0;
  int owdCount = 0, pending = 0;
  double pendingSince = 0;
  int64_t bytes = 0;
  int packetsReceived = 0, outOfOrder = 0, duplicates = 0, acksSent = 0;
  std::vector<uint16_t> echo;
  uint16_t replyPort = 0;
  uint64_t ackGen = 0;
  bool Complete() const { return cum >= count; }
};

// ---------------------------------------------------------------- the fabric
struct Port {
  Ptr<PointToPointNetDevice> dev;
  int link = -1, peer = -1;
  bool forward = true;  // this side is the link's a (direction a -> b)
  // the fluid virtual queue adaptive routing reads: when it drains, its rate and cap
  double emptyAt = 0, bytesPerS = 0, capS = 0;
  uint64_t turns = 0;  // adaptive decisions it made as the hashed port (ties take turns)
  uint64_t Queued(double now) const {
    return emptyAt > now ? (uint64_t)((emptyAt - now) * bytesPerS) : 0;
  }
};

// a flow's last port and packet at a switch (flowlet stickiness)
struct Flowlet {
  int port = -1;
  double last = -INF;
};

struct Node_;
struct Transfer {
  int index = 0;
  int src = 0, dst = 0;
  uint32_t dstIp = 0;
  int64_t bytes = 0;
  int conn = 0, hops = 0;
  double delay = 0;
  std::vector<int> after;       // transfers it waits for
  std::vector<int> dependents;  // transfers waiting for it
  int waiting = 0;
  double readyAt = 0;
  int afterStart = -1;          // (transfer it starts after, seconds)
  double afterStartS = 0;
  bool started = false;
  double sendStart = -1, sendEnd = -1, recvStart = -1, recvEnd = -1;
  int64_t atWindowStart = -1, atWindowEnd = -1;  // bytes delivered by then (-1: not yet)
  std::unique_ptr<SendQP> sq;
  std::unique_ptr<RecvQP> rq;
};

struct Connection {
  int index = 0, nic = 0, peerNic = 0;  // the sender's NIC and the receiver's
  uint32_t srcIp = 0, dstIp = 0;
  std::vector<uint16_t> ports;
  size_t rot = 0;
  std::deque<uint16_t> recycled;
  Window win;
  std::deque<Transfer*> senders;
  std::unordered_map<int, int> pinned;  // switch -> port its data leaves by (a given path)
  bool opened = false;
  uint64_t baseOwdNs = 0;  // the receiver's smallest one-way delay (Inbound)
  uint16_t NextPort() {
    if (!recycled.empty()) {
      uint16_t p = recycled.front();
      recycled.pop_front();
      return p;
    }
    uint16_t p = ports[rot];
    rot = (rot + 1) % ports.size();
    return p;
  }
};

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

struct Node_ {
  std::string name;
  bool host = false;
  uint32_t basis = 0;
  Ptr<Node> node;
  std::vector<Port> ports;                       // by the graph's port number
  std::vector<Group> groups;
  std::map<std::vector<int>, int> groupOf;       // port set -> its group
  // a switch's group by destination NIC (-1: no route; an array, not a hash table:
  // the lookup is on every packet and hop)
  std::vector<int> routes;
  std::unordered_map<uint64_t, Flowlet> flowlets;  // by flow (adaptive routing)
};

// An endpoint's NIC: its transport's ACKs go ahead of its data, and data leaves
// one packet at a time, taking the connections with a packet ready in turn.
struct Nic {
  int host = 0, port = 0;
  uint32_t ip = 0;
  std::deque<Ptr<Packet>> control;
  std::deque<Connection*> active;
  bool busy = false;
  uint64_t kickGen = 0;
  double kickAt = INF;
};

std::vector<Node_> nodes;
std::vector<Nic> nics;
std::unordered_map<uint32_t, int> nicOfIp;
std::vector<std::unique_ptr<Transfer>> transfers;
std::vector<std::unique_ptr<Connection>> connections;
struct LinkStats {
  uint64_t packets[2] = {0, 0}, bytes[2] = {0, 0};
  Ptr<HeadDropQueue> queue[2];
};
std::vector<LinkStats> links;
int finished = 0;

double Now() { return Simulator::Now().GetSeconds(); }

// The delay until ``at``, rounded up to the simulator's nanosecond and at least one:
// a timer must fire when its condition holds, not a rounding error before it.
Time Until(double at) {
  return NanoSeconds(std::max<int64_t>(1, (int64_t)std::ceil((at - Now()) * 1e9)));
}


void StartTransfer(Transfer* t);

// A packet of ``wireBytes`` on the wire (Ethernet's header counted, as the
// emulator's shapers count it): with ns-3's point-to-point header, as many bytes.
Ptr<Packet> MakePacket(int wireBytes, Meta meta) {
  Ptr<Packet> p = Create<Packet>(wireBytes - PPP_HEADER);
  metas.emplace(p->GetUid(), std::move(meta));
  return p;
}

void SendOut(Node_& n, int port, Ptr<Packet> p) {
  Port& pt = n.ports[port];
  LinkStats& ls = links[pt.link];
  int dir = pt.forward ? 0 : 1;
  ls.packets[dir] += 1;
  ls.bytes[dir] += p->GetSize() + PPP_HEADER;
  double now = Now(), start = std::max(now, pt.emptyAt);
  // a full head-drop queue stays full: so does its virtual copy
  if (start - now < pt.capS) start += (p->GetSize() + PPP_HEADER) / pt.bytesPerS;
  pt.emptyAt = start;
  pt.dev->Send(p, pt.dev->GetBroadcast(), 0x0800);
}

// A packet a buffer dropped takes its bookkeeping with it.
void Dropped(Ptr<const Packet> p) { metas.erase(p->GetUid()); }

void Kick(int nic);
void DependencyDone(Transfer* t);
void ArmTimer(Transfer* t);

// ---- receiving
void SendAck(Transfer* t) {
  RecvQP& r = *t->rq;
  Connection& c = *connections[t->conn];
  Meta a;
  a.ack = true;
  a.srcIp = c.dstIp;
  a.dstIp = c.srcIp;
  a.dstNic = c.nic;
  a.sport = ROCE_PORT;
  a.dport = r.replyPort;  // the source port of the latest data packet, as a reply goes
  a.msg = t->index;
  a.cum = r.cum;
  a.trigger = r.trigger;
  a.duplicates = r.duplicates;
  a.owdNs = r.owdCount ? r.owdSumNs / r.owdCount : 0;
  r.owdSumNs = 0;
  r.owdCount = 0;
  int hi = std::min(r.maxSeen + 1, r.cum + 1 + MAX_SPAN);
  for (int psn = r.cum + 1; psn < hi; ++psn)
    if (r.got[psn]) a.sacked.push_back(psn);
  int bitmapBytes = hi > r.cum + 1 ? (hi - r.cum - 1 + 7) / 8 : 0;
  int wire = ACK_FIXED + bitmapBytes + 2 * (int)r.echo.size();
  a.echo.swap(r.echo);
  r.pending = 0;
  ++r.acksSent;
  ++r.ackGen;
  int nic = c.peerNic;
  nics[nic].control.push_back(MakePacket(wire, std::move(a)));
  Kick(nic);
}

void AckTimer(Transfer* t, uint64_t gen) {
  if (t->rq->ackGen == gen && t->rq->pending) SendAck(t);
}

void OnData(const Meta& m) {
  Transfer* t = transfers[m.msg].get();
  RecvQP& r = *t->rq;
  Connection& c = *connections[t->conn];
  double now = Now();
  ++r.packetsReceived;
  if (t->recvStart < 0) t->recvStart = now;
  r.trigger = m.psn;
  r.replyPort = m.sport;
  // nanoseconds (at least 1: measured). The emulator's wire carries microseconds, far
  // below its packet times; at physical rates a packet takes a third of one, so the
  // simulator keeps the delay as finely as it keeps time.
  uint64_t owdNs = std::max<int64_t>(1, std::llround((now - m.sentAt) * 1e9));
  r.owdSumNs += owdNs;
  ++r.owdCount;
  if (!c.baseOwdNs || owdNs < c.baseOwdNs) c.baseOwdNs = owdNs;
  // entropy recycling: echo a port whose packet queued no more than swift allows
  double echoExcess = (cfg.endpointAllowance + t->hops * cfg.hopAllowance) * cfg.packetTime;
  if (m.echoWanted && (owdNs - c.baseOwdNs) <= std::llround(echoExcess * 1e9) &&
      (int)r.echo.size() < MAX_ECHO)
    r.echo.push_back(m.sport);
  bool urgent;
  if (r.got[m.psn]) {
    ++r.duplicates;
    urgent = true;
  } else {
    if (t->atWindowStart < 0 && now >= cfg.windowStart) t->atWindowStart = r.bytes;
    if (t->atWindowEnd < 0 && now >= cfg.windowEnd) t->atWindowEnd = r.bytes;
    r.got[m.psn] = 1;
    r.bytes += m.len;
    if (m.psn < r.maxSeen) ++r.outOfOrder; else r.maxSeen = m.psn;
    if (m.psn == r.cum)
      while (r.cum < r.count && r.got[r.cum]) ++r.cum;
    if (!r.pending) r.pendingSince = now;
    ++r.pending;
    urgent = m.ackreq || r.pending >= cfg.ackEvery || r.Complete();
  }
  bool done = t->recvEnd < 0 && r.Complete();
  if (done) t->recvEnd = now;
  if (urgent) {
    SendAck(t);
  } else if (r.pending == 1) {
    Simulator::Schedule(Seconds(cfg.ackDelay), &AckTimer, t, r.ackGen);
  }
  if (done) DependencyDone(t);
}

void OnAckPacket(const Meta& m) {
  Transfer* t = transfers[m.msg].get();
  SendQP& s = *t->sq;
  if (s.Done() || s.failed) return;
  Connection& c = *connections[t->conn];
  if (cfg.entropy == "recycle")
    for (uint16_t p : m.echo)
      if (c.recycled.size() < c.ports.size()) c.recycled.push_back(p);
  double now = Now();
  s.OnAck(m, now);
  if (s.Done()) {
    t->sendEnd = now;
    DependencyDone(t);
  } else {
    ArmTimer(t);
  }
  Kick(c.nic);
}

// Switch-local adaptive routing: the least occupied of the group's ports, in whole
// packets (switch_ar.h); with a flowlet gap, a flow keeps its last port until idle.
int AdaptivePort(Node_& n, const Group& g, const Meta& m) {
  double now = Now();
  Flowlet* fl = nullptr;
  if (cfg.arFlowletGap > 0) {
    uint64_t key = ((uint64_t)m.srcIp << 32 | m.dstIp) * 0x9E3779B97F4A7C15ull ^
                   ((uint64_t)m.sport << 16 | m.dport);
    fl = &n.flowlets[key];
    bool kept = now - fl->last < cfg.arFlowletGap &&
                std::find(g.ports.begin(), g.ports.end(), fl->port) != g.ports.end();
    fl->last = now;
    if (kept) return fl->port;
  }
  unsigned long long queued[AR_MAX_PORTS];
  unsigned char paused[AR_MAX_PORTS] = {0};  // no lossless lanes in this backend
  int count = std::min((int)g.ports.size(), AR_MAX_PORTS);
  for (int i = 0; i < count; ++i)
    queued[i] = n.ports[g.ports[i]].Queued(now) / (uint64_t)cfg.arFrameBytes;
  int hashed = g.PickIndex(SelectHash(m.srcIp, m.dstIp, 17, m.sport, m.dport, n.basis));
  uint64_t turn = n.ports[g.ports[hashed]].turns++;
  int port = g.ports[ar_choose(count, hashed, turn, queued, paused, (long long)cfg.arKeep)];
  if (fl) fl->port = port;
  return port;
}

bool Receive(int index, Ptr<NetDevice>, Ptr<const Packet> p, uint16_t, const Address&) {
  auto it = metas.find(p->GetUid());
  if (it == metas.end()) return true;
  Node_& n = nodes[index];
  if (n.host) {
    Meta m = std::move(it->second);
    metas.erase(it);
    if (m.ack) OnAckPacket(m); else OnData(m);
    return true;
  }
  const Meta& m = it->second;
  if (m.dstNic < 0 || m.dstNic >= (int)n.routes.size() || n.routes[m.dstNic] < 0)
    return true;  // no route: dropped
  const Group& g = n.groups[n.routes[m.dstNic]];
  int port = g.ports.size() == 1 ? g.ports[0]
             : cfg.ar          ? AdaptivePort(n, g, m)
                               : g.Pick(SelectHash(m.srcIp, m.dstIp, 17, m.sport, m.dport,
                                                   n.basis));
  if (!m.ack) {
    const auto& pinned = connections[transfers[m.msg]->conn]->pinned;
    auto pin = pinned.find(index);
    if (pin != pinned.end()) port = pin->second;
  }
  // the same packet (and uid) goes on: nothing else holds it once its device handed it up
  SendOut(n, port, ConstCast<Packet>(p));
  return true;
}

// ---- sending
void TimerFired(Transfer* t, uint64_t gen) {
  SendQP& s = *t->sq;
  if (gen != s.timerGen || s.Done() || s.failed) return;
  s.timerAt = INF;
  s.OnTimer(Now());
  if (s.failed) {
    DependencyDone(t);
    return;
  }
  ArmTimer(t);
  Kick(connections[t->conn]->nic);
}

void ArmTimer(Transfer* t) {
  SendQP& s = *t->sq;
  double due = s.Deadline();
  if (std::isinf(due) || due >= s.timerAt) return;
  s.timerAt = due;
  Simulator::Schedule(Until(due), &TimerFired, t, ++s.timerGen);
}

void KickEvent(int nic, uint64_t gen) {
  if (gen != nics[nic].kickGen) return;
  nics[nic].kickAt = INF;
  Kick(nic);
}

void Kick(int index) {
  Nic& n = nics[index];
  if (n.busy) return;
  Node_& host = nodes[n.host];
  double now = Now();
  if (!n.control.empty()) {
    Ptr<Packet> p = n.control.front();
    n.control.pop_front();
    n.busy = true;
    SendOut(host, n.port, p);
    return;
  }
  double wake = INF;
  size_t idle = 0;
  while (idle < n.active.size()) {
    Connection* c = n.active.front();
    n.active.pop_front();
    n.active.push_back(c);
    Transfer* ready = nullptr;
    if (!c->win.Full())
      for (Transfer* t : c->senders)
        if (t->sq->CanSend(now)) {
          ready = t;
          break;
        }
    if (!ready) {
      ++idle;
      for (Transfer* t : c->senders)
        if (t->sq->HasPacket()) {
          double paced = t->sq->PacedUntil(now);
          if (paced >= 0) wake = std::min(wake, paced);
          break;
        }
      continue;
    }
    SendQP& s = *ready->sq;
    auto [psn, ackreq] = s.Next(now);
    Meta m;
    m.srcIp = c->srcIp;
    m.dstIp = c->dstIp;
    m.dstNic = c->peerNic;
    m.sport = c->NextPort();
    m.dport = ROCE_PORT;
    m.msg = ready->index;
    m.psn = psn;
    m.len = s.Length(psn);
    m.ackreq = ackreq;
    m.echoWanted = cfg.entropy == "recycle";
    m.sentAt = now;
    int pad = (4 - m.len % 4) % 4;
    n.busy = true;
    SendOut(host, n.port, MakePacket(m.len + pad + DATA_OVERHEAD, std::move(m)));
    ArmTimer(ready);
    return;
  }
  if (!std::isinf(wake) && wake < n.kickAt) {
    n.kickAt = wake;
    Simulator::Schedule(Until(wake), &KickEvent, index, ++n.kickGen);
  }
}

void TxDone(int nic, Ptr<const Packet>) {
  nics[nic].busy = false;
  Kick(nic);
}

// Retire finished messages from their connection's front and from the NIC's turn.
void Retire(Transfer* t) {
  Connection& c = *connections[t->conn];
  auto it = std::find(c.senders.begin(), c.senders.end(), t);
  if (it != c.senders.end()) c.senders.erase(it);
  if (c.senders.empty()) {
    auto& active = nics[c.nic].active;
    auto a = std::find(active.begin(), active.end(), &c);
    if (a != active.end()) active.erase(a);
  }
}

bool Finished(const Transfer* t) { return t->sendEnd >= 0 && t->recvEnd >= 0; }

// A dependency of ``t`` is met for its sender when the sender took part in it:
// sent it (all acknowledged) or received it (all arrived).
bool MetFor(const Transfer* dep, int host) {
  if (dep->sq && dep->sq->failed) return true;
  if (dep->dst == host) return dep->recvEnd >= 0;
  return dep->sendEnd >= 0;
}

void TryStart(Transfer* t) {
  if (t->started) return;
  for (int d : t->after)
    if (!MetFor(transfers[d].get(), t->src)) return;
  if (t->afterStart >= 0) {
    Transfer* a = transfers[t->afterStart].get();
    if (a->sendStart < 0) return;
  }
  double now = Now();
  double at = now + t->delay;
  if (t->afterStart >= 0) at = std::max(at, transfers[t->afterStart]->sendStart + t->afterStartS);
  t->started = true;
  Simulator::Schedule(Seconds(at - now), &StartTransfer, t);
}

void DependencyDone(Transfer* t) {
  if (t->sq && (t->sq->Done() || t->sq->failed)) Retire(t);
  if (Finished(t) || (t->sq && t->sq->failed)) {
    ++finished;
    if (finished == (int)transfers.size()) Simulator::Stop();
  }
  for (int d : t->dependents) TryStart(transfers[d].get());
}

void StartTransfer(Transfer* t) {
  double now = Now();
  t->sendStart = now;
  Connection& c = *connections[t->conn];
  if (!c.opened) {
    c.opened = true;
    c.win.control.name = cfg.cc;
    c.win.control.hops = t->hops ? t->hops : 2;
    c.win.cwnd = c.win.control.InitialWindow();
    c.win.rto = cfg.initRto;
  }
  if (c.senders.empty()) nics[c.nic].active.push_back(&c);
  c.senders.push_back(t);
  for (int d : t->dependents)
    if (transfers[d]->afterStart == t->index) TryStart(transfers[d].get());
  Kick(c.nic);
}

// ---------------------------------------------------------------- input
uint32_t ParseIp(const std::string& s) {
  uint32_t a, b, c, d;
  char dot;
  std::istringstream in(s);
  in >> a >> dot >> b >> dot >> c >> dot >> d;
  return (a << 24) | (b << 16) | (c << 8) | d;
}

[[noreturn]] void Fail(const std::string& what) {
  std::cerr << "fabric-sim: " << what << std::endl;
  std::exit(2);
}

void ReadScenario(std::istream& in) {
  std::string line;
  int lineNo = 0;
  while (std::getline(in, line)) {
    ++lineNo;
    std::istringstream f(line);
    std::string kind;
    if (!(f >> kind) || kind[0] == '#') continue;
    if (kind == "config") {
      std::string key;
      f >> key;
      if (key == "cc") f >> cfg.cc;
      else if (key == "entropy") f >> cfg.entropy;
      else {
        double v;
        f >> v;
        std::map<std::string, double*> d = {
            {"mtu", nullptr}, {"ack_every", nullptr}, {"max_reorder_mult", nullptr},
            {"reorder_persist", nullptr}, {"max_timeouts", nullptr},
            {"ack_delay", &cfg.ackDelay}, {"packet_time", &cfg.packetTime},
            {"init_cwnd", &cfg.initCwnd}, {"max_cwnd", &cfg.maxCwnd},
            {"min_rto", &cfg.minRto}, {"max_rto", &cfg.maxRto}, {"init_rto", &cfg.initRto},
            {"rtt_factor", &cfg.rttFactor}, {"min_reorder", &cfg.minReorder},
            {"ai", &cfg.ai}, {"beta", &cfg.beta}, {"max_mdf", &cfg.maxMdf},
            {"endpoint_allowance", &cfg.endpointAllowance},
            {"hop_allowance", &cfg.hopAllowance}, {"base_cap", &cfg.baseCap},
            {"min_cwnd", &cfg.minCwnd}, {"end_time", &cfg.endTime},
            {"telemetry_interval", &cfg.telemetryInterval},
            {"default_weight", &cfg.defaultWeight}, {"ar", &cfg.ar},
            {"ar_keep", &cfg.arKeep}, {"ar_frame_bytes", &cfg.arFrameBytes}, {"ar_flowlet_gap", &cfg.arFlowletGap},
            {"window_start", &cfg.windowStart}, {"window_end", &cfg.windowEnd}};
        if (!d.count(key)) Fail("line " + std::to_string(lineNo) + ": unknown config " + key);
        if (key == "mtu") cfg.mtu = (int)v;
        else if (key == "ack_every") cfg.ackEvery = (int)v;
        else if (key == "max_reorder_mult") cfg.maxReorderMult = (int)v;
        else if (key == "reorder_persist") cfg.reorderPersist = (int)v;
        else if (key == "max_timeouts") cfg.maxTimeouts = (int)v;
        else *d[key] = v;
      }
    } else if (kind == "node") {
      Node_ n;
      std::string role;
      f >> n.name >> role >> n.basis;
      n.host = role == "host";
      n.node = CreateObject<Node>();
      nodes.push_back(std::move(n));
    } else if (kind == "nic") {
      Nic n;
      std::string ip;
      f >> n.host >> n.port >> ip;
      n.ip = ParseIp(ip);
      nicOfIp[n.ip] = nics.size();
      nics.push_back(std::move(n));
    } else if (kind == "link") {
      int a, pa, b, pb, buffer;
      double rate, delay;
      f >> a >> pa >> b >> pb >> rate >> delay >> buffer;
      PointToPointHelper p2p;
      p2p.SetDeviceAttribute("DataRate", DataRateValue(DataRate((uint64_t)rate)));
      p2p.SetChannelAttribute("Delay", TimeValue(Seconds(delay)));
      NetDeviceContainer devs = p2p.Install(nodes[a].node, nodes[b].node);
      int index = links.size();
      links.emplace_back();
      for (int side = 0; side < 2; ++side) {
        int who = side ? b : a, port = side ? pb : pa;
        Ptr<PointToPointNetDevice> dev = DynamicCast<PointToPointNetDevice>(devs.Get(side));
        Ptr<HeadDropQueue> q = CreateObject<HeadDropQueue>();
        // a host's NIC holds what its transport hands it (one packet at a time)
        q->SetMaxSize(QueueSize(QueueSizeUnit::PACKETS, nodes[who].host ? 1u << 20 : buffer));
        dev->SetQueue(q);
        q->TraceConnectWithoutContext("Drop", MakeCallback(&Dropped));
        links[index].queue[side] = q;
        dev->SetReceiveCallback(MakeBoundCallback(&Receive, who));
        if (nodes[who].host) {
          int nic = -1;
          for (size_t i = 0; i < nics.size(); ++i)
            if (nics[i].host == who && nics[i].port == port) nic = i;
          if (nic < 0) Fail("link to host " + nodes[who].name + " port " + std::to_string(port) +
                            " before its nic record");
          dev->TraceConnectWithoutContext("PhyTxEnd", MakeBoundCallback(&TxDone, nic));
        }
        auto& ports = nodes[who].ports;
        if ((int)ports.size() <= port) ports.resize(port + 1);
        ports[port] = Port{dev, index, side ? a : b, side == 0};
        ports[port].bytesPerS = rate / 8;
        ports[port].capS = buffer * (cfg.mtu + DATA_OVERHEAD) / ports[port].bytesPerS;
      }
    } else if (kind == "route") {
      int sw;
      std::string ip;
      f >> sw >> ip;
      std::vector<int> ports;
      int p;
      while (f >> p) ports.push_back(p);
      auto nic = nicOfIp.find(ParseIp(ip));
      if (nic == nicOfIp.end()) Fail("line " + std::to_string(lineNo) + ": route to no NIC");
      if (ports.empty()) Fail("line " + std::to_string(lineNo) + ": route with no port");
      Node_& n = nodes[sw];
      if ((int)n.routes.size() <= nic->second) n.routes.resize(nics.size(), -1);
      auto g = n.groupOf.find(ports);
      if (g == n.groupOf.end()) {
        g = n.groupOf.emplace(ports, (int)n.groups.size()).first;
        Group group;
        group.ports = ports;
        group.SetWeights(std::vector<uint32_t>(ports.size(), (uint32_t)cfg.defaultWeight));
        n.groups.push_back(std::move(group));
      }
      n.routes[nic->second] = g->second;
    } else if (kind == "connection") {
      auto c = std::make_unique<Connection>();
      std::string sip, dip;
      f >> c->index >> sip >> dip >> c->rot;
      c->srcIp = ParseIp(sip);
      c->dstIp = ParseIp(dip);
      if (!nicOfIp.count(c->srcIp) || !nicOfIp.count(c->dstIp))
        Fail("connection " + std::to_string(c->index) + ": unknown address");
      c->nic = nicOfIp[c->srcIp];
      c->peerNic = nicOfIp[c->dstIp];
      int p;
      while (f >> p) c->ports.push_back(p);
      if (c->ports.empty()) Fail("connection " + std::to_string(c->index) + ": no source port");
      c->rot %= c->ports.size();
      connections.push_back(std::move(c));
    } else if (kind == "pin") {
      int conn, sw, port;
      f >> conn;
      if (conn < 0 || conn >= (int)connections.size())
        Fail("line " + std::to_string(lineNo) + ": pin of an unknown connection");
      while (f >> sw >> port) connections[conn]->pinned[sw] = port;
    } else if (kind == "transfer") {
      auto t = std::make_unique<Transfer>();
      std::string dip;
      f >> t->index >> t->src >> t->dst >> dip >> t->bytes >> t->conn >> t->hops >>
          t->delay >> t->afterStart >> t->afterStartS;
      t->dstIp = ParseIp(dip);
      int d;
      while (f >> d) t->after.push_back(d);
      transfers.push_back(std::move(t));
    } else {
      Fail("line " + std::to_string(lineNo) + ": unknown record " + kind);
    }
  }
}

void Setup() {
  for (auto& tp : transfers) {
    Transfer* t = tp.get();
    for (int d : t->after) transfers[d]->dependents.push_back(t->index);
    if (t->afterStart >= 0) transfers[t->afterStart]->dependents.push_back(t->index);
    auto sq = std::make_unique<SendQP>();
    sq->t = t;
    sq->win = &connections[t->conn]->win;
    sq->count = (int)((t->bytes + cfg.mtu - 1) / cfg.mtu);
    sq->lastLen = (int)(t->bytes - (int64_t)(sq->count - 1) * cfg.mtu);
    sq->state.assign(sq->count, UNSENT);
    sq->retx.assign(sq->count, 0);
    sq->sentAt.assign(sq->count, 0);
    sq->sentTx.assign(sq->count, 0);
    auto rq = std::make_unique<RecvQP>();
    rq->count = sq->count;
    rq->lastLen = sq->lastLen;
    rq->got.assign(rq->count, 0);
    t->sq = std::move(sq);
    t->rq = std::move(rq);
  }
  for (auto& t : transfers) TryStart(t.get());
}

// This program's own peak resident memory (VmHWM): the parent's getrusage would count
// the memory of the process it was forked from, which exec inherits into ru_maxrss.
long PeakMemoryKb() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

void Report(double wall) {
  std::cout.precision(12);
  for (auto& tp : transfers) {
    Transfer& t = *tp;
    SendQP& s = *t.sq;
    RecvQP& r = *t.rq;
    std::cout << "transfer " << t.index << ' ' << t.sendStart << ' ' << t.sendEnd << ' '
              << t.recvStart << ' ' << t.recvEnd << ' ' << r.bytes << ' ' << s.packetsSent << ' '
              << s.retransmitted << ' ' << s.lostDetected << ' ' << s.rtoCount << ' '
              << s.acksReceived << ' ' << r.packetsReceived << ' ' << r.duplicates << ' '
              << r.outOfOrder << ' ' << r.acksSent << ' ' << (s.failed ? 1 : 0) << ' '
              << s.win->control.decreases << ' '
              // a transfer that finished before a window edge had all its bytes by then
              << (t.atWindowStart >= 0 ? t.atWindowStart : r.bytes) << ' '
              << (t.atWindowEnd >= 0 ? t.atWindowEnd : r.bytes) << '\n';
  }
  for (size_t i = 0; i < links.size(); ++i) {
    LinkStats& l = links[i];
    for (int dir = 0; dir < 2; ++dir) {
      Ptr<HeadDropQueue> q = l.queue[dir];
      std::cout << "link " << i << ' ' << dir << ' ' << l.packets[dir] << ' ' << l.bytes[dir]
                << ' ' << q->GetTotalDroppedPackets() << '\n';
    }
  }
  std::cout << "end " << Now() << ' ' << wall << ' ' << PeakMemoryKb() << '\n';
}

// ---------------------------------------------------------------- telemetry
// Every switch port's counters, as an OpenFlow port-stats reply gives them, and its
// backlog (what a probe sent now would wait behind):
// ``port SWITCH PORT TX_BYTES TX_DROPPED BACKLOG_BYTES`` after ``tick NOW``.
void WriteTelemetry() {
  std::cout.precision(12);
  std::cout << "tick " << Now() << '\n';
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].host) continue;
    for (size_t port = 0; port < nodes[i].ports.size(); ++port) {
      const Port& pt = nodes[i].ports[port];
      if (pt.link < 0) continue;
      const LinkStats& ls = links[pt.link];
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
void ReadWeights() {
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream f(line);
    std::string kind;
    f >> kind;
    if (kind == "go") return;
    int sw, count;
    if (kind != "weights" || !(f >> sw >> count) || sw < 0 || sw >= (int)nodes.size() ||
        count < 1)
      Fail("telemetry: bad line: " + line);
    std::vector<int> ports(count);
    std::vector<uint32_t> weights(count);
    for (int& p : ports) f >> p;
    for (uint32_t& w : weights) f >> w;
    auto g = nodes[sw].groupOf.find(ports);
    if (!f || g == nodes[sw].groupOf.end()) Fail("telemetry: no such group: " + line);
    nodes[sw].groups[g->second].SetWeights(weights);
  }
  Fail("telemetry: input closed");
}

// Runs to the end, stopping every telemetry interval (if there is one) to report and
// take new weights.
void RunSliced() {
  Simulator::Stop(Seconds(cfg.endTime));
  if (cfg.telemetryInterval <= 0) {
    Simulator::Run();
    return;
  }
  while (true) {
    Simulator::Stop(Seconds(cfg.telemetryInterval));
    Simulator::Run();
    // (the end-time stop stays queued, so the queue never runs dry before it)
    if (finished == (int)transfers.size() || Now() >= cfg.endTime) return;
    WriteTelemetry();
    ReadWeights();
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) Fail("usage: fabric-sim SCENARIO");
  std::ifstream in(argv[1]);
  if (!in) Fail(std::string("cannot read ") + argv[1]);
  // a calendar queue: on a k=8 fat-tree's permutation 13.8 s, where the default map
  // took 16.1 s and a binary heap 19.4 s (benchmarks/simulation.py scale)
  ObjectFactory scheduler("ns3::CalendarScheduler");
  Simulator::SetScheduler(scheduler);
  ReadScenario(in);
  if (cfg.packetTime <= 0) Fail("config packet_time must be > 0");
  Setup();
  auto t0 = std::chrono::steady_clock::now();
  RunSliced();
  double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  Report(wall);
  Simulator::Destroy();
  return 0;
}
