// The roce transport's sender and receiver state, the twin of fabric/agent/roce
// (cc.py's swift / loss / none, send.py's Window and SendQP, recv.py's RecvQP):
// RACK-style loss detection with a reordering allowance, selective repeat,
// retransmission timeouts with backoff. No ns-3 here: the event glue is
// fabric.cc's, so tests/unit/test_transport_twins.py compiles this natively and
// checks its decisions against the Python ones.
#pragma once

#include "config.h"
#include "packet.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <string>
#include <utility>
#include <vector>

namespace fabric {

struct Transfer;

// ---------------------------------------------------------------- swift and friends
struct Control {
  const Config* cfg = nullptr;
  std::string name;
  int hops = 2;
  double baseDelay = INF, lastDecrease = -INF;
  bool slowStart = true;
  int decreases = 0;

  double Allowance() const { return cfg->endpointAllowance + hops * cfg->hopAllowance; }
  double InitialWindow() const {
    if (name == "swift") return cfg->endpointAllowance + hops;
    if (name == "none") return cfg->maxCwnd;
    return cfg->initCwnd;
  }
  double Target() const {
    if (std::isinf(baseDelay)) return INF;
    double base = std::min(baseDelay, hops * cfg->baseCap * cfg->packetTime);
    return base + Allowance() * cfg->packetTime;
  }
  double OnAck(double cwnd, int newly, double delay, double now, double rtt) {
    if (name == "none") return cfg->maxCwnd;
    if (name == "loss") return std::min(cwnd + newly / std::max(cwnd, 1.0), cfg->maxCwnd);
    if (delay <= 0) return cwnd;
    baseDelay = std::min(baseDelay, delay);
    double target = Target();
    double allowed = Allowance() * cfg->packetTime;
    if (delay > target - allowed / 2) slowStart = false;
    if (delay < target) {
      if (slowStart) {
        cwnd += newly;
        slowStart = cwnd < Allowance();
      } else if (newly) {
        cwnd += cwnd >= 1 ? cfg->ai * newly / cwnd : cfg->ai * newly;
      }
    } else if (now - lastDecrease >= rtt) {
      cwnd *= std::max(1 - cfg->beta * (delay - target) / delay, 1 - cfg->maxMdf);
      lastDecrease = now;
      ++decreases;
    }
    return std::min(std::max(cwnd, cfg->minCwnd), cfg->maxCwnd);
  }
  double OnLoss(double cwnd) {
    if (name == "none") return cwnd;
    if (name == "loss") return std::max(1.0, cwnd / 2);
    slowStart = false;
    return std::max(cwnd * (1 - cfg->maxMdf), cfg->minCwnd);
  }
};

enum State : uint8_t { UNSENT = 0, IN_FLIGHT = 1, LOST = 2, ACKED = 3 };

// One connection's shared congestion state (fabric.agent.roce.send.Window).
struct Window {
  const Config* cfg = nullptr;  // the scenario's (its control's too)
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

  const Config& Cfg() const { return *win->cfg; }
  bool Done() const { return acked == count; }
  int Length(int psn) const { return psn == count - 1 ? lastLen : Cfg().mtu; }
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
        win->reorderMult = std::min(win->reorderMult + 1, Cfg().maxReorderMult);
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
    win->rto = std::min(std::max(win->srtt + 4 * win->rttvar, Cfg().minRto), Cfg().maxRto);
  }
  double LossThreshold() const {
    if (win->srtt < 0) return -1;
    double rtt = std::max(win->srtt, win->latestRtt);
    double allowance = win->reorderMult * std::max(Cfg().minReorder, rtt / 4);
    return rtt * Cfg().rttFactor + allowance;
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
      if (++win->episodesSinceWidening >= Cfg().reorderPersist) {
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
    if (++timeoutsInRow > Cfg().maxTimeouts) {
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
    if (win->rto * backoff > Cfg().maxRto) backoff = std::max(1, (int)(Cfg().maxRto / win->rto));
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

}  // namespace fabric
