// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The node leader: runs a BatchSource once per producer batch, straight into ring slot
// memory, and publishes each batch to every attached consumer. Front doors (the MPI
// Runtime, `batchcast serve`, Python) differ only in how they create it and who joins.
//
// With options.resize set the leader executes a progressive-resizing schedule
// (docs/progressive-resizing.md): each epoch is the schedule's producer batches, each of
// one image size, decoded at that size, with its LR factor and batch scale in the slot
// descriptor so that consumers carve batches scaled the same way.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "batchcast/options.h"
#include "batchcast/status.h"
#include "node/batch_source.h"
#include "node/stream.h"
#include "schedule/resize_schedule.h"
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
  // With a resize schedule: also print its plan to stdout (it is always logged at INFO).
  bool print_plan = true;
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
  // The progressive-resizing schedule being executed; null without options.resize.
  const schedule::ResizeSchedule* resize_schedule() const { return schedule_.get(); }

 private:
  Leader(const LeaderConfig& config, std::unique_ptr<BatchSource> source, int64_t producer_batch);
  // What producer batch k of the current epoch holds and how it is scaled.
  struct BatchPlan {
    std::span<const int64_t> samples;
    int image_size = 0;          // 0: the source's default size (no schedule)
    float lr_factor = 1.0f;
    uint32_t scale_num = 0, scale_den = 0;  // W_full^2, W^2 (0: no scaling)
  };
  Status InitResize(int64_t producer_batch, uint32_t max_consumer_batch);
  void SizeSlots(int64_t producer_batch, uint32_t max_consumer_batch, uint64_t* slot_bytes);
  // Prepares epoch e; returns its number of producer batches.
  Result<int64_t> BeginEpoch(uint64_t epoch);
  BatchPlan PlanBatch(uint64_t epoch, int64_t k);
  Status ProduceOne(uint64_t epoch, int64_t k, int64_t batches_per_epoch);

  LeaderConfig config_;
  std::unique_ptr<BatchSource> source_;
  StreamPlan plan_;
  std::unique_ptr<shm::RingLeader> ring_;
  pipeline::SampleLayout layout_;
  uint64_t labels_offset_ = 0, ids_offset_ = 0, capacity_samples_ = 0;
  uint64_t images_bytes_ = 0;      // room for images in a slot
  std::unique_ptr<schedule::ResizeSchedule> schedule_;
  std::vector<schedule::ProducerBatch> epoch_batches_;  // the current epoch's (with schedule_)
  uint64_t epoch_samples_ = 0;     // samples the current epoch covers
  uint32_t scale_cap_ = 0;         // the spec's max_batch, for consumers' scaled batches
  uint32_t lr_rule_ = 0;           // shm::LrRuleCode of the spec's lr rule
  std::atomic<bool> abort_{false};
  LeaderStats stats_;
  SlotHook* slot_hook_ = nullptr;
};

}  // namespace batchcast::node
