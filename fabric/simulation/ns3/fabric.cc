// The simulation's events: packets through switches, NICs sending, the transport's
// receivers and senders, their timers and the schedule's dependencies.
#include "fabric.h"

#include <algorithm>
#include <cmath>

using namespace ns3;

namespace fabric {

// The delay until ``at``, rounded up to the simulator's nanosecond and at least one:
// a timer must fire when its condition holds, not a rounding error before it.
Time Until(double at) {
  return NanoSeconds(std::max<int64_t>(1, (int64_t)std::ceil((at - Now()) * 1e9)));
}


void StartTransfer(Sim* sp, Transfer* t);

// A packet of ``wireBytes`` on the wire (Ethernet's header counted, as the
// emulator's shapers count it): with ns-3's point-to-point header, as many bytes.
Ptr<Packet> MakePacket(Sim& sim, int wireBytes, Meta meta) {
  Ptr<Packet> p = Create<Packet>(wireBytes - PPP_HEADER);
  sim.metas.emplace(p->GetUid(), std::move(meta));
  return p;
}

void SendOut(Sim& sim, Node_& n, int port, Ptr<Packet> p) {
  Port& pt = n.ports[port];
  LinkStats& ls = sim.links[pt.link];
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
void Dropped(Sim* sim, Ptr<const Packet> p) { sim->metas.erase(p->GetUid()); }

void Kick(Sim& sim, int nic);
void DependencyDone(Sim& sim, Transfer* t);
void ArmTimer(Sim& sim, Transfer* t);

// ---- receiving
void SendAck(Sim& sim, Transfer* t) {
  RecvQP& r = *t->rq;
  Connection& c = *sim.connections[t->conn];
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
  sim.nics[nic].control.push_back(MakePacket(sim, wire, std::move(a)));
  Kick(sim, nic);
}

void AckTimer(Sim* sp, Transfer* t, uint64_t gen) {
  Sim& sim = *sp;
  if (t->rq->ackGen == gen && t->rq->pending) SendAck(sim, t);
}

void OnData(Sim& sim, const Meta& m) {
  Transfer* t = sim.transfers[m.msg].get();
  RecvQP& r = *t->rq;
  Connection& c = *sim.connections[t->conn];
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
  double echoExcess = (sim.cfg.endpointAllowance + t->hops * sim.cfg.hopAllowance) * sim.cfg.packetTime;
  if (m.echoWanted && (owdNs - c.baseOwdNs) <= std::llround(echoExcess * 1e9) &&
      (int)r.echo.size() < MAX_ECHO)
    r.echo.push_back(m.sport);
  bool urgent;
  if (r.got[m.psn]) {
    ++r.duplicates;
    urgent = true;
  } else {
    if (t->atWindowStart < 0 && now >= sim.cfg.windowStart) t->atWindowStart = r.bytes;
    if (t->atWindowEnd < 0 && now >= sim.cfg.windowEnd) t->atWindowEnd = r.bytes;
    r.got[m.psn] = 1;
    r.bytes += m.len;
    if (m.psn < r.maxSeen) ++r.outOfOrder; else r.maxSeen = m.psn;
    if (m.psn == r.cum)
      while (r.cum < r.count && r.got[r.cum]) ++r.cum;
    if (!r.pending) r.pendingSince = now;
    ++r.pending;
    urgent = m.ackreq || r.pending >= sim.cfg.ackEvery || r.Complete();
  }
  bool done = t->recvEnd < 0 && r.Complete();
  if (done) t->recvEnd = now;
  if (urgent) {
    SendAck(sim, t);
  } else if (r.pending == 1) {
    Simulator::Schedule(Seconds(sim.cfg.ackDelay), &AckTimer, &sim, t, r.ackGen);
  }
  if (done) DependencyDone(sim, t);
}

void OnAckPacket(Sim& sim, const Meta& m) {
  Transfer* t = sim.transfers[m.msg].get();
  SendQP& s = *t->sq;
  if (s.Done() || s.failed) return;
  Connection& c = *sim.connections[t->conn];
  if (sim.cfg.entropy == "recycle")
    for (uint16_t p : m.echo)
      if (c.recycled.size() < c.ports.size()) c.recycled.push_back(p);
  double now = Now();
  s.OnAck(m, now);
  if (s.Done()) {
    t->sendEnd = now;
    DependencyDone(sim, t);
  } else {
    ArmTimer(sim, t);
  }
  Kick(sim, c.nic);
}

bool Receive(Sim* sp, int index, Ptr<NetDevice>, Ptr<const Packet> p, uint16_t,
             const Address&) {
  Sim& sim = *sp;
  auto it = sim.metas.find(p->GetUid());
  if (it == sim.metas.end()) return true;
  Node_& n = sim.nodes[index];
  if (n.host) {
    Meta m = std::move(it->second);
    sim.metas.erase(it);
    if (m.ack) OnAckPacket(sim, m); else OnData(sim, m);
    return true;
  }
  const Meta& m = it->second;
  if (m.dstNic < 0 || m.dstNic >= (int)n.routes.size() || n.routes[m.dstNic] < 0)
    return true;  // no route: dropped
  const Group& g = n.groups[n.routes[m.dstNic]];
  int port = g.ports.size() == 1 ? g.ports[0]
             : sim.cfg.ar          ? AdaptivePort(sim.cfg, n.ports, n.basis, n.flowlets, g, m, Now())
                               : g.Pick(SelectHash(m.srcIp, m.dstIp, 17, m.sport, m.dport,
                                                   n.basis));
  if (!m.ack) {
    const auto& pinned = sim.connections[sim.transfers[m.msg]->conn]->pinned;
    auto pin = pinned.find(index);
    if (pin != pinned.end()) port = pin->second;
  }
  // the same packet (and uid) goes on: nothing else holds it once its device handed it up
  SendOut(sim, n, port, ConstCast<Packet>(p));
  return true;
}

// ---- sending
void TimerFired(Sim* sp, Transfer* t, uint64_t gen) {
  Sim& sim = *sp;
  SendQP& s = *t->sq;
  if (gen != s.timerGen || s.Done() || s.failed) return;
  s.timerAt = INF;
  s.OnTimer(Now());
  if (s.failed) {
    DependencyDone(sim, t);
    return;
  }
  ArmTimer(sim, t);
  Kick(sim, sim.connections[t->conn]->nic);
}

void ArmTimer(Sim& sim, Transfer* t) {
  SendQP& s = *t->sq;
  double due = s.Deadline();
  if (std::isinf(due) || due >= s.timerAt) return;
  s.timerAt = due;
  Simulator::Schedule(Until(due), &TimerFired, &sim, t, ++s.timerGen);
}

void KickEvent(Sim* sp, int nic, uint64_t gen) {
  Sim& sim = *sp;
  if (gen != sim.nics[nic].kickGen) return;
  sim.nics[nic].kickAt = INF;
  Kick(sim, nic);
}

void Kick(Sim& sim, int index) {
  Nic& n = sim.nics[index];
  if (n.busy) return;
  Node_& host = sim.nodes[n.host];
  double now = Now();
  if (!n.control.empty()) {
    Ptr<Packet> p = n.control.front();
    n.control.pop_front();
    n.busy = true;
    SendOut(sim, host, n.port, p);
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
    m.echoWanted = sim.cfg.entropy == "recycle";
    m.sentAt = now;
    int pad = (4 - m.len % 4) % 4;
    n.busy = true;
    SendOut(sim, host, n.port, MakePacket(sim, m.len + pad + DATA_OVERHEAD, std::move(m)));
    ArmTimer(sim, ready);
    return;
  }
  if (!std::isinf(wake) && wake < n.kickAt) {
    n.kickAt = wake;
    Simulator::Schedule(Until(wake), &KickEvent, &sim, index, ++n.kickGen);
  }
}

void TxDone(Sim* sp, int nic, Ptr<const Packet>) {
  Sim& sim = *sp;
  sim.nics[nic].busy = false;
  Kick(sim, nic);
}

// Retire sim.finished messages from their connection's front and from the NIC's turn.
void Retire(Sim& sim, Transfer* t) {
  Connection& c = *sim.connections[t->conn];
  auto it = std::find(c.senders.begin(), c.senders.end(), t);
  if (it != c.senders.end()) c.senders.erase(it);
  if (c.senders.empty()) {
    auto& active = sim.nics[c.nic].active;
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

void TryStart(Sim& sim, Transfer* t) {
  if (t->started) return;
  for (int d : t->after)
    if (!MetFor(sim.transfers[d].get(), t->src)) return;
  if (t->afterStart >= 0) {
    Transfer* a = sim.transfers[t->afterStart].get();
    if (a->sendStart < 0) return;
  }
  double now = Now();
  double at = now + t->delay;
  if (t->afterStart >= 0) at = std::max(at, sim.transfers[t->afterStart]->sendStart + t->afterStartS);
  t->started = true;
  Simulator::Schedule(Seconds(at - now), &StartTransfer, &sim, t);
}

void DependencyDone(Sim& sim, Transfer* t) {
  if (t->sq && (t->sq->Done() || t->sq->failed)) Retire(sim, t);
  if (Finished(t) || (t->sq && t->sq->failed)) {
    ++sim.finished;
    if (sim.finished == (int)sim.transfers.size()) Simulator::Stop();
  }
  for (int d : t->dependents) TryStart(sim, sim.transfers[d].get());
}

void StartTransfer(Sim* sp, Transfer* t) {
  Sim& sim = *sp;
  double now = Now();
  t->sendStart = now;
  Connection& c = *sim.connections[t->conn];
  if (!c.opened) {
    c.opened = true;
    c.win.control.name = sim.cfg.cc;
    c.win.control.hops = t->hops ? t->hops : 2;
    c.win.cwnd = c.win.control.InitialWindow();
    c.win.rto = sim.cfg.initRto;
  }
  if (c.senders.empty()) sim.nics[c.nic].active.push_back(&c);
  c.senders.push_back(t);
  for (int d : t->dependents)
    if (sim.transfers[d]->afterStart == t->index) TryStart(sim, sim.transfers[d].get());
  Kick(sim, c.nic);
}

void Setup(Sim& sim) {
  for (auto& tp : sim.transfers) {
    Transfer* t = tp.get();
    for (int d : t->after) sim.transfers[d]->dependents.push_back(t->index);
    if (t->afterStart >= 0) sim.transfers[t->afterStart]->dependents.push_back(t->index);
    auto sq = std::make_unique<SendQP>();
    sq->t = t;
    sq->win = &sim.connections[t->conn]->win;
    sq->count = (int)((t->bytes + sim.cfg.mtu - 1) / sim.cfg.mtu);
    sq->lastLen = (int)(t->bytes - (int64_t)(sq->count - 1) * sim.cfg.mtu);
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
  for (auto& t : sim.transfers) TryStart(sim, t.get());
}

}  // namespace fabric
