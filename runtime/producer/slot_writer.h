// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The slot writer: what every producer does with one ring slot, in one place.
//   Acquire   wait for the slot of a position (backpressure; wait time counted), run the
//             hook's BeforeFill;
//   Fill      run a BatchSource straight into slot memory (images, labels, ids from
//             result.kept), count skipped samples per epoch and cause (SkipAccount);
//   Publish   the fill-repeat tail and descriptor (slot_fill.h), the hook's BeforePublish,
//             the (optionally targeted) publish, and the batch's telemetry record.
// Every producer::Producer's feeds and distributions (feed.h, distribution.h) only decide
// what goes into a slot and who receives it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "batchcast/status.h"
#include "pipeline/pipeline.h"
#include "producer/batch_source.h"
#include "producer/batch_stage.h"
#include "producer/skip_account.h"
#include "producer/slot_fill.h"
#include "producer/slot_hook.h"
#include "producer/slot_layout.h"
#include "transport/shm/ring_leader.h"

namespace batchcast::telemetry {
class Collector;
}

namespace batchcast::producer {

struct WriterStats {
  int64_t producer_batches = 0;   // slots published with samples (replays included)
  int64_t samples_produced = 0;   // distinct samples published
  int64_t samples_decoded = 0;    // samples handed to a source in this process
  int64_t samples_skipped = 0;    // samples a source could not produce (logged)
  int64_t tail_copies = 0;
  int64_t empty_positions = 0;    // positions published to nobody without a fill
  int64_t dropped_batches = 0;    // slots with samples that reached no consumer
  int64_t slot_wait_ns = 0;       // backpressure: waiting for consumers to free a slot
  int64_t max_slot_wait_ns = 0;   // the longest of those waits
  int64_t fill_ns = 0;            // sources filling slots (decode etc.)
  int64_t lookahead_batches = 0;  // fills started before the previous position was published
  int64_t lookahead_dropped = 0;  // of those, refilled: the position got other contents
  // Leader idle accounting (benchmarks: leader_idle_fraction): from the first fill to the
  // last publish, the time the source's workers all had nothing to do, less the time the
  // producer waited for a slot with no fill in flight (the consumers' backpressure).
  int64_t stream_ns = 0;
  int64_t source_idle_ns = 0;
  int64_t starved_wait_ns = 0;
  int64_t stage_runs = 0;         // model stage calls (one per stage per producer batch)
  int64_t stage_ns = 0;           // time in them
  int64_t stage_copied_bytes = 0; // stage output copied into slots after forward (0: in place)
  // View groups (docs/pipeline.md "Views through the Producer"), over the batches made for
  // more than the leader's view: samples decoded for them, image decodes run, and the
  // decodes one leader per view would have run (one per sample per group made).
  int64_t view_samples = 0;
  int64_t view_decodes = 0;
  int64_t view_decodes_one_leader_per_view = 0;
};

// What the fills of one producer batch add up to (its telemetry record).
struct BatchRecord {
  int64_t read_ns = 0, read_lock_ns = 0, decode_ns = 0, transform_ns = 0;
  int64_t skipped = 0;            // samples skipped by this process's source
  int64_t cache_hits = 0, cache_misses = 0, cache_bytes = 0;  // decoded-sample cache
  int64_t produce_start_ns = 0;   // first fill began (0: no fill here, e.g. external batches)
  int64_t produce_end_ns = 0;     // last fill ended
  int64_t decodes = 0;            // image decodes run (pipeline::BatchResult::decodes)
  int64_t decoded_samples = 0;    // samples handed to the source
  // Each view group's transform time, in the order of the groups filled (view groups only).
  std::vector<int64_t> group_transform_ns;
};

// How Acquire waits for a slot held by consumers.
struct AcquireWait {
  // Milliseconds to wait before on_timeout runs (< 0: until the slot is free). Asked before
  // every wait; null: -1.
  std::function<int64_t()> poll_ms;
  // Runs after each timed-out wait: true gives up (nothing acquired; the time waited keeps
  // counting into the next Acquire), an error fails the Acquire.
  std::function<Result<bool>()> on_timeout;
};

// One producer batch for Produce(): what the source decodes and what the descriptor says.
struct ProduceRequest {
  std::span<const int64_t> samples;
  int image_size = 0;             // for the source (0: its default size)
  pipeline::SampleLayout sample;  // of this batch's images
  SlotContents contents;          // epoch, batch, batches/samples in epoch, scaling, lr
  // The view groups it is made for (SlotWriter::Produce sets them from the receivers);
  // empty: the leader's view alone.
  std::vector<GroupRegion> groups;
};

class ViewGroups;

class SlotWriter {
 public:
  // `who` prefixes messages ("leader", "service"); `collector` may be null.
  SlotWriter(shm::RingLeader* ring, const SlotLayout& layout, std::string who,
             telemetry::Collector* collector);

