// A switch port's buffer: a full queue drops its oldest packet, as Linux's
// pfifo_head_drop, so the newest data, whose loss the sender would find last,
// gets through.
#pragma once

#include "ns3/network-module.h"

namespace fabric {

class HeadDropQueue : public ns3::Queue<ns3::Packet> {
 public:
  static ns3::TypeId GetTypeId() {
    static ns3::TypeId tid = ns3::TypeId("fabric::HeadDropQueue")
                                 .SetParent<ns3::Queue<ns3::Packet>>()
                                 .AddConstructor<HeadDropQueue>();
    return tid;
  }
  bool Enqueue(ns3::Ptr<ns3::Packet> item) override {
    // DoRemove counts the head as dropped (GetTotalDroppedPackets)
    if (GetCurrentSize().GetValue() + 1 > GetMaxSize().GetValue()) DoRemove(GetContainer().begin());
    return DoEnqueue(GetContainer().end(), item);
  }
  ns3::Ptr<ns3::Packet> Dequeue() override { return DoDequeue(GetContainer().begin()); }
  ns3::Ptr<ns3::Packet> Remove() override { return DoRemove(GetContainer().begin()); }
  ns3::Ptr<const ns3::Packet> Peek() const override { return DoPeek(GetContainer().begin()); }
};

}  // namespace fabric
