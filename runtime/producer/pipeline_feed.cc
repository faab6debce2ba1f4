// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The native pipeline as a feed (feed.h): positions from the stream plan, or from a
// progressive-resizing schedule (docs/progressive-resizing.md: each epoch is the schedule's
// producer batches, each of one image size, decoded at that size, with its LR factor and
// batch scale in the slot descriptor so that consumers carve batches scaled the same way).
#include <algorithm>
#include <cstdio>

#include "core/errors.h"
#include "core/log.h"
#include "producer/feed.h"
#include "producer/stream_plan.h"
#include "schedule/plan_format.h"
#include "schedule/resize_schedule.h"
#include "schedule/resize_spec.h"
#include "telemetry/collector.h"

namespace batchcast::producer {
namespace {

class PipelineFeed final : public Feed {
 public:
  PipelineFeed(std::unique_ptr<BatchSource> source, bool print_plan)
      : source_(std::move(source)), print_plan_(print_plan) {}
  const char* name() const override { return "native pipeline"; }
  // A resize schedule's batches are planned per epoch: replays within the current one.
  Replay replay() const override {
    return schedule_ == nullptr ? Replay::kAny : Replay::kCurrentEpoch;
  }
  int threads() const override { return source_->threads(); }
  const schedule::ResizeSchedule* resize_schedule() const override { return schedule_.get(); }
  BatchSource* ViewSource(std::string* why) override {
    if (schedule_ != nullptr) {
      *why = "with progressive resizing (resize=) the leader makes its own view only; "
             "per-view schedules are not wired yet";
      return nullptr;
    }
    if (source_->own_view() == nullptr) {
      *why = "its batch source makes one kind of image";
      return nullptr;
    }
    return source_.get();
  }

  Status Plan(const Options& o, uint32_t max_consumer_batch, std::string_view who,
              FeedPlan* plan) override {
    who_ = std::string(who);
    options_ = o;
    BC_ASSIGN_OR_RETURN(BatchSizes sizes, ResolveBatchSizes(o, max_consumer_batch, who));
    int64_t n = source_->num_samples();
    if (o.limit_samples > 0) n = std::min(n, o.limit_samples);
    if (n <= 0) return InvalidArgumentError("{}: the dataset has no samples", who);
    if (o.start_batch > 0 && !o.resize.empty())
      return InvalidArgumentError("{}: option 'start_batch' with a progressive-resizing "
                                  "schedule: its producer batches change size per epoch; resume "
                                  "at an epoch start (start_batch=0)", who);
    plan_ = std::make_unique<StreamPlan>(n, sizes.producer_batch, o.seed, o.shuffle);
    plan->num_samples = n;
    plan->producer_batch = sizes.producer_batch;
    plan->max_consumer_batch = sizes.max_consumer_batch;
    layout_ = source_->MaxLayout();
    if (!o.resize.empty()) {
      BC_RETURN_IF_ERROR(InitResize(sizes.producer_batch, sizes.max_consumer_batch));
      plan->buckets = ResizeBuckets(*schedule_, sizes.producer_batch, sizes.max_consumer_batch,
                                    scale_cap_, [this](int size) { return source_->Layout(size); });
      for (const SlotBucket& b : plan->buckets) plan->stage_sizes.push_back(b.sample);
      plan->resize_spec = schedule::ResizeSpecToString(schedule_->spec());
    }
    plan->sample = layout_;
    return Status::Ok();
  }

  Result<int64_t> BeginEpoch(uint64_t epoch) override {
    if (schedule_ == nullptr) {
      epoch_samples_ = static_cast<uint64_t>(plan_->num_samples());
      return plan_->BatchesPerEpoch();
    }
    auto batches = schedule_->ProducerBatches(static_cast<int>(epoch), plan_->producer_batch());
    if (!batches.ok()) return batches.status().WithContext(fmt::format("{}: epoch {}", who_, epoch));
    epoch_batches_ = std::move(batches).value();
    DescribeEpoch(epoch);
    return static_cast<int64_t>(epoch_batches_.size());
  }

  std::span<const int64_t> Samples(const Position& p) override {
    if (schedule_ == nullptr) return plan_->Batch(p.epoch, p.k);
    return epoch_batches_[static_cast<size_t>(p.k)].samples;
  }

  Result<std::optional<uint64_t>> Produce(const Position& p, std::span<const int64_t> part,
                                          uint64_t only, const AcquireWait& wait,
                                          int64_t next_k) override {
    ProduceRequest req = Request(p, p.k);
    if (!part.empty()) {
      req.samples = part;
      req.contents.repeats = p.part_repeats;
    }
    if (next_k < 0 || !part.empty()) return writer_->Produce(*source_, req, only, wait);
    // The look-ahead fill of position next_k: its samples live in the plan's epoch order,
    // which stays valid while this epoch runs.
    const ProduceRequest next = Request(p, next_k);
    return writer_->Produce(*source_, req, only, wait, &next);
  }

 private:
  // What position k of p's epoch holds and how it is scaled.
  ProduceRequest Request(const Position& p, int64_t k) {
    ProduceRequest req;
    req.samples = Samples({p.epoch, k, p.bpe});
    SlotContents& c = req.contents;
    c.epoch = p.epoch;
    c.batch = k;
    c.batches_in_epoch = p.bpe;
    c.samples_in_epoch = epoch_samples_;
    if (schedule_ == nullptr) {
      req.sample = layout_;
      return req;
    }
    const schedule::ProducerBatch& pb = epoch_batches_[static_cast<size_t>(k)];
    const uint64_t full = static_cast<uint64_t>(schedule_->full_size());
    req.image_size = pb.image_size;
    req.sample = source_->Layout(pb.image_size);
    c.lr_factor = static_cast<float>(pb.lr_factor);
    c.image_size = pb.image_size;
    c.scale_num = static_cast<uint32_t>(full * full);
    c.scale_den = static_cast<uint32_t>(uint64_t(pb.image_size) * uint64_t(pb.image_size));
    c.scale_cap = scale_cap_;
    c.lr_rule = lr_rule_;
    return req;
  }

