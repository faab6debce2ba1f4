// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "node/leader.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <thread>

#include "core/errors.h"
#include "core/log.h"
#include "producer/epoch_loop.h"
#include "schedule/plan_format.h"
#include "schedule/resize_spec.h"
#include "transport/shm/carving.h"
#include "telemetry/metrics.h"

namespace batchcast::node {

Leader::Leader(const LeaderConfig& config, std::unique_ptr<producer::BatchSource> source,
               int64_t producer_batch)
    : config_(config),
      source_(std::move(source)),
      plan_(std::min<int64_t>(source_->num_samples(),
                              config.options.limit_samples > 0 ? config.options.limit_samples
                                                               : source_->num_samples()),
            producer_batch, config.options.seed, config.options.shuffle) {}

Result<std::unique_ptr<Leader>> Leader::Create(const LeaderConfig& config,
                                               std::unique_ptr<producer::BatchSource> source) {
  const Options& o = config.options;
  BC_ASSIGN_OR_RETURN(producer::BatchSizes sizes,
                      producer::ResolveBatchSizes(o, config.max_consumer_batch, "leader"));
  const int64_t p = sizes.producer_batch;
  const uint32_t max_b = sizes.max_consumer_batch;
  if (source->num_samples() <= 0)
    return InvalidArgumentError("leader: the dataset has no samples");
  if (o.start_epoch >= o.epochs)
    return InvalidArgumentError("leader: option 'start_epoch' ({}) must be below 'epochs' ({}): "
                                "epochs counts the whole run, start_epoch where it resumes",
                                o.start_epoch, o.epochs);
  if (o.start_batch > 0 && !o.resize.empty())
    return InvalidArgumentError("leader: option 'start_batch' with a progressive-resizing "
                                "schedule: its producer batches change size per epoch; resume "
                                "at an epoch start (start_batch=0)");
  if (!(config.late_join_window >= 0.0 && config.late_join_window <= 1.0))
    return InvalidArgumentError("leader: late_join_window {} is outside [0, 1]",
                                config.late_join_window);
  std::unique_ptr<Leader> leader(new Leader(config, std::move(source), p));
  Leader& l = *leader;
  l.layout_ = l.source_->MaxLayout();
  std::vector<producer::SlotBucket> buckets;
  if (!o.resize.empty()) {
    BC_RETURN_IF_ERROR(l.InitResize(p, max_b));
    buckets = producer::ResizeBuckets(*l.schedule_, p, max_b, l.scale_cap_,
                                      [&l](int size) { return l.source_->Layout(size); });
  }
  producer::SlotLayout slot = producer::ComputeSlotLayout(p, max_b, l.layout_, buckets);
  std::vector<pipeline::SampleLayout> sizes_seen;  // the stages probe every size
  for (const producer::SlotBucket& b : buckets) sizes_seen.push_back(b.sample);
  std::vector<std::unique_ptr<producer::BatchStage>> stages;
  BC_RETURN_IF_ERROR(producer::PrepareStages(o.stage, l.layout_, sizes_seen, p, o.threads,
                                             "leader", &slot, &stages));
  shm::RingConfig rc = producer::RingConfigFor(slot, producer::RingSlots(o), max_b,
                                               static_cast<uint64_t>(p),
                                               static_cast<uint64_t>(l.plan_.num_samples()),
                                               o.epochs);
  if (l.schedule_ != nullptr) rc.resize_spec = schedule::ResizeSpecToString(l.schedule_->spec());
  rc.socket_name = config.socket_name;
  rc.batch_limit_advice = config.batch_limit_advice;
  rc.job = config.job;
  rc.rank = config.rank;
  rc.heartbeat_ms = o.heartbeat_ms;
  auto ring = shm::RingLeader::Create(rc);
  if (!ring.ok()) return ring.status().WithContext("leader");
  l.ring_ = std::move(ring).value();
  l.writer_ = std::make_unique<producer::SlotWriter>(l.ring_.get(), slot, "leader",
                                                     config.collector);
  l.writer_->SetStages(std::move(stages));
  producer::AdmissionPolicy policy;
  policy.late_join_window = config.late_join_window;
  policy.ring_slots = rc.num_slots;
  policy.join_mid_epoch = config.join_mid_epoch;
  l.admission_ = std::make_unique<producer::Admission>(l.ring_.get(), policy);
  BC_LOG(Info, Node, "leader: {} samples/epoch, producer batch {}, {} batches/epoch, slot {} MiB",
         l.plan_.num_samples(), p, l.plan_.BatchesPerEpoch(), rc.slot_bytes >> 20);
  return leader;
}

LeaderStats Leader::stats() const {
  LeaderStats s;
  static_cast<producer::WriterStats&>(s) = writer_->stats();
  s.replayed_batches = replayed_;
  s.late_joins = admission_->late_joins();
  return s;
}

producer::StagingTarget Leader::staging_target() {
  return {ring_.get(), config_.socket_name, [this](producer::SlotHook* h) { SetSlotHook(h); }};
}

Status Leader::InitResize(int64_t p, uint32_t max_b) {
  const Options& o = config_.options;
  auto spec = schedule::ParseResizeSpec(o.resize);
  if (!spec.ok()) return spec.status().WithContext("leader: option 'resize'");
  schedule::ResizeScheduleParams params;
  params.spec = *spec;
  params.seed = o.seed;
  params.num_samples = plan_.num_samples();
  params.total_epochs = o.epochs;
  params.base_batch_size = p;  // the producer batch is the schedule's base; consumers scale theirs
  params.carve_unit = max_b;   // producer batches hold whole scaled batches of the largest consumer
  auto created = schedule::ResizeSchedule::Create(params);
  if (!created.ok()) return created.status().WithContext("leader: resize schedule");
  schedule_ = std::move(created).value();
  const int full = schedule_->full_size();
  if (o.image_size > 0 && o.image_size != full)
    BC_LOG(Warn, Sched, "leader: resize max {} differs from image_size {}; the schedule's full "
           "size {} is the largest size produced", full, o.image_size, full);
  layout_ = source_->Layout(full);
  scale_cap_ = static_cast<uint32_t>(std::min<int64_t>(spec->max_batch, UINT32_MAX));
  switch (spec->lr) {
    case schedule::LrRule::kLinear: lr_rule_ = shm::kLrLinear; break;
    case schedule::LrRule::kSqrt: lr_rule_ = shm::kLrSqrt; break;
    case schedule::LrRule::kNone: lr_rule_ = shm::kLrNone; break;
  }
  auto plan = schedule::FormatPlan(*schedule_);
  if (!plan.ok()) return plan.status().WithContext("leader: resize plan");
  std::string head = fmt::format(
      "progressive resizing {}: {} samples, {} epochs, producer batch {} at full size; "
      "consumer batches scale by B_S, capped by max_batch",
      schedule::ResizeSpecToString(*spec), plan_.num_samples(), o.epochs, p);
  BC_LOG(Info, Sched, "leader: {}\n{}", head, *plan);
  if (config_.collector != nullptr) config_.collector->Annotate(fmt::format("{}\n{}", head, *plan));
  if (config_.print_plan) {
    std::fputs(fmt::format("batchcast: {}\n{}\n", head, *plan).c_str(), stdout);
    std::fflush(stdout);
  }
  return Status::Ok();
}

Result<int64_t> Leader::BeginEpoch(uint64_t epoch) {
  if (schedule_ == nullptr) {
    epoch_samples_ = static_cast<uint64_t>(plan_.num_samples());
    return plan_.BatchesPerEpoch();
  }
  auto batches = schedule_->ProducerBatches(static_cast<int>(epoch), plan_.producer_batch());
  if (!batches.ok()) return batches.status().WithContext(fmt::format("leader: epoch {}", epoch));
  epoch_batches_ = std::move(batches).value();
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
                       schedule_->ProducerChunk(plan_.producer_batch(), int(b)),
                       schedule_->LrFactor(plan_.producer_batch(), int(b)));
  }
  const std::string line = fmt::format(
      "epoch {} ({}): {} of {} samples in {} producer batches: {}", epoch,
      schedule::EpochPhaseName(schedule_->Phase(static_cast<int>(epoch))), epoch_samples_,
      plan_.num_samples(), epoch_batches_.size(), mix);
  BC_LOG(Info, Sched, "leader: {}", line);
  if (config_.collector != nullptr) config_.collector->Annotate("leader " + line);
  if (epoch_samples_ < static_cast<uint64_t>(plan_.num_samples()))
    BC_LOG(Info, Sched, "leader: epoch {} covers {} of {} samples (exhaustive mode trains only "
           "the smallest non-empty bucket)", epoch, epoch_samples_, plan_.num_samples());
  return static_cast<int64_t>(epoch_batches_.size());
}

