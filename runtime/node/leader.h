// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The node leader: runs a BatchSource once per producer batch, straight into ring slot
// memory, and publishes each batch to every attached consumer. Front doors (the MPI
// Runtime, Python's Leader, `batchcast-run`) differ only in how they create it and who
// joins. Its policy over the producer core (runtime/producer/): the stream plan (or resize
// schedule) says what comes next; producer::Admission says who receives it (late joiners
// are admitted at once and start at the next epoch, or within the late-join window get the
// epoch's start replayed to them alone).
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
#include "producer/abort_reason.h"
#include "producer/admission.h"
#include "producer/batch_source.h"
#include "producer/slot_hook.h"
#include "producer/slot_layout.h"
#include "producer/slot_writer.h"
#include "producer/stream_plan.h"
#include "schedule/resize_schedule.h"
#include "telemetry/collector.h"
#include "transport/shm/ring_leader.h"

namespace batchcast::node {

struct LeaderConfig {
  Options options;               // seed, epochs, shuffle, producer_batch, ring_slots, heartbeat
  int expected_consumers = 0;    // wait for this many joins before the first batch
  uint32_t max_consumer_batch = 0;  // 0: options.batch_size
  // How the user of this front door admits a larger consumer batch (the advice of a join's
  // refusal, e.g. "start batchcast-run with a larger --max-batch-size"); "" = generic.
  std::string batch_limit_advice;
  std::string socket_name;       // abstract socket name, unique per node
  std::string job;
  int rank = -1;
  int64_t join_timeout_ms = 120000;
  // Late join (producer/admission.h): a consumer joining within this fraction of an epoch
  // (at least the ring depth in batches) gets the epoch's start replayed; later ones start
  // at the next epoch, or at once with join_mid_epoch.
  double late_join_window = 0.02;
  bool join_mid_epoch = false;
  // End the stream once every admitted consumer has left (MPI jobs). A service keeps going.
  bool end_when_empty = true;
  telemetry::Collector* collector = nullptr;  // optional; not owned
  // With a resize schedule: also print its plan to stdout (it is always logged at INFO).
  bool print_plan = true;
};

// The slot writer's figures (producer_batches, samples_produced, samples_skipped,
// tail_copies, slot_wait_ns, fill_ns, ...) and the leader's late joins.
struct LeaderStats : producer::WriterStats {
  int64_t replayed_batches = 0;  // late-join replays
  int64_t late_joins = 0;        // consumers caught up by a replay
};

class Leader {
 public:
  static Result<std::unique_ptr<Leader>> Create(const LeaderConfig& config,
                                                std::unique_ptr<producer::BatchSource> source);
  // Produces the stream: options.epochs epochs, then ends it. Returns the first error.
  Status Run();
  // Asks Run() to stop and fails the stream with `why` (consumers see the message).
  void Abort(const std::string& why);
  // Blocks until no consumer is attached, or timeout_ms passes.
  Status WaitUntilEmpty(int64_t timeout_ms);

  shm::RingLeader& ring() { return *ring_; }
  const std::string& address() const { return config_.socket_name; }
  LeaderStats stats() const;
  int64_t producer_batch() const { return plan_.producer_batch(); }
  // Installs `hook` (not owned; must outlive Run()). Call before Run().
  void SetSlotHook(producer::SlotHook* hook) { writer_->SetHook(hook); }
  // What GPU staging attaches to (gpu/gpu_stager.h).
  producer::StagingTarget staging_target();
  // The progressive-resizing schedule being executed; null without options.resize.
  const schedule::ResizeSchedule* resize_schedule() const { return schedule_.get(); }

 private:
  Leader(const LeaderConfig& config, std::unique_ptr<producer::BatchSource> source,
         int64_t producer_batch);
  // What producer batch k of the current epoch holds and how it is scaled.
  struct BatchPlan {
    std::span<const int64_t> samples;
    int image_size = 0;          // 0: the source's default size (no schedule)
    float lr_factor = 1.0f;
    uint32_t scale_num = 0, scale_den = 0;  // W_full^2, W^2 (0: no scaling)
  };
  Status InitResize(int64_t producer_batch, uint32_t max_consumer_batch);
  // Prepares epoch e; returns its number of producer batches.
  Result<int64_t> BeginEpoch(uint64_t epoch);
  Status RunEpoch(uint64_t epoch, int64_t batches_per_epoch, int64_t first, bool* ended);
  // Resume: the first producer batch of options.start_epoch (producer::ResumeFirstBatch).
  int64_t FirstPosition() const;
  BatchPlan PlanBatch(uint64_t epoch, int64_t k);
  // What position k of the epoch holds (its plan in *bp, which the request points into).
  producer::ProduceRequest Request(uint64_t epoch, int64_t k, int64_t batches_per_epoch,
                                   BatchPlan* bp);
  // Produces position k of the epoch for the consumers in `only` (nullopt: the slot wait
  // was interrupted by a joiner), filling position next_k ahead when >= 0.
  Result<std::optional<uint64_t>> ProduceOne(uint64_t epoch, int64_t k, int64_t batches_per_epoch,
                                             uint64_t only, const producer::AcquireWait& wait,
                                             int64_t next_k);

  LeaderConfig config_;
  std::unique_ptr<producer::BatchSource> source_;
  producer::StreamPlan plan_;
  std::unique_ptr<shm::RingLeader> ring_;
  pipeline::SampleLayout layout_;  // of full-size samples
  std::unique_ptr<producer::SlotWriter> writer_;
  std::unique_ptr<producer::Admission> admission_;
  int64_t replayed_ = 0;
  std::unique_ptr<schedule::ResizeSchedule> schedule_;
  std::vector<schedule::ProducerBatch> epoch_batches_;  // the current epoch's (with schedule_)
  uint64_t epoch_samples_ = 0;     // samples the current epoch covers
  uint32_t scale_cap_ = 0;         // the spec's max_batch, for consumers' scaled batches
  uint32_t lr_rule_ = 0;           // shm::LrRuleCode of the spec's lr rule
  producer::AbortReason abort_;  // Abort(): the stop flag and its first reason
};

}  // namespace batchcast::node
