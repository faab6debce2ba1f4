// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "producer/slot_writer.h"

#include <algorithm>

#include "core/errors.h"
#include "core/log.h"
#include "telemetry/collector.h"
#include "telemetry/metrics.h"
#include "transport/shm/futex.h"

namespace batchcast::producer {

SlotWriter::SlotWriter(shm::RingLeader* ring, const SlotLayout& layout, std::string who,
                       telemetry::Collector* collector)
    : ring_(ring), layout_(layout), who_(std::move(who)), collector_(collector) {}

void SlotWriter::RecordStart(int worker_threads) {
  if (collector_ == nullptr) return;
  collector_->SetGauge(telemetry::Gauge::kRingSlots, ring_->config().num_slots);
  collector_->SetGauge(telemetry::Gauge::kWorkerThreads, worker_threads);
}

Result<std::optional<shm::SlotWrite>> SlotWriter::Acquire(uint64_t seq, const AcquireWait& wait) {
  BC_ASSIGN_OR_RETURN(std::optional<shm::SlotWrite> w, AcquireSlot(seq, wait));
  if (w && hook_ != nullptr) BC_RETURN_IF_ERROR(hook_->BeforeFill(*w));
  return w;
}

Result<std::optional<shm::SlotWrite>> SlotWriter::AcquireSlot(uint64_t seq,
                                                              const AcquireWait& wait) {
  const int64_t t0 = wait_since_ns_ != 0 ? wait_since_ns_ : shm::MonotonicNs();
  wait_since_ns_ = 0;
  Result<shm::SlotWrite> acquired = UnavailableError("{}: no slot", who_);
  for (;;) {
    const int64_t poll = wait.poll_ms ? wait.poll_ms() : -1;
    acquired = ring_->AcquireSlotAt(seq, wait.on_timeout ? poll : -1);
    if (acquired.ok() || acquired.status().code() != StatusCode::kDeadlineExceeded ||
        !wait.on_timeout)
      break;
    BC_ASSIGN_OR_RETURN(bool give_up, wait.on_timeout());
    if (give_up) {
      wait_since_ns_ = t0;  // the next Acquire continues this wait
      return std::optional<shm::SlotWrite>();
    }
  }
  const int64_t waited = shm::MonotonicNs() - t0;
  stats_.slot_wait_ns += waited;
  stats_.max_slot_wait_ns = std::max(stats_.max_slot_wait_ns, waited);
  if (!acquired.ok()) return acquired.status().WithContext(who_);
  return std::optional<shm::SlotWrite>(*acquired);
}

Status SlotWriter::Fill(BatchSource& source, uint64_t epoch, int image_size,
                        std::span<const int64_t> samples, const pipeline::SampleLayout& sample,
                        uint8_t* data, int64_t pos, BatchRecord* record, uint32_t* written) {
  *written = 0;
  if (samples.empty()) return Status::Ok();
  int64_t* labels = layout_.labels(data) + pos;
  int64_t* ids = layout_.ids(data) + pos;
  pipeline::BatchRequest req;
  req.epoch = epoch;
  req.samples = samples;
  req.image_size = image_size;
  req.images = data + uint64_t(pos) * sample.bytes();
  req.labels = labels;
  pipeline::BatchResult result;
  const int64_t t0 = shm::MonotonicNs();
  Status st = source.Fill(req, &result);
  const int64_t t1 = shm::MonotonicNs();
  const size_t n = st.ok() ? std::min(size_t(result.written), samples.size()) : 0;
  if (result.kept.size() == n) std::copy(result.kept.begin(), result.kept.begin() + n, ids);
  else std::copy(samples.begin(), samples.begin() + n, ids);
  std::fill(ids + n, ids + samples.size(), int64_t(-1));
  if (record->produce_start_ns == 0) record->produce_start_ns = t0;
  record->produce_end_ns = t1;
  record->read_ns += result.read_ns;
  record->decode_ns += result.decode_ns;
  record->transform_ns += result.transform_ns;
  record->skipped += static_cast<int64_t>(result.skipped.size());
  stats_.fill_ns += t1 - t0;
  stats_.samples_decoded += static_cast<int64_t>(samples.size());
  stats_.samples_skipped += static_cast<int64_t>(result.skipped.size());
  skips_.AddSkips(epoch, result, who_);
  *written = static_cast<uint32_t>(n);
  return st;
}

Result<uint64_t> SlotWriter::Publish(const shm::SlotWrite& w, SlotContents c, uint64_t only,
                                     const BatchRecord& record) {
  c.labels_offset = layout_.labels_offset;
  c.ids_offset = layout_.ids_offset;
  c.capacity_samples = layout_.capacity_samples;
  c.images_bytes = layout_.images_bytes;
  const uint32_t tail = TailForReceivers(*ring_, w.seq, only, c);
  BC_RETURN_IF_ERROR(CompleteSlot(w, tail, c).WithContext(who_));
  if (hook_ != nullptr) BC_RETURN_IF_ERROR(hook_->BeforePublish(w));
  const int64_t t0 = shm::MonotonicNs();
  const uint64_t receivers = ring_->Publish(w, only);
  const int64_t t1 = shm::MonotonicNs();
  stats_.producer_batches += 1;
  stats_.samples_produced += c.num_samples;
  skips_.AddPublished(c.epoch, c.num_samples);
  stats_.tail_copies += tail;
  if (receivers == 0) stats_.dropped_batches += 1;
  Record(w, c, tail, record, t0, t1, receivers);
  return receivers;
}

Status SlotWriter::PublishEmpty(uint64_t epoch, int64_t batch) {
  BC_ASSIGN_OR_RETURN(std::optional<shm::SlotWrite> acquired, AcquireSlot(ring_->next_seq(), {}));
  const shm::SlotWrite& w = *acquired;
  w.desc->epoch = epoch;
  w.desc->batch_in_epoch = static_cast<uint64_t>(batch);
  ring_->Publish(w, 0);
  stats_.empty_positions += 1;
  return Status::Ok();
}

Result<std::optional<uint64_t>> SlotWriter::Produce(BatchSource& source,
                                                    const ProduceRequest& request, uint64_t only,
                                                    const AcquireWait& wait) {
  BC_ASSIGN_OR_RETURN(std::optional<shm::SlotWrite> acquired, Acquire(ring_->next_seq(), wait));
  if (!acquired) return std::optional<uint64_t>();
  const shm::SlotWrite& w = *acquired;
  const SlotContents& c = request.contents;
  BatchRecord record;
  uint32_t n = 0;
  Status st = Fill(source, c.epoch, request.image_size, request.samples, request.sample, w.data,
                   0, &record, &n);
  if (!st.ok())
    return st.WithContext(fmt::format("{}: epoch {} producer batch {}", who_, c.epoch, c.batch));
  SlotContents contents = c;
  contents.num_samples = n;
  contents.skipped = static_cast<uint32_t>(record.skipped);
  contents.layout = request.sample;
  BC_ASSIGN_OR_RETURN(uint64_t receivers, Publish(w, contents, only, record));
  return std::optional<uint64_t>(receivers);
}

void SlotWriter::Record(const shm::SlotWrite& w, const SlotContents& c, uint32_t tail,
                        const BatchRecord& r, int64_t t_pub, int64_t t_end, uint64_t receivers) {
  telemetry::Collector* tc = collector_;
  if (tc == nullptr) return;
  using telemetry::Counter, telemetry::Timer, telemetry::Gauge, telemetry::SpanKind;
  tc->Add(Counter::kBatchesProduced, 1);
  tc->Add(Counter::kSamplesProduced, c.num_samples);
  tc->Add(Counter::kSamplesSkipped, r.skipped);
  tc->Add(Counter::kBytesShm, static_cast<int64_t>((c.num_samples + uint64_t(tail)) *
                                                   c.layout.bytes()));
  tc->AddTime(Timer::kRead, r.read_ns);
  tc->AddTime(Timer::kDecode, r.decode_ns);
  tc->AddTime(Timer::kTransform, r.transform_ns);
  if (r.produce_start_ns != 0) {
    tc->AddTime(Timer::kCollate, t_pub - r.produce_end_ns);  // tail, descriptor, hook
    tc->Span(SpanKind::kProduce, w.seq, r.produce_start_ns, r.produce_end_ns);
  }
  tc->AddTime(Timer::kPublish, t_end - t_pub);
  tc->Span(SpanKind::kPublish, w.seq, t_pub, t_end);
  tc->SetGauge(Gauge::kRingOccupancy, ring_->OccupiedSlots());
  tc->SetGauge(Gauge::kConsumersAttached, __builtin_popcountll(receivers));
  if (c.scale_den != 0) {  // progressive resizing: size, batch and LR factor over time
    tc->SetGauge(Gauge::kImageSize, c.image_size);
    tc->SetGauge(Gauge::kBatchSize, c.num_samples);
    tc->SetGauge(Gauge::kLrFactor, c.lr_factor);
  }
}

}  // namespace batchcast::producer