  // The hook stages the leader's view only: with one installed, views are refused.
  void SetHook(SlotHook* hook);
  // The producer's view groups: Produce makes each position for its receivers' groups.
  void SetViewGroups(ViewGroups* groups) { groups_ = groups; }
  // Stages run on each producer batch at Publish, before the tail and the descriptor (the
  // slot layout must hold their outputs: AddTensors). What a stage reads with
  // keep_input=false is not published: no images (descriptor: 0 bytes per image) or no such
  // named tensor.
  void SetStages(std::vector<std::unique_ptr<BatchStage>> stages);
  SlotHook* hook() const { return hook_; }
  const SlotLayout& layout() const { return layout_; }
  shm::RingLeader& ring() { return *ring_; }
  const WriterStats& stats() const { return stats_; }
  // Skipped samples per epoch and cause, and good samples published per epoch.
  const SkipAccount& skips() const { return skips_; }
  // At the end of an epoch: its skip count, or the error for an epoch with no good sample.
  Status EndEpoch(uint64_t epoch) const { return skips_.EndEpoch(epoch, who_); }
  // Once at the end of the stream: the skip summary (log and telemetry).
  void ReportSkips() const { skips_.Report(who_, collector_); }
  // The ring and worker gauges, once at the start of a stream.
  void RecordStart(int worker_threads);

  // Acquires the slot of position `seq` (next_seq() or ahead within the ring) and runs the
  // hook's BeforeFill. nullopt: wait.on_timeout gave up.
  Result<std::optional<shm::SlotWrite>> Acquire(uint64_t seq, const AcquireWait& wait = {});

  // Runs `source` for `samples` into positions [pos, pos + samples.size()) of `data` (a
  // slot, or stand-in memory of a slot's size): images at `sample` layout, labels, and ids
  // (result.kept; -1 at the positions the source left unfilled). Skipped samples are counted
  // (the first of each cause logged); timings go to `record`. *written: the samples at [pos, pos + *written).
  Status Fill(BatchSource& source, uint64_t epoch, int image_size,
              std::span<const int64_t> samples, const pipeline::SampleLayout& sample,
              uint8_t* data, int64_t pos, BatchRecord* record, uint32_t* written);

  // Completes the slot for the receivers in `only` (tail, descriptor from `contents`; the
  // writer adds the slot layout), runs the hook's BeforePublish, publishes and records the
  // batch. Returns the receiver mask.
  Result<uint64_t> Publish(const shm::SlotWrite& w, SlotContents contents, uint64_t only,
                           const BatchRecord& record);
  // Publishes the next position to nobody: no fill, no hook (skipping a position costs no
  // decode). Waits for its slot like Acquire (without the hook).
  Status PublishEmpty(uint64_t epoch, int64_t batch);

  // Acquire, Fill and Publish of one producer batch. nullopt: interrupted (see Acquire);
  // else the receiver mask.
  // Look-ahead: with `next` (the request the following position will most likely get) and a
  // source that overlaps, the slot of the following position is acquired as soon as it is
  // free while this batch fills, and `next` is started into it, so the workers go on
  // decoding while this batch is published and the next Produce waits for nothing. When
  // the following position gets other contents (a replay, a skip), the look-ahead fill is
  // finished, dropped and the slot filled again: what is published never depends on it.
  Result<std::optional<uint64_t>> Produce(BatchSource& source, const ProduceRequest& request,
                                          uint64_t only, const AcquireWait& wait = {},
                                          const ProduceRequest* next = nullptr);
  // Finishes a look-ahead fill still in flight (its slot stays acquired for its position).
  // Called by the destructor; call it before the source's memory or the ring goes away.
  void DrainLookahead();
  ~SlotWriter();

