// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "producer/batch_plan.h"

#include <algorithm>
#include <cstdio>

#include "core/errors.h"
#include "core/log.h"
#include "schedule/plan_format.h"
#include "schedule/resize_spec.h"
#include "telemetry/collector.h"

namespace batchcast::producer {

BatchPlan::~BatchPlan() = default;

Result<std::unique_ptr<BatchPlan>> BatchPlan::Create(const Options& o, uint32_t max_consumer_batch,
                                                     const BatchSource& source,
                                                     std::string_view who, bool print_plan,
                                                     FeedPlan* plan) {
  BC_ASSIGN_OR_RETURN(BatchSizes sizes, ResolveBatchSizes(o, max_consumer_batch, who));
  int64_t n = source.num_samples();
  if (o.limit_samples > 0) n = std::min(n, o.limit_samples);
  if (n <= 0) return InvalidArgumentError("{}: the dataset has no samples", who);
  if (o.start_batch > 0 && !o.resize.empty())
    return InvalidArgumentError("{}: option 'start_batch' with a progressive-resizing "
                                "schedule: its producer batches change size per epoch; resume "
                                "at an epoch start (start_batch=0)", who);
  std::unique_ptr<BatchPlan> b(new BatchPlan(n, sizes.producer_batch, o));
  b->who_ = std::string(who);
  b->layout_ = source.MaxLayout();
  b->epoch_samples_ = static_cast<uint64_t>(n);
  plan->num_samples = n;
  plan->producer_batch = sizes.producer_batch;
  plan->max_consumer_batch = sizes.max_consumer_batch;
  if (!o.resize.empty())
    BC_RETURN_IF_ERROR(b->InitResize(o, sizes.max_consumer_batch, source, who, print_plan, plan));
  plan->sample = b->layout_;
  return b;
}

Status BatchPlan::InitResize(const Options& o, uint32_t max_b, const BatchSource& source,
                             std::string_view who, bool print_plan, FeedPlan* plan) {
  const int64_t p = stream_.producer_batch();
  auto spec = schedule::ParseResizeSpec(o.resize);
  if (!spec.ok()) return spec.status().WithContext(who_ + ": option 'resize'");
  schedule::ResizeScheduleParams params;
  params.spec = *spec;
  params.seed = o.seed;
  params.num_samples = stream_.num_samples();
  params.total_epochs = o.epochs;
  params.base_batch_size = p;  // the producer batch is the schedule's base; consumers scale theirs
  params.carve_unit = max_b;   // producer batches hold whole scaled batches of the largest consumer
  auto created = schedule::ResizeSchedule::Create(params);
  if (!created.ok()) return created.status().WithContext(who_ + ": resize schedule");
  schedule_ = std::move(created).value();
  const int full = schedule_->full_size();
  if (o.image_size > 0 && o.image_size != full)
    BC_LOG(Warn, Sched, "{}: resize max {} differs from image_size {}; the schedule's full "
           "size {} is the largest size produced", who, full, o.image_size, full);
  layout_ = source.Layout(full);
  scale_cap_ = static_cast<uint32_t>(std::min<int64_t>(spec->max_batch, UINT32_MAX));
  switch (spec->lr) {
    case schedule::LrRule::kLinear: lr_rule_ = shm::kLrLinear; break;
    case schedule::LrRule::kSqrt: lr_rule_ = shm::kLrSqrt; break;
    case schedule::LrRule::kNone: lr_rule_ = shm::kLrNone; break;
  }
  plan->buckets = ResizeBuckets(*schedule_, p, max_b, scale_cap_,
                                [&source](int size) { return source.Layout(size); });
  for (const SlotBucket& bucket : plan->buckets) {
    plan->stage_sizes.push_back(bucket.sample);
    bucket_layouts_.push_back(bucket.sample);
  }
  plan->resize_spec = schedule::ResizeSpecToString(schedule_->spec());
  auto text = schedule::FormatPlan(*schedule_);
  if (!text.ok()) return text.status().WithContext(who_ + ": resize plan");
  head_ = fmt::format(
      "progressive resizing {}: {} samples, {} epochs, producer batch {} at full size; "
      "consumer batches scale by B_S, capped by max_batch",
      schedule::ResizeSpecToString(*spec), stream_.num_samples(), o.epochs, p);
  plan_text_ = *text;
  BC_LOG(Info, Sched, "{}: {}\n{}", who_, head_, plan_text_);
  if (print_plan) {
    std::fputs(fmt::format("batchcast: {}\n{}\n", head_, plan_text_).c_str(), stdout);
    std::fflush(stdout);
  }
  return Status::Ok();
}

void BatchPlan::Annotate(telemetry::Collector* collector) const {
  if (collector != nullptr && schedule_ != nullptr)
    collector->Annotate(fmt::format("{}\n{}", head_, plan_text_));
}

Result<int64_t> BatchPlan::BeginEpoch(uint64_t epoch, telemetry::Collector* collector) {
  if (schedule_ == nullptr) {
    epoch_samples_ = static_cast<uint64_t>(stream_.num_samples());
    return stream_.BatchesPerEpoch();
  }
  auto batches = schedule_->ProducerBatches(static_cast<int>(epoch), stream_.producer_batch());
  if (!batches.ok()) return batches.status().WithContext(fmt::format("{}: epoch {}", who_, epoch));
  epoch_batches_ = std::move(batches).value();
  DescribeEpoch(epoch, collector);
  return static_cast<int64_t>(epoch_batches_.size());
}

std::span<const int64_t> BatchPlan::Samples(uint64_t epoch, int64_t k) {
  if (schedule_ == nullptr) return stream_.Batch(epoch, k);
  return epoch_batches_[static_cast<size_t>(k)].samples;
}

ProduceRequest BatchPlan::Request(const Position& p, int64_t k) {
  ProduceRequest req;
  req.samples = Samples(p.epoch, k);
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
  req.sample = bucket_layouts_[static_cast<size_t>(pb.bucket)];
  c.lr_factor = static_cast<float>(pb.lr_factor);
  c.image_size = pb.image_size;
  c.scale_num = static_cast<uint32_t>(full * full);
  c.scale_den = static_cast<uint32_t>(uint64_t(pb.image_size) * uint64_t(pb.image_size));
  c.scale_cap = scale_cap_;
  c.lr_rule = lr_rule_;
  return req;
}

// The epoch's mix of image sizes (log and telemetry).
void BatchPlan::DescribeEpoch(uint64_t epoch, telemetry::Collector* collector) {
  const int64_t p = stream_.producer_batch();
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
      stream_.num_samples(), epoch_batches_.size(), mix);
  BC_LOG(Info, Sched, "{}: {}", who_, line);
  if (collector != nullptr) collector->Annotate(who_ + " " + line);
  if (epoch_samples_ < static_cast<uint64_t>(stream_.num_samples()))
    BC_LOG(Info, Sched, "{}: epoch {} covers {} of {} samples (exhaustive mode trains only "
           "the smallest non-empty bucket)", who_, epoch, epoch_samples_, stream_.num_samples());
}

}  // namespace batchcast::producer
