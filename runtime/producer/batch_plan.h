// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The producer batches of the native pipeline, planned in one place for every feed that
// decodes them (the single-node PipelineFeed and the multi-node ExchangeFeed, feed.h):
//   - without a schedule, the stream plan (StreamPlan: a pure function of (seed, epoch,
//     position), full-size batches of P samples);
//   - with option 'resize', the progressive-resizing schedule (docs/progressive-resizing.md):
//     each epoch is ResizeSchedule::ProducerBatches(epoch, P), each batch of one image size,
//     decoded at that size, with its LR factor and batch scale in the slot descriptor so that
//     consumers carve batches scaled the same way; slots sized per bucket (ResizeBuckets).
// Everything here is a pure function of the options, the dataset size and the consumers'
// largest batch, so every node leader of a job plans the same batches (docs/multinode.md).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "batchcast/options.h"
#include "batchcast/status.h"
#include "producer/batch_source.h"
#include "producer/feed.h"
#include "producer/slot_writer.h"
#include "producer/stream_plan.h"
#include "schedule/resize_schedule.h"

namespace batchcast::telemetry {
class Collector;
}

namespace batchcast::producer {

class BatchPlan {
 public:
  // Plans the stream of `options` over `source` (limit_samples applied) with consumers up to
  // max_consumer_batch (0: options.batch_size), and fills *plan (samples, batch sizes, the
  // largest layout; with a schedule its buckets, the sizes a model stage probes and the
  // canonical spec). A schedule's plan is logged, and printed to stdout when `print_plan`.
  // Errors name `who`: a bad spec (with its column), start_batch with a schedule.
  static Result<std::unique_ptr<BatchPlan>> Create(const Options& options,
                                                   uint32_t max_consumer_batch,
                                                   const BatchSource& source, std::string_view who,
                                                   bool print_plan, FeedPlan* plan);
  ~BatchPlan();

  // The schedule being executed (null: none).
  const schedule::ResizeSchedule* resize_schedule() const { return schedule_.get(); }
  int64_t num_samples() const { return stream_.num_samples(); }
  int64_t producer_batch() const { return stream_.producer_batch(); }

  // Begins epoch `epoch` (a schedule: plans its producer batches, logs its mix of sizes and
  // annotates it in `collector`, which may be null) and returns its positions. With a
  // schedule, Samples and Request are valid for this epoch's positions only.
  Result<int64_t> BeginEpoch(uint64_t epoch, telemetry::Collector* collector);
  // The dataset indices of position k of `epoch` (the current epoch's with a schedule).
  std::span<const int64_t> Samples(uint64_t epoch, int64_t k);
  // Position k of p's epoch (of p.bpe positions): its samples, the image size the source
  // decodes at (0: its own), the layout, and the descriptor's epoch fields and scaling.
  ProduceRequest Request(const Position& p, int64_t k);
  // Samples the current epoch covers (exhaustive mode: fewer than num_samples()).
  uint64_t epoch_samples() const { return epoch_samples_; }

  // The schedule's plan as a telemetry annotation (nothing without a schedule).
  void Annotate(telemetry::Collector* collector) const;

 private:
  BatchPlan(int64_t n, int64_t p, const Options& o) : stream_(n, p, o.seed, o.shuffle) {}
  Status InitResize(const Options& o, uint32_t max_b, const BatchSource& source,
                    std::string_view who, bool print_plan, FeedPlan* plan);
  void DescribeEpoch(uint64_t epoch, telemetry::Collector* collector);

  StreamPlan stream_;
  std::string who_;
  pipeline::SampleLayout layout_;  // of full-size samples
  std::unique_ptr<schedule::ResizeSchedule> schedule_;
  std::vector<pipeline::SampleLayout> bucket_layouts_;  // per bucket (with schedule_)
  std::vector<schedule::ProducerBatch> epoch_batches_;  // the current epoch's (with schedule_)
  uint64_t epoch_samples_ = 0;     // samples the current epoch covers
  uint32_t scale_cap_ = 0;         // the spec's max_batch, for consumers' scaled batches
  uint32_t lr_rule_ = 0;           // shm::LrRuleCode of the spec's lr rule
  std::string head_, plan_text_;   // the resize plan (telemetry annotation)
};

}  // namespace batchcast::producer