int64_t Leader::FirstPosition() const {
  return schedule_ != nullptr ? 0 : producer::ResumeFirstBatch(config_.options,
                                                               plan_.producer_batch());
}

Leader::BatchPlan Leader::PlanBatch(uint64_t epoch, int64_t k) {
  BatchPlan bp;
  if (schedule_ == nullptr) {
    bp.samples = plan_.Batch(epoch, k);
    return bp;
  }
  const schedule::ProducerBatch& pb = epoch_batches_[static_cast<size_t>(k)];
  const uint64_t full = static_cast<uint64_t>(schedule_->full_size());
  bp.samples = pb.samples;
  bp.image_size = pb.image_size;
  bp.lr_factor = static_cast<float>(pb.lr_factor);
  bp.scale_num = static_cast<uint32_t>(full * full);
  bp.scale_den = static_cast<uint32_t>(uint64_t(pb.image_size) * uint64_t(pb.image_size));
  return bp;
}

void Leader::Abort(const std::string& why) {
  abort_.Set(why);
  ring_->Fail(why);
}

Status Leader::Run() {
  if (config_.expected_consumers > 0) {
    Status st = ring_->WaitForJoined(config_.expected_consumers, config_.join_timeout_ms);
    if (!st.ok()) {
      ring_->Fail(st.message());
      return st;
    }
  }
  writer_->RecordStart(source_->threads());
  const Options& o = config_.options;
  for (uint64_t e = static_cast<uint64_t>(o.start_epoch); e < static_cast<uint64_t>(o.epochs);
       ++e) {
    auto epoch_batches = BeginEpoch(e);
    if (!epoch_batches.ok()) {
      ring_->Fail(epoch_batches.status().message());
      return epoch_batches.status();
    }
    bool ended = false;
    const int64_t first = e == static_cast<uint64_t>(o.start_epoch) ? FirstPosition() : 0;
    Status st = RunEpoch(e, *epoch_batches, first, &ended);
    if (!st.ok()) {
      if (abort_.set()) return abort_.Error("leader");
      ring_->Fail(st.message());
      return st;
    }
    if (ended) return Status::Ok();
  }
  ring_->End();
  writer_->ReportSkips();
  const LeaderStats s = stats();
  BC_LOG(Info, Node, "leader: stream complete: {} producer batches, {} samples, {} skipped, {} "
         "replayed to {} late joiner(s)", s.producer_batches, s.samples_produced,
         s.samples_skipped, s.replayed_batches, s.late_joins);
  return Status::Ok();
}

