"""The simulator's roce transport decides as the agent's (no root, no ns-3).

``fabric/simulation/ns3/transport.h`` (the simulator's swift / loss / none control,
Window and SendQP) includes no ns-3, so a small harness compiles it natively and is
fed seeded vectors the Python twin (:mod:`fabric.agent.roce.cc`,
:mod:`fabric.agent.roce.send`) answers too; every output must be the same double.
"""

from __future__ import annotations

import math
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from fabric.agent.roce.bth import Ack
from fabric.agent.roce.cc import LossControl, NoControl, SwiftControl
from fabric.agent.roce.send import CcConfig, SendQP, Window
from fabric.simulation.build import FLAGS, SOURCE_DIR

COMPILER = shutil.which("g++")
HARNESS = r"""
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include "transport.h"
using namespace fabric;
static void P(double x) { std::printf(" %.17g", x); }
// a double, "inf" and "-inf" included (operator>> reads neither)
static double D(std::istream& f) { std::string s; f >> s; return std::stod(s); }
int main() {
  Config cfg;
  Window win;
  SendQP q;
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream f(line);
    std::string op;
    f >> op;
    if (op == "ack" || op == "loss") {  // one control decision from a given state
      Control c;
      c.cfg = &cfg;
      int ss;
      double cwnd;
      f >> c.name >> c.hops;
      cfg.packetTime = D(f);
      c.baseDelay = D(f);
      c.lastDecrease = D(f);
      f >> ss;
      cwnd = D(f);
      c.slowStart = ss;
      if (op == "ack") {
        int newly;
        double delay, now, rtt;
        f >> newly;
        delay = D(f);
        now = D(f);
        rtt = D(f);
        cwnd = c.OnAck(cwnd, newly, delay, now, rtt);
      } else {
        cwnd = c.OnLoss(cwnd);
      }
      P(cwnd); P(c.baseDelay); P(c.lastDecrease); P(c.slowStart); P(c.decreases);
      std::printf("\n");
      continue;
    }
    if (op == "qp") {  // a fresh connection and message
      int count;
      win = Window();
      win.cfg = &cfg;
      win.control.cfg = &cfg;
      f >> win.control.name >> count;
      cfg.packetTime = 1e-3;
      win.cwnd = win.control.InitialWindow();
      win.rto = cfg.initRto;
      q = SendQP();
      q.win = &win;
      q.count = count;
      q.lastLen = cfg.mtu;
      q.state.assign(count, UNSENT);
      q.retx.assign(count, 0);
      q.sentAt.assign(count, 0);
      q.sentTx.assign(count, 0);
    } else if (op == "send") {
      double now;
      f >> now;
      int psn = -1;
      if (q.CanSend(now)) psn = q.Next(now).first;
      std::printf("%d", psn);
    } else if (op == "ackp") {
      Meta a;
      double now;
      int n;
      f >> now >> a.cum >> a.trigger >> a.duplicates >> n;
      a.sacked.resize(n);
      for (int& p : a.sacked) f >> p;
      std::printf("%d", q.OnAck(a, now));
    } else if (op == "timer") {
      double now;
      f >> now;
      q.OnTimer(now);
      std::printf("0");
    }
    P(win.cwnd); P(win.srtt); P(win.rttvar); P(win.rto); P(win.latestRtt);
    P(q.backoff); P(win.reorderMult); P(win.inflight); P(q.lostDetected); P(q.rtoCount);
    P(q.retransmitted); P(q.failed); P(q.LossThreshold()); P(q.Deadline());
    std::printf("\n");
  }
  return 0;
}
"""


def build(tmp: Path, exact: bool) -> Path:
    """The harness, compiled as the simulator is (build.FLAGS); ``exact`` without fused
    multiply-adds, which -march=native lets g++ contract ``a * b + c`` into (rounded
    once, so up to an ulp off Python's two roundings)."""
    if COMPILER is None:
        pytest.skip("g++ is not installed (scripts/setup.sh --ns3 installs it)")
    source = tmp / "harness.cc"
    source.write_text(HARNESS)
    binary = tmp / f"harness-{exact}"
    subprocess.run([COMPILER, *FLAGS, *(["-ffp-contract=off"] if exact else []), "-Wall",
                    "-Werror", f"-I{SOURCE_DIR}", str(source), "-o", str(binary)],
                   check=True, capture_output=True, text=True)
    return binary


