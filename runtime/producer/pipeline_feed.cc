// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The native pipeline as a feed (feed.h): positions from the stream plan, or from a
// progressive-resizing schedule (docs/progressive-resizing.md), both planned by BatchPlan
// (batch_plan.h), which the multi-node exchange plans with too.
#include "core/errors.h"
#include "producer/batch_plan.h"
#include "producer/feed.h"

namespace batchcast::producer {
namespace {

class PipelineFeed final : public Feed {
 public:
  PipelineFeed(std::unique_ptr<BatchSource> source, bool print_plan)
      : source_(std::move(source)), print_plan_(print_plan) {}
  const char* name() const override { return "native pipeline"; }
  // A resize schedule's batches are planned per epoch: replays within the current one.
  Replay replay() const override {
    return resize_schedule() == nullptr ? Replay::kAny : Replay::kCurrentEpoch;
  }
  int threads() const override { return source_->threads(); }
  const schedule::ResizeSchedule* resize_schedule() const override {
    return plan_ == nullptr ? nullptr : plan_->resize_schedule();
  }
  BatchSource* ViewSource(std::string* why) override {
    if (source_->own_view() == nullptr) {
      *why = "its batch source makes one kind of image";
      return nullptr;
    }
    return source_.get();
  }

  Status Plan(const Options& o, uint32_t max_consumer_batch, std::string_view who,
              FeedPlan* plan) override {
    BC_ASSIGN_OR_RETURN(plan_, BatchPlan::Create(o, max_consumer_batch, *source_, who,
                                                 print_plan_, plan));
    return Status::Ok();
  }

  void Attach(SlotWriter* writer, telemetry::Collector* collector) override {
    Feed::Attach(writer, collector);
    plan_->Annotate(collector);
  }

  Result<int64_t> BeginEpoch(uint64_t epoch) override {
    return plan_->BeginEpoch(epoch, collector_);
  }

  std::span<const int64_t> Samples(const Position& p) override {
    return plan_->Samples(p.epoch, p.k);
  }

  Result<std::optional<uint64_t>> Produce(const Position& p, std::span<const int64_t> part,
                                          uint64_t only, const AcquireWait& wait,
                                          int64_t next_k) override {
    ProduceRequest req = plan_->Request(p, p.k);
    if (!part.empty()) {
      req.samples = part;
      req.contents.repeats = p.part_repeats;
    }
    if (next_k < 0 || !part.empty()) return writer_->Produce(*source_, req, only, wait);
    // The look-ahead fill of position next_k: its samples live in the plan's epoch order,
    // which stays valid while this epoch runs.
    const ProduceRequest next = plan_->Request(p, next_k);
    return writer_->Produce(*source_, req, only, wait, &next);
  }

 private:
  std::unique_ptr<BatchSource> source_;
  bool print_plan_;
  std::unique_ptr<BatchPlan> plan_;
};

}  // namespace

std::unique_ptr<Feed> MakePipelineFeed(std::unique_ptr<BatchSource> source, bool print_plan) {
  return std::make_unique<PipelineFeed>(std::move(source), print_plan);
}

}  // namespace batchcast::producer
