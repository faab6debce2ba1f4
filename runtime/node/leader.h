// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The node leader: runs a BatchSource once per producer batch, straight into ring slot
// memory, and publishes each batch to every attached consumer. Front doors (the MPI
// Runtime, `batchcast serve`, Python) differ only in how they create it and who joins.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "batchcast/options.h"
#include "batchcast/status.h"
#include "node/batch_source.h"
#include "node/stream.h"
#include "telemetry/collector.h"
#include "transport/shm/ring_leader.h"

namespace batchcast::node {

struct LeaderConfig {
  Options options;               // seed, epochs, shuffle, producer_batch, ring_slots, heartbeat
  int expected_consumers = 0;    // wait for this many joins before the first batch
  uint32_t max_consumer_batch = 0;  // 0: options.batch_size
  std::string socket_name;       // abstract socket name, unique per node
  std::string job;
  int rank = -1;
  int64_t join_timeout_ms = 120000;
  // End the stream once every admitted consumer has left (MPI jobs). A service keeps going.
  bool end_when_empty = true;
  telemetry::Collector* collector = nullptr;  // optional; not owned
};

struct LeaderStats {
  int64_t producer_batches = 0;
  int64_t samples_produced = 0;
  int64_t samples_skipped = 0;
  int64_t tail_copies = 0;
  int64_t slot_wait_ns = 0;      // backpressure: waiting for consumers to free a slot
  int64_t fill_ns = 0;           // the source filling slots (decode etc.)
};

// Optional per-slot hook (GPU staging, node/gpu_stager.h). BeforeFill runs after the
// slot is acquired and before the source writes it; BeforePublish runs once the slot is
// complete (descriptor filled) and before consumers see it. An error fails the stream.
class SlotHook {
 public:
  virtual ~SlotHook() = default;
  virtual Status BeforeFill(const shm::SlotWrite& slot) = 0;
  virtual Status BeforePublish(const shm::SlotWrite& slot) = 0;
};

class Leader {
 public:
  static Result<std::unique_ptr<Leader>> Create(const LeaderConfig& config,
                                                std::unique_ptr<BatchSource> source);
  // Produces the stream: options.epochs epochs, then ends it. Returns the first error.
  Status Run();
  // Asks Run() to stop and fails the stream with `why` (consumers see the message).
  void Abort(const std::string& why);
  // Blocks until no consumer is attached, or timeout_ms passes.
  Status WaitUntilEmpty(int64_t timeout_ms);

  shm::RingLeader& ring() { return *ring_; }
  const std::string& address() const { return config_.socket_name; }
  LeaderStats stats() const { return stats_; }
  int64_t producer_batch() const { return plan_.producer_batch(); }
  // Installs `hook` (not owned; must outlive Run()). Call before Run().
  void SetSlotHook(SlotHook* hook) { slot_hook_ = hook; }

 private:
  Leader(const LeaderConfig& config, std::unique_ptr<BatchSource> source, int64_t producer_batch);
  Status ProduceOne(uint64_t epoch, int64_t k, int64_t batches_per_epoch);

  LeaderConfig config_;
  std::unique_ptr<BatchSource> source_;
  StreamPlan plan_;
  std::unique_ptr<shm::RingLeader> ring_;
  pipeline::SampleLayout layout_;
  uint64_t labels_offset_ = 0, ids_offset_ = 0, capacity_samples_ = 0;
  std::atomic<bool> abort_{false};
  LeaderStats stats_;
  SlotHook* slot_hook_ = nullptr;
};

}  // namespace batchcast::node