def same(c_row: list[float], py_row: list[float], exact: bool) -> bool:
    """Equal, or (fused) within a few ulps with every whole number equal."""
    if exact or c_row == py_row:
        return c_row == py_row
    return len(c_row) == len(py_row) and all(
        a == b if float(b).is_integer() or math.isinf(b) else math.isclose(a, b, rel_tol=1e-13)
        for a, b in zip(c_row, py_row))


def run(binary: Path, lines: list[str]) -> list[list[float]]:
    out = subprocess.run([str(binary)], input="".join(f"{x}\n" for x in lines),
                         capture_output=True, text=True, check=True).stdout
    return [[float(v) for v in row.split()] for row in out.splitlines()]


def control_vectors(count: int) -> list[tuple]:
    """Control decisions around swift's target, its once-per-RTT cut and max_mdf."""
    rng = random.Random(20261208)
    out = []
    for i in range(count):
        name = rng.choice(["swift"] * 6 + ["loss", "none"])
        hops = rng.choice([2, 2, 4, 6])
        pt = rng.choice([1e-3, 4.2e-3, 3.3e-7])
        base = rng.choice([math.inf, pt * rng.uniform(0.1, 4)])
        last = rng.choice([-math.inf, rng.uniform(0, 1)])
        slow = rng.random() < 0.4
        cwnd = rng.choice([rng.uniform(0.05, 1), rng.uniform(1, 40), rng.uniform(40, 600)])
        # delays from below the base to far above the target (0: not measured)
        delay = rng.choice([0.0, pt * rng.uniform(0.05, 40), pt * rng.uniform(1, 12)])
        now = rng.uniform(0, 2)
        rtt = rng.choice([rng.uniform(1e-4, 0.5), now - last if math.isfinite(last) else 0.1])
        op = "loss" if i % 9 == 0 else "ack"
        out.append((op, name, hops, pt, base, last, slow, cwnd, rng.randint(0, 20), delay,
                    now, rtt))
    return out


def python_control(v: tuple) -> list[float]:
    op, name, hops, pt, base, last, slow, cwnd, newly, delay, now, rtt = v
    if name == "swift":
        c = SwiftControl(pt, 512.0, hops)
        c.base_delay, c.last_decrease, c.slow_start = base, last, slow
    else:
        c = LossControl(512.0) if name == "loss" else NoControl(512.0)
    if op == "ack":
        cwnd = c.on_ack(cwnd, newly, delay or None, now, rtt)
    else:
        cwnd = c.on_loss(cwnd)
    if name != "swift":  # the C++ control keeps swift's fields for every algorithm
        return [cwnd, base, last, float(slow), 0.0]
    return [cwnd, c.base_delay, c.last_decrease, float(c.slow_start), float(c.decreases)]


def c_line(v: tuple) -> str:
    op, name, hops, pt, base, last, slow, cwnd, newly, delay, now, rtt = v
    head = f"{op} {name} {hops} {pt!r} {base!r} {last!r} {int(slow)} {cwnd!r}"
    return head if op == "loss" else f"{head} {newly} {delay!r} {now!r} {rtt!r}"


def qp_scripts(count: int, rng: random.Random) -> list[tuple[str, int, list[tuple]]]:
    """Message-long scripts of sends, reordered and lost ACKs and timer expiries."""
    scripts = []
    for _ in range(count):
        name = rng.choice(["loss", "none", "swift"])
        packets = rng.randint(1, 40)
        ops: list[tuple] = []
        now, sent, delivered = 0.0, [], set()
        for _ in range(rng.randint(5, 60)):
            # time always moves: an RTT sample of exactly 0 (impossible on a simulated
            # link) is where the twins part (Python's ``srtt or rto`` takes 0 for none)
            now += rng.choice([1e-6, rng.uniform(1e-6, 0.01), rng.uniform(1e-6, 0.3), 1.5])
            kind = rng.random()
            if kind < 0.45:
                ops.append(("send", now))
                sent.append(len(ops) - 1)
            elif kind < 0.9 and sent:
                got = sorted(rng.sample(range(packets), rng.randint(0, min(packets, 6))))
                delivered.update(got)
                cum = 0
                while cum in delivered:
                    cum += 1
                sacked = [p for p in sorted(delivered) if p > cum]
                trigger = rng.choice(got) if got else rng.randrange(packets)
                ops.append(("ackp", now, cum, trigger, rng.choice([0, 0, 0, 1, 2]), sacked))
            else:
                ops.append(("timer", now))
        scripts.append((name, packets, ops))
    return scripts