 private:
  // A fill started for position w.seq before it is that position's turn.
  struct Ahead {
    // User-provided: clang 14 decides std::optional<Ahead>::emplace() too early otherwise
    // (a nested class's default member initializers are parsed after the enclosing class).
    Ahead() {}
    shm::SlotWrite w;
    BatchSource* source = nullptr;
    ProduceRequest request;
    std::vector<int64_t> samples;  // request.samples points here
    BatchRecord record;
  };
  void StartFill(BatchSource& source, uint64_t epoch, int image_size,
                 std::span<const int64_t> samples, const pipeline::SampleLayout& sample,
                 uint8_t* data, int64_t pos, BatchRecord* record,
                 std::span<const GroupRegion> groups = {});
  // `request` with the view groups of the receivers of position seq in `only` (none
  // without view groups).
  Result<ProduceRequest> WithGroups(const ProduceRequest& request, uint64_t seq, uint64_t only);
  // Completes the oldest started fill: ids, stats, skips (counted for `epoch`; a dropped
  // look-ahead fill never gets here, so its skips are not counted twice).
  Status FinishFill(BatchSource& source, uint64_t epoch, std::span<const int64_t> samples,
                    uint8_t* data, int64_t pos, BatchRecord* record, uint32_t* written);
  // Position next_seq()'s slot: the look-ahead's when it was acquired ahead (its fill
  // dropped unless it holds `request`: *filling), else acquired now. nullopt: interrupted.
  Result<std::optional<shm::SlotWrite>> TakeSlot(const ProduceRequest* request,
                                                 const AcquireWait& wait, bool* filling,
                                                 BatchRecord* record);
  // Acquires the slot of next_seq() + 1 without waiting (false: none free now) and starts
  // `next` into it.
  Status TryLookahead(BatchSource& source, const ProduceRequest& next, bool* started);
  Result<std::optional<shm::SlotWrite>> AcquireSlot(uint64_t seq, const AcquireWait& wait);
  // Runs the stages on the n samples of `w` (their time: stats and Timer::kStage).
  Status RunStages(const shm::SlotWrite& w, const SlotContents& c);
  void Record(const shm::SlotWrite& w, const SlotContents& c, uint32_t tail,
              const BatchRecord& record, int64_t publish_start_ns, int64_t publish_end_ns,
              uint64_t receivers);
  // The view groups' part of Record: stats and, with a collector, the named series
  // views/<key>/... per view and views/decodes... (docs/telemetry.md "View groups").
  // `members`: the receivers per group of the batch.
  void RecordViews(const SlotContents& c, const BatchRecord& r, std::map<uint32_t, int>& members);

  shm::RingLeader* ring_;
  SlotLayout layout_;
  std::string who_;
  telemetry::Collector* collector_;
  SlotHook* hook_ = nullptr;
  ViewGroups* groups_ = nullptr;
  std::vector<std::unique_ptr<BatchStage>> stages_;
  bool images_dropped_ = false;               // a stage reads them with keep_input=false
  std::vector<TensorSlot> published_tensors_;  // the layout's, less those stages drop
  WriterStats stats_;
  // Per view key: the cumulative samples and transform time (named series), annotated once.
  struct ViewTotals {
    int64_t samples = 0, transform_ns = 0;
  };
  std::map<uint64_t, ViewTotals> view_totals_;
  SkipAccount skips_;
  int64_t wait_since_ns_ = 0;     // start of an interrupted wait (0: none)
  std::optional<Ahead> ahead_;
  int64_t stream_start_ns_ = 0, idle_at_start_ns_ = 0;
};

}  // namespace batchcast::producer
