// The simulated fabric: switch ports, nodes, NICs, connections and transfers, and
// the one simulation state (Sim) every part of the program is handed.
#pragma once

#include "ns3/core-module.h"
#include "ns3/network-module.h"
#include "ns3/point-to-point-module.h"

#include "config.h"
#include "packet.h"
#include "queue.h"
#include "routing.h"
#include "transport.h"

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace fabric {

struct Port {
  ns3::Ptr<ns3::PointToPointNetDevice> dev;
  int link = -1, peer = -1;
  bool forward = true;  // this side is the link's a (direction a -> b)
  // the fluid virtual queue adaptive routing reads: when it drains, its rate and cap
  double emptyAt = 0, bytesPerS = 0, capS = 0;
  uint64_t turns = 0;  // adaptive decisions it made as the hashed port (ties take turns)
  uint64_t Queued(double now) const {
    return emptyAt > now ? (uint64_t)((emptyAt - now) * bytesPerS) : 0;
  }
};

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

struct Node_ {
  std::string name;
  bool host = false;
  uint32_t basis = 0;
  ns3::Ptr<ns3::Node> node;
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
  std::deque<ns3::Ptr<ns3::Packet>> control;
  std::deque<Connection*> active;
  bool busy = false;
  uint64_t kickGen = 0;
  double kickAt = INF;
};

struct LinkStats {
  uint64_t packets[2] = {0, 0}, bytes[2] = {0, 0};
  ns3::Ptr<HeadDropQueue> queue[2];
};

// Everything one simulation holds (in place of file-scope globals): made by main,
// filled by ReadScenario, passed by reference or bound into ns-3's callbacks.
struct Sim {
  Config cfg;
  std::unordered_map<uint64_t, Meta> metas;  // by packet uid
  std::vector<Node_> nodes;
  std::vector<Nic> nics;
  std::unordered_map<uint32_t, int> nicOfIp;
  std::vector<std::unique_ptr<Transfer>> transfers;
  std::vector<std::unique_ptr<Connection>> connections;
  std::vector<LinkStats> links;
  int finished = 0;
};

inline double Now() { return ns3::Simulator::Now().GetSeconds(); }

// fabric.cc: the events
bool Receive(Sim* sim, int index, ns3::Ptr<ns3::NetDevice>, ns3::Ptr<const ns3::Packet> p,
             uint16_t, const ns3::Address&);
void TxDone(Sim* sim, int nic, ns3::Ptr<const ns3::Packet>);
void Dropped(Sim* sim, ns3::Ptr<const ns3::Packet> p);
void Setup(Sim& sim);
// scenario.cc
void ReadScenario(Sim& sim, std::istream& in);
// telemetry.cc
void RunSliced(Sim& sim);
// results.cc
void Report(Sim& sim, double wall);

}  // namespace fabric
