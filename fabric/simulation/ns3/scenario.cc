// The scenario file fabric/simulation/scenario.py writes (its format is documented
// there): config, nodes, NICs, links, routes, connections, pins and transfers.
#include "fabric.h"

#include <map>
#include <sstream>

using namespace ns3;

namespace fabric {

namespace {

uint32_t ParseIp(const std::string& s) {
  uint32_t a, b, c, d;
  char dot;
  std::istringstream in(s);
  in >> a >> dot >> b >> dot >> c >> dot >> d;
  return (a << 24) | (b << 16) | (c << 8) | d;
}

}  // namespace

void ReadScenario(Sim& sim, std::istream& in) {
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
      if (key == "cc") f >> sim.cfg.cc;
      else if (key == "entropy") f >> sim.cfg.entropy;
      else {
        double v;
        f >> v;
        std::map<std::string, double*> d = {
            {"mtu", nullptr}, {"ack_every", nullptr}, {"max_reorder_mult", nullptr},
            {"reorder_persist", nullptr}, {"max_timeouts", nullptr},
            {"ack_delay", &sim.cfg.ackDelay}, {"packet_time", &sim.cfg.packetTime},
            {"init_cwnd", &sim.cfg.initCwnd}, {"max_cwnd", &sim.cfg.maxCwnd},
            {"min_rto", &sim.cfg.minRto}, {"max_rto", &sim.cfg.maxRto}, {"init_rto", &sim.cfg.initRto},
            {"rtt_factor", &sim.cfg.rttFactor}, {"min_reorder", &sim.cfg.minReorder},
            {"ai", &sim.cfg.ai}, {"beta", &sim.cfg.beta}, {"max_mdf", &sim.cfg.maxMdf},
            {"endpoint_allowance", &sim.cfg.endpointAllowance},
            {"hop_allowance", &sim.cfg.hopAllowance}, {"base_cap", &sim.cfg.baseCap},
            {"min_cwnd", &sim.cfg.minCwnd}, {"end_time", &sim.cfg.endTime},
            {"telemetry_interval", &sim.cfg.telemetryInterval},
            {"default_weight", &sim.cfg.defaultWeight}, {"ar", &sim.cfg.ar},
            {"ar_keep", &sim.cfg.arKeep}, {"ar_frame_bytes", &sim.cfg.arFrameBytes}, {"ar_flowlet_gap", &sim.cfg.arFlowletGap},
            {"window_start", &sim.cfg.windowStart}, {"window_end", &sim.cfg.windowEnd}};
        if (!d.count(key)) Fail("line " + std::to_string(lineNo) + ": unknown config " + key);
        if (key == "mtu") sim.cfg.mtu = (int)v;
        else if (key == "ack_every") sim.cfg.ackEvery = (int)v;
        else if (key == "max_reorder_mult") sim.cfg.maxReorderMult = (int)v;
        else if (key == "reorder_persist") sim.cfg.reorderPersist = (int)v;
        else if (key == "max_timeouts") sim.cfg.maxTimeouts = (int)v;
        else *d[key] = v;
      }
    } else if (kind == "node") {
      Node_ n;
      std::string role;
      f >> n.name >> role >> n.basis;
      n.host = role == "host";
      n.node = CreateObject<Node>();
      sim.nodes.push_back(std::move(n));
    } else if (kind == "nic") {
      Nic n;
      std::string ip;
      f >> n.host >> n.port >> ip;
      n.ip = ParseIp(ip);
      sim.nicOfIp[n.ip] = sim.nics.size();
      sim.nics.push_back(std::move(n));
    } else if (kind == "link") {
      int a, pa, b, pb, buffer;
      double rate, delay;
      f >> a >> pa >> b >> pb >> rate >> delay >> buffer;
      PointToPointHelper p2p;
      p2p.SetDeviceAttribute("DataRate", DataRateValue(DataRate((uint64_t)rate)));
      p2p.SetChannelAttribute("Delay", TimeValue(Seconds(delay)));
      NetDeviceContainer devs = p2p.Install(sim.nodes[a].node, sim.nodes[b].node);
      int index = sim.links.size();
      sim.links.emplace_back();
      for (int side = 0; side < 2; ++side) {
        int who = side ? b : a, port = side ? pb : pa;
        Ptr<PointToPointNetDevice> dev = DynamicCast<PointToPointNetDevice>(devs.Get(side));
        Ptr<HeadDropQueue> q = CreateObject<HeadDropQueue>();
        // a host's NIC holds what its transport hands it (one packet at a time)
        q->SetMaxSize(QueueSize(QueueSizeUnit::PACKETS, sim.nodes[who].host ? 1u << 20 : buffer));
        dev->SetQueue(q);
        q->TraceConnectWithoutContext("Drop", MakeBoundCallback(&Dropped, &sim));
        sim.links[index].queue[side] = q;
        dev->SetReceiveCallback(MakeBoundCallback(&Receive, &sim, who));
        if (sim.nodes[who].host) {
          int nic = -1;
          for (size_t i = 0; i < sim.nics.size(); ++i)
            if (sim.nics[i].host == who && sim.nics[i].port == port) nic = i;
          if (nic < 0) Fail("link to host " + sim.nodes[who].name + " port " + std::to_string(port) +
                            " before its nic record");
          dev->TraceConnectWithoutContext("PhyTxEnd", MakeBoundCallback(&TxDone, &sim, nic));
        }
        auto& ports = sim.nodes[who].ports;
        if ((int)ports.size() <= port) ports.resize(port + 1);
        ports[port] = Port{dev, index, side ? a : b, side == 0};
        ports[port].bytesPerS = rate / 8;
        ports[port].capS = buffer * (sim.cfg.mtu + DATA_OVERHEAD) / ports[port].bytesPerS;
      }
    } else if (kind == "route") {
      int sw;
      std::string ip;
      f >> sw >> ip;
      std::vector<int> ports;
      int p;
      while (f >> p) ports.push_back(p);
      auto nic = sim.nicOfIp.find(ParseIp(ip));
      if (nic == sim.nicOfIp.end()) Fail("line " + std::to_string(lineNo) + ": route to no NIC");
      if (ports.empty()) Fail("line " + std::to_string(lineNo) + ": route with no port");
      Node_& n = sim.nodes[sw];
      if ((int)n.routes.size() <= nic->second) n.routes.resize(sim.nics.size(), -1);
      auto g = n.groupOf.find(ports);
      if (g == n.groupOf.end()) {
        g = n.groupOf.emplace(ports, (int)n.groups.size()).first;
        Group group;
        group.ports = ports;
        group.SetWeights(std::vector<uint32_t>(ports.size(), (uint32_t)sim.cfg.defaultWeight));
        n.groups.push_back(std::move(group));
      }
      n.routes[nic->second] = g->second;
    } else if (kind == "connection") {
      auto c = std::make_unique<Connection>();
      std::string sip, dip;
      f >> c->index >> sip >> dip >> c->rot;
      c->srcIp = ParseIp(sip);
      c->dstIp = ParseIp(dip);
      if (!sim.nicOfIp.count(c->srcIp) || !sim.nicOfIp.count(c->dstIp))
        Fail("connection " + std::to_string(c->index) + ": unknown address");
      c->nic = sim.nicOfIp[c->srcIp];
      c->peerNic = sim.nicOfIp[c->dstIp];
      int p;
      while (f >> p) c->ports.push_back(p);
      if (c->ports.empty()) Fail("connection " + std::to_string(c->index) + ": no source port");
      c->rot %= c->ports.size();
      c->win.cfg = &sim.cfg;
      c->win.control.cfg = &sim.cfg;
      sim.connections.push_back(std::move(c));
    } else if (kind == "pin") {
      int conn, sw, port;
      f >> conn;
      if (conn < 0 || conn >= (int)sim.connections.size())
        Fail("line " + std::to_string(lineNo) + ": pin of an unknown connection");
      while (f >> sw >> port) sim.connections[conn]->pinned[sw] = port;
    } else if (kind == "transfer") {
      auto t = std::make_unique<Transfer>();
      std::string dip;
      f >> t->index >> t->src >> t->dst >> dip >> t->bytes >> t->conn >> t->hops >>
          t->delay >> t->afterStart >> t->afterStartS;
      t->dstIp = ParseIp(dip);
      int d;
      while (f >> d) t->after.push_back(d);
      sim.transfers.push_back(std::move(t));
    } else {
      Fail("line " + std::to_string(lineNo) + ": unknown record " + kind);
    }
  }
}

}  // namespace fabric
