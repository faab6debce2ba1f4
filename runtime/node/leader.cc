// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "node/leader.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "core/errors.h"
#include "core/log.h"
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
  uint64_t sample_bytes = l.layout_.bytes();
  // Room for P distinct samples plus the tail any consumer batch <= max_b can need.
  l.capacity_samples_ = uint64_t(p) + 2 * uint64_t(max_b) - 2 + 1;
  uint64_t images = Align(l.capacity_samples_ * sample_bytes, 64);
  l.labels_offset_ = images;
  l.ids_offset_ = Align(l.labels_offset_ + l.capacity_samples_ * sizeof(int64_t), 64);
  shm::RingConfig rc;
  rc.num_slots = static_cast<uint32_t>(o.ring_slots > 0 ? o.ring_slots : o.buffer_depth + 2);
  rc.slot_bytes = Align(l.ids_offset_ + l.capacity_samples_ * sizeof(int64_t), 4096);
  rc.max_consumer_batch = max_b;
  rc.producer_batch = static_cast<uint32_t>(p);
  rc.epoch_samples = static_cast<uint64_t>(l.plan_.num_samples());
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
  const int64_t bpe = plan_.BatchesPerEpoch();
  for (uint64_t e = 0; e < static_cast<uint64_t>(config_.options.epochs); ++e) {
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
  std::span<const int64_t> samples = plan_.Batch(epoch, k);
  auto* labels = reinterpret_cast<int64_t*>(w.data + labels_offset_);
  auto* ids = reinterpret_cast<int64_t*>(w.data + ids_offset_);
  pipeline::BatchRequest req;
  req.epoch = epoch;
  req.samples = samples;
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

  uint32_t tail = 0;
  for (const auto& r : ring_->Receivers(w.seq))
    tail = std::max(tail, shm::TailNeeded(n, r.batch_size, r.flags));
  if (n + uint64_t(tail) > capacity_samples_)
    return InternalError("leader: tail of {} does not fit a slot of {} samples", tail,
                         capacity_samples_);
  const uint64_t sb = layout_.bytes();
  for (uint32_t j = 0; j < tail && n > 0; ++j) {  // fill repeats, written once for everyone
    uint32_t src = j % n;
    std::memcpy(w.data + uint64_t(n + j) * sb, w.data + uint64_t(src) * sb, sb);
    labels[n + j] = labels[src];
    ids[n + j] = ids[src];
  }
  shm::SlotDesc* d = w.desc;
  d->epoch = epoch;
  d->batch_in_epoch = static_cast<uint64_t>(k);
  d->batches_in_epoch = static_cast<uint64_t>(bpe);
  d->samples_in_epoch = static_cast<uint64_t>(plan_.num_samples());
  d->num_samples = n;
  d->tail = tail;
  d->skipped = static_cast<uint32_t>(result.skipped.size());
  d->flags = (k == bpe - 1) ? uint32_t(shm::kLastInEpoch) : 0u;
  d->dtype = static_cast<uint32_t>(layout_.dtype);
  d->layout = static_cast<uint32_t>(layout_.layout);
  d->channels = layout_.channels;
  d->height = layout_.height;
  d->width = layout_.width;
  d->sample_bytes = sb;
  d->images_offset = 0;
  d->labels_offset = labels_offset_;
  d->ids_offset = ids_offset_;
  d->lr_factor = 1.0f;
  d->image_size = layout_.height;
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