def python_qp(name: str, packets: int, ops: list[tuple]) -> list[list[float]]:
    control = {"loss": LossControl(512.0), "none": NoControl(512.0),
               "swift": SwiftControl(1e-3, 512.0, 2)}[name]
    q = SendQP(1, packets * 4096, 4096, window=Window(CcConfig(), control))
    rows, dups = [], 0
    for op in ops:
        if op[0] == "send":
            head = float(q.next_packet(op[1])[0]) if q.can_send(op[1]) else -1.0
        elif op[0] == "ackp":
            _, now, cum, trigger, more, sacked = op
            dups += more  # the receiver's count only grows
            mask = sum(1 << (p - cum - 1) for p in sacked)
            bitmap = mask.to_bytes((mask.bit_length() + 7) // 8, "little") if mask else b""
            head = float(q.on_ack(Ack(1, cum, 0, 0, trigger, dups, 0, bitmap), now))
        else:
            q.on_timer(op[1])
            head = 0.0
        w = q.win
        loss = getattr(q, "loss", q)  # its loss recovery (the message itself, before)
        threshold = loss.threshold() if hasattr(loss, "threshold") else q.loss_threshold()
        deadline = q.deadline()
        rows.append([head, w.cwnd, -1.0 if w.srtt is None else w.srtt, w.rttvar, w.rto,
                     w.latest_rtt, loss.backoff, w.reorder_mult, w.inflight, q.lost_detected,
                     q.rto_count, q.retransmitted, float(bool(q.failed)),
                     -1.0 if threshold is None else threshold,
                     math.inf if deadline is None else deadline])
    return rows


def c_qp_lines(name: str, packets: int, ops: list[tuple]) -> list[str]:
    lines, dups = [f"qp {name} {packets}"], 0
    for op in ops:
        if op[0] == "ackp":
            _, now, cum, trigger, more, sacked = op
            dups += more
            lines.append(f"ackp {now!r} {cum} {trigger} {dups} {len(sacked)} "
                         + " ".join(map(str, sacked)))
        else:
            lines.append(f"{op[0]} {op[1]!r}")
    return lines


@pytest.mark.parametrize("exact", [True, False], ids=["no-fma", "as-built"])
def test_swift_loss_and_none_move_the_window_alike(tmp_path: Path, exact: bool) -> None:
    """3,000 decisions on an ACK or a loss: the window, swift's base delay, its
    once-per-RTT cut (by at most max_mdf) and its slow start."""
    cases = control_vectors(3000)
    got = run(build(tmp_path, exact), [c_line(v) for v in cases])
    expected = [python_control(v) for v in cases]
    for v, c_row, py_row in zip(cases, got, expected):
        assert same(c_row, py_row, exact), f"vector {v}: C++ {c_row}, Python {py_row}"
    decreases = sum(1 for v, row in zip(cases, got) if v[0] == "ack" and row[4])
    capped = sum(1 for v, row in zip(cases, got)
                 if v[0] == "ack" and row[4] and row[0] == max(v[7] * 0.5, 0.05))
    assert decreases > 200 and capped > 20  # cuts happen, some at max_mdf


@pytest.mark.parametrize("exact", [True, False], ids=["no-fma", "as-built"])
def test_rtt_rto_backoff_and_rack_decide_alike(tmp_path: Path, exact: bool) -> None:
    """500 message-long scripts (a few thousand steps): the RTT estimate and the RTO,
    its backoff, RACK's loss threshold and reordering allowance, what is declared
    lost and resent, the timer's deadline and giving up."""
    scripts = qp_scripts(500, random.Random(20261209))
    lines = [line for s in scripts for line in c_qp_lines(*s)]
    got = run(build(tmp_path, exact), lines)
    rows = iter(got)
    steps = 0
    for name, packets, ops in scripts:
        next(rows)  # the qp line's state
        for op, py_row in zip(ops, python_qp(name, packets, ops)):
            c_row = next(rows)
            assert same(c_row, py_row, exact), f"{name} {packets} packets, at {op}: C++ {c_row}, " \
                                    f"Python {py_row}"
            steps += 1
    assert steps > 2000
    assert sum(r[9] for r in got) > 0 and max(r[6] for r in got) > 1  # losses, backoff
    assert max(r[7] for r in got) > 1  # a widened reordering allowance