// One epoch: producer::RunEpochPositions settles membership before every position.
Status Leader::RunEpoch(uint64_t e, int64_t bpe, int64_t first, bool* ended) {
  producer::EpochPolicy policy;
  policy.who = "leader";
  policy.first = std::min(first, bpe);
  policy.produce = [&](int64_t k, uint64_t only, const producer::AcquireWait& wait,
                       int64_t next_k) { return ProduceOne(e, k, bpe, only, wait, next_k); };
  policy.idle = [&](int64_t k) {
    if (config_.end_when_empty) {
      BC_LOG(Info, Node, "leader: every consumer has left at epoch {} batch {}; ending", e, k);
      ring_->End();
      return true;
    }
    admission_->WaitForMembers(abort_.flag());
    return false;
  };
  policy.check_stop = [this] {
    return abort_.set() ? abort_.Error("leader") : Status::Ok();
  };
  producer::EpochCounts counts;
  Status st = producer::RunEpochPositions(*writer_, *admission_, e, bpe, policy, &counts, ended);
  replayed_ += counts.replayed_batches;
  if (config_.collector != nullptr && counts.replayed_batches > 0)
    config_.collector->Add(telemetry::Counter::kBatchesReplayed, counts.replayed_batches);
  return st;
}

producer::ProduceRequest Leader::Request(uint64_t epoch, int64_t k, int64_t bpe,
                                         BatchPlan* bp) {
  *bp = PlanBatch(epoch, k);
  producer::ProduceRequest req;
  req.samples = bp->samples;
  req.image_size = bp->image_size;
  req.sample = schedule_ ? source_->Layout(bp->image_size) : layout_;
  producer::SlotContents& c = req.contents;
  c.epoch = epoch;
  c.batch = k;
  c.batches_in_epoch = bpe;
  c.samples_in_epoch = epoch_samples_;
  c.lr_factor = bp->lr_factor;
  c.image_size = schedule_ ? bp->image_size : 0;
  c.scale_num = bp->scale_num;
  c.scale_den = bp->scale_den;
  c.scale_cap = schedule_ ? scale_cap_ : 0;
  c.lr_rule = schedule_ ? lr_rule_ : uint32_t(shm::kLrGiven);
  return req;
}

Result<std::optional<uint64_t>> Leader::ProduceOne(uint64_t epoch, int64_t k, int64_t bpe,
                                                   uint64_t only,
                                                   const producer::AcquireWait& wait,
                                                   int64_t next_k) {
  BatchPlan bp, next_bp;
  const producer::ProduceRequest req = Request(epoch, k, bpe, &bp);
  if (next_k < 0) return writer_->Produce(*source_, req, only, wait);
  const producer::ProduceRequest next = Request(epoch, next_k, bpe, &next_bp);
  return writer_->Produce(*source_, req, only, wait, &next);
}

Status Leader::WaitUntilEmpty(int64_t timeout_ms) {
  return producer::WaitUntilEmpty(*ring_, timeout_ms, "leader");
}

}  // namespace batchcast::node
