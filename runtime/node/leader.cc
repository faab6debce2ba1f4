// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "node/leader.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <thread>

#include "core/errors.h"
#include "core/log.h"
#include "node/slot_fill.h"
#include "schedule/plan_format.h"
#include "schedule/resize_spec.h"
#include "transport/shm/carving.h"
#include "transport/shm/futex.h"
#include "telemetry/metrics.h"

namespace batchcast::node {
namespace {

uint64_t Align(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

}  // namespace

Leader::Leader(const LeaderConfig& config, std::unique_ptr<BatchSource> source,
               int64_t producer_batch)
    : config_(config),
      source_(std::move(source)),
      plan_(std::min<int64_t>(source_->num_samples(),
                              config.options.limit_samples > 0 ? config.options.limit_samples
                                                               : source_->num_samples()),
            producer_batch, config.options.seed, config.options.shuffle) {}

Result<std::unique_ptr<Leader>> Leader::Create(const LeaderConfig& config,
                                               std::unique_ptr<BatchSource> source) {
  const Options& o = config.options;
  uint32_t max_b = config.max_consumer_batch ? config.max_consumer_batch
                                             : static_cast<uint32_t>(o.batch_size);
  int64_t p = o.producer_batch > 0 ? o.producer_batch : 2 * int64_t(max_b);
  if (p < max_b)
    return InvalidArgumentError(
        "producer_batch {} is smaller than the largest consumer batch {}; raise producer_batch",
        p, max_b);
  if (source->num_samples() <= 0)
    return InvalidArgumentError("leader: the dataset has no samples");
  std::unique_ptr<Leader> leader(new Leader(config, std::move(source), p));
  Leader& l = *leader;
  l.layout_ = l.source_->MaxLayout();
  if (!o.resize.empty()) BC_RETURN_IF_ERROR(l.InitResize(p, max_b));
  shm::RingConfig rc;
  rc.num_slots = static_cast<uint32_t>(o.ring_slots > 0 ? o.ring_slots : o.buffer_depth + 2);
  l.SizeSlots(p, max_b, &rc.slot_bytes);
  rc.max_consumer_batch = max_b;
  rc.producer_batch = static_cast<uint32_t>(p);
  rc.epoch_samples = static_cast<uint64_t>(l.plan_.num_samples());
  rc.stream_epochs = static_cast<uint32_t>(std::max(o.epochs, 0));
  if (l.schedule_ != nullptr) rc.resize_spec = schedule::ResizeSpecToString(l.schedule_->spec());
  rc.socket_name = config.socket_name;
  rc.job = config.job;
  rc.rank = config.rank;
  rc.heartbeat_ms = o.heartbeat_ms;
  auto ring = shm::RingLeader::Create(rc);
  if (!ring.ok()) return ring.status().WithContext("leader");
  l.ring_ = std::move(ring).value();
  BC_LOG(Info, Node, "leader: {} samples/epoch, producer batch {}, {} batches/epoch, slot {} MiB",
         l.plan_.num_samples(), p, l.plan_.BatchesPerEpoch(), rc.slot_bytes >> 20);
  return leader;
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

// Room for P distinct samples plus the tail any consumer batch <= max_b can need. With a
// resize schedule, the largest over the buckets: a bucket's producer batch holds
// floor(P x B_S) smaller samples and its consumers carve scaled batches.
void Leader::SizeSlots(int64_t p, uint32_t max_b, uint64_t* slot_bytes) {
  capacity_samples_ = uint64_t(p) + 2 * uint64_t(max_b) - 2 + 1;
  images_bytes_ = capacity_samples_ * layout_.bytes();
  if (schedule_ != nullptr) {
    const uint64_t full = static_cast<uint64_t>(schedule_->full_size());
    for (int size : schedule_->bucket_sizes()) {
      const auto num = static_cast<uint32_t>(full * full);
      const auto den = static_cast<uint32_t>(uint64_t(size) * uint64_t(size));
      uint64_t n = uint64_t(p) * num / den;  // the schedule's producer batch at this size
      uint64_t b = shm::ScaledConsumerBatch(max_b, num, den, scale_cap_);
      uint64_t count = n + 2 * b - 2 + 1;
      capacity_samples_ = std::max(capacity_samples_, count);
      images_bytes_ = std::max<uint64_t>(images_bytes_, count * source_->Layout(size).bytes());
    }
  }
  labels_offset_ = Align(images_bytes_, 64);
  ids_offset_ = Align(labels_offset_ + capacity_samples_ * sizeof(int64_t), 64);
  *slot_bytes = Align(ids_offset_ + capacity_samples_ * sizeof(int64_t), 4096);
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
  abort_.store(true);
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
  ring_->AdmitJoining(0);
  if (telemetry::Collector* tc = config_.collector) {
    tc->SetGauge(telemetry::Gauge::kRingSlots, ring_->config().num_slots);
    tc->SetGauge(telemetry::Gauge::kWorkerThreads, source_->threads());
  }
  for (uint64_t e = 0; e < static_cast<uint64_t>(config_.options.epochs); ++e) {
    auto epoch_batches = BeginEpoch(e);
    if (!epoch_batches.ok()) {
      ring_->Fail(epoch_batches.status().message());
      return epoch_batches.status();
    }
    const int64_t bpe = *epoch_batches;
    for (int64_t k = 0; k < bpe; ++k) {
      if (abort_.load()) return CancelledError("leader: aborted");
      if (k == 0 && e > 0) ring_->AdmitJoining(ring_->next_seq());  // joiners start an epoch
      if (config_.end_when_empty && ring_->CountMembers(shm::MemberState::kActive) == 0 &&
          ring_->CountMembers(shm::MemberState::kJoining) == 0) {
        BC_LOG(Info, Node, "leader: every consumer has left at epoch {} batch {}; ending", e, k);
        ring_->End();
        return Status::Ok();
      }
      Status st = ProduceOne(e, k, bpe);
      if (!st.ok()) {
        ring_->Fail(st.message());
        return st;
      }
    }
  }
  ring_->End();
  BC_LOG(Info, Node, "leader: stream complete: {} producer batches, {} samples, {} skipped",
         stats_.producer_batches, stats_.samples_produced, stats_.samples_skipped);
  return Status::Ok();
}

Status Leader::ProduceOne(uint64_t epoch, int64_t k, int64_t bpe) {
  int64_t t0 = shm::MonotonicNs();
  BC_ASSIGN_OR_RETURN(shm::SlotWrite w, ring_->AcquireSlot());
  int64_t t1 = shm::MonotonicNs();
  stats_.slot_wait_ns += t1 - t0;
  if (slot_hook_ != nullptr) BC_RETURN_IF_ERROR(slot_hook_->BeforeFill(w));
  const BatchPlan bp = PlanBatch(epoch, k);
  std::span<const int64_t> samples = bp.samples;
  const pipeline::SampleLayout layout = schedule_ ? source_->Layout(bp.image_size) : layout_;
  auto* labels = reinterpret_cast<int64_t*>(w.data + labels_offset_);
  auto* ids = reinterpret_cast<int64_t*>(w.data + ids_offset_);
  pipeline::BatchRequest req;
  req.epoch = epoch;
  req.samples = samples;
  req.image_size = bp.image_size;
  req.images = w.data;
  req.labels = labels;
  pipeline::BatchResult result;
  Status st = source_->Fill(req, &result);
  if (!st.ok())
    return st.WithContext(fmt::format("leader: epoch {} producer batch {}", epoch, k));
  int64_t t2 = shm::MonotonicNs();
  stats_.fill_ns += t2 - t1;
  const uint32_t n = static_cast<uint32_t>(result.written);
  if (result.kept.size() == n) std::copy(result.kept.begin(), result.kept.end(), ids);
  else std::copy(samples.begin(), samples.begin() + n, ids);

  SlotContents c;
  c.epoch = epoch;
  c.batch = k;
  c.batches_in_epoch = bpe;
  c.samples_in_epoch = epoch_samples_;
  c.num_samples = n;
  c.skipped = static_cast<uint32_t>(result.skipped.size());
  c.layout = layout;
  c.labels_offset = labels_offset_;
  c.ids_offset = ids_offset_;
  c.capacity_samples = capacity_samples_;
  c.images_bytes = images_bytes_;
  c.lr_factor = bp.lr_factor;
  c.image_size = schedule_ ? bp.image_size : 0;
  c.scale_num = bp.scale_num;
  c.scale_den = bp.scale_den;
  c.scale_cap = schedule_ ? scale_cap_ : 0;
  c.lr_rule = schedule_ ? lr_rule_ : uint32_t(shm::kLrGiven);
  const uint32_t tail = TailForReceivers(*ring_, w.seq, ~0ULL, c);
  BC_RETURN_IF_ERROR(CompleteSlot(w, tail, c).WithContext("leader"));
  const uint64_t sb = layout.bytes();
  if (slot_hook_ != nullptr) BC_RETURN_IF_ERROR(slot_hook_->BeforePublish(w));
  int64_t t3 = shm::MonotonicNs();
  uint64_t receivers = ring_->Publish(w);
  int64_t t4 = shm::MonotonicNs();
  if (telemetry::Collector* tc = config_.collector) {
    using telemetry::Counter, telemetry::Timer, telemetry::Gauge, telemetry::SpanKind;
    tc->Add(Counter::kBatchesProduced, 1);
    tc->Add(Counter::kSamplesProduced, n);
    tc->Add(Counter::kSamplesSkipped, static_cast<int64_t>(result.skipped.size()));
    tc->Add(Counter::kBytesShm, static_cast<int64_t>((n + uint64_t(tail)) * sb));
    tc->AddTime(Timer::kRead, result.read_ns);
    tc->AddTime(Timer::kDecode, result.decode_ns);
    tc->AddTime(Timer::kTransform, result.transform_ns);
    tc->AddTime(Timer::kCollate, t3 - t2);
    tc->AddTime(Timer::kPublish, t4 - t3);
    tc->Span(SpanKind::kProduce, w.seq, t1, t2);
    tc->Span(SpanKind::kPublish, w.seq, t3, t4);
    tc->SetGauge(Gauge::kRingOccupancy, ring_->OccupiedSlots());
    tc->SetGauge(Gauge::kConsumersAttached, __builtin_popcountll(receivers));
    if (schedule_ != nullptr) {  // progressive resizing: size, batch and LR factor over time
      tc->SetGauge(Gauge::kImageSize, bp.image_size);
      tc->SetGauge(Gauge::kBatchSize, n);
      tc->SetGauge(Gauge::kLrFactor, bp.lr_factor);
    }
  }
  stats_.producer_batches += 1;
  stats_.samples_produced += n;
  stats_.samples_skipped += static_cast<int64_t>(result.skipped.size());
  stats_.tail_copies += tail;
  for (size_t i = 0; i < result.skipped.size(); ++i)
    BC_LOG(Warn, Node, "leader: skipped sample {}: {}", result.skipped[i],
           i < result.skip_reasons.size() ? result.skip_reasons[i] : "bad sample");
  return Status::Ok();
}

Status Leader::WaitUntilEmpty(int64_t timeout_ms) {
  int64_t deadline = shm::MonotonicNs() + timeout_ms * 1000000LL;
  while (ring_->CountMembers(shm::MemberState::kActive) + ring_->CountMembers(shm::MemberState::kJoining) > 0) {
    if (shm::MonotonicNs() > deadline)
      return DeadlineExceededError("leader: consumers still attached after {} ms", timeout_ms);
    // Membership changes bump member_futex; wait on it instead of polling hard.
    uint32_t v = ring_->header()->member_futex.load();
    if (ring_->CountMembers(shm::MemberState::kActive) + ring_->CountMembers(shm::MemberState::kJoining) == 0) break;
    shm::FutexWait(&ring_->header()->member_futex, v, 100000000LL);
  }
  return Status::Ok();
}

}  // namespace batchcast::node
