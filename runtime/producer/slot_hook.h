// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// An optional per-slot hook every producer runs through its SlotWriter (GPU staging,
// gpu/gpu_stager.h). BeforeFill runs after the slot is acquired and before anything writes
// it; BeforePublish runs once the slot is complete (tail and descriptor written) and before
// consumers see it. An error fails the stream.
#pragma once

#include <functional>
#include <string>

#include "batchcast/status.h"
#include "transport/shm/ring_leader.h"

namespace batchcast::producer {

class SlotHook {
 public:
  virtual ~SlotHook() = default;
  virtual Status BeforeFill(const shm::SlotWrite& slot) = 0;
  virtual Status BeforePublish(const shm::SlotWrite& slot) = 0;
  // Once, when the stream has ended (a hook a Producer owns: AdoptSlotHook): stops what it
  // runs beside the stream (GPU staging's relays) and waits for its work in flight.
  virtual Status Finish() { return Status::Ok(); }
};

// What a hook attaches to: a producer's host ring, the address its consumers attached to,
// and how to install (or, with null, remove) the hook (Producer::staging_target()).
struct StagingTarget {
  shm::RingLeader* ring = nullptr;
  std::string address;  // socket name
  std::function<void(SlotHook*)> set_hook;
};

}  // namespace batchcast::producer