  Status InitResize(int64_t p, uint32_t max_b) {
    const Options& o = options_;
    auto spec = schedule::ParseResizeSpec(o.resize);
    if (!spec.ok()) return spec.status().WithContext(who_ + ": option 'resize'");
    schedule::ResizeScheduleParams params;
    params.spec = *spec;
    params.seed = o.seed;
    params.num_samples = plan_->num_samples();
    params.total_epochs = o.epochs;
    params.base_batch_size = p;  // the producer batch is the schedule's base; consumers scale theirs
    params.carve_unit = max_b;   // producer batches hold whole scaled batches of the largest consumer
    auto created = schedule::ResizeSchedule::Create(params);
    if (!created.ok()) return created.status().WithContext(who_ + ": resize schedule");
    schedule_ = std::move(created).value();
    const int full = schedule_->full_size();
    if (o.image_size > 0 && o.image_size != full)
      BC_LOG(Warn, Sched, "{}: resize max {} differs from image_size {}; the schedule's full "
             "size {} is the largest size produced", who_, full, o.image_size, full);
    layout_ = source_->Layout(full);
    scale_cap_ = static_cast<uint32_t>(std::min<int64_t>(spec->max_batch, UINT32_MAX));
    switch (spec->lr) {
      case schedule::LrRule::kLinear: lr_rule_ = shm::kLrLinear; break;
      case schedule::LrRule::kSqrt: lr_rule_ = shm::kLrSqrt; break;
      case schedule::LrRule::kNone: lr_rule_ = shm::kLrNone; break;
    }
    auto plan = schedule::FormatPlan(*schedule_);
    if (!plan.ok()) return plan.status().WithContext(who_ + ": resize plan");
    head_ = fmt::format(
        "progressive resizing {}: {} samples, {} epochs, producer batch {} at full size; "
        "consumer batches scale by B_S, capped by max_batch",
        schedule::ResizeSpecToString(*spec), plan_->num_samples(), o.epochs, p);
    plan_text_ = *plan;
    BC_LOG(Info, Sched, "{}: {}\n{}", who_, head_, plan_text_);
    if (print_plan_) {
      std::fputs(fmt::format("batchcast: {}\n{}\n", head_, plan_text_).c_str(), stdout);
      std::fflush(stdout);
    }
    return Status::Ok();
  }

  void Attach(SlotWriter* writer, telemetry::Collector* collector) override {
    Feed::Attach(writer, collector);
    if (collector != nullptr && schedule_ != nullptr)
      collector->Annotate(fmt::format("{}\n{}", head_, plan_text_));
  }

  // The epoch's mix of image sizes (log and telemetry).
  void DescribeEpoch(uint64_t epoch) {
    const int64_t p = plan_->producer_batch();
    std::vector<int64_t> per_size(schedule_->bucket_sizes().size(), 0);
    std::vector<int64_t> batches_per_size(per_size.size(), 0);
    epoch_samples_ = 0;
    for (const auto& pb : epoch_batches_) {
      per_size[pb.bucket] += static_cast<int64_t>(pb.samples.size());
      batches_per_size[pb.bucket] += 1;
      epoch_samples_ += pb.samples.size();
    }
    std::string mix;
    for (size_t b = 0; b < per_size.size(); ++b) {
      if (per_size[b] == 0) continue;
      mix += fmt::format("{}{} @{} ({} batches of <= {}, lr x{:.3g})", mix.empty() ? "" : ", ",
                         per_size[b], schedule_->bucket_sizes()[b], batches_per_size[b],
                         schedule_->ProducerChunk(p, int(b)), schedule_->LrFactor(p, int(b)));
    }
    const std::string line = fmt::format(
        "epoch {} ({}): {} of {} samples in {} producer batches: {}", epoch,
        schedule::EpochPhaseName(schedule_->Phase(static_cast<int>(epoch))), epoch_samples_,
        plan_->num_samples(), epoch_batches_.size(), mix);
    BC_LOG(Info, Sched, "{}: {}", who_, line);
    if (collector_ != nullptr) collector_->Annotate(who_ + " " + line);
    if (epoch_samples_ < static_cast<uint64_t>(plan_->num_samples()))
      BC_LOG(Info, Sched, "{}: epoch {} covers {} of {} samples (exhaustive mode trains only "
             "the smallest non-empty bucket)", who_, epoch, epoch_samples_, plan_->num_samples());
  }

  std::unique_ptr<BatchSource> source_;
  bool print_plan_;
  std::string who_;
  Options options_;
  std::unique_ptr<StreamPlan> plan_;
  pipeline::SampleLayout layout_;  // of full-size samples
  std::unique_ptr<schedule::ResizeSchedule> schedule_;
  std::vector<schedule::ProducerBatch> epoch_batches_;  // the current epoch's (with schedule_)
  uint64_t epoch_samples_ = 0;     // samples the current epoch covers
  uint32_t scale_cap_ = 0;         // the spec's max_batch, for consumers' scaled batches
  uint32_t lr_rule_ = 0;           // shm::LrRuleCode of the spec's lr rule
  std::string head_, plan_text_;   // the resize plan (telemetry annotation)
};

}  // namespace

std::unique_ptr<Feed> MakePipelineFeed(std::unique_ptr<BatchSource> source, bool print_plan) {
  return std::make_unique<PipelineFeed>(std::move(source), print_plan);
}

}  // namespace batchcast::producer
