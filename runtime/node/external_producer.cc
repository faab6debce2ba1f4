// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "node/external_producer.h"

#include <algorithm>
#include <cstring>

#include "core/errors.h"
#include "core/log.h"
#include "transport/shm/carving.h"
#include "transport/shm/futex.h"

namespace batchcast::node {
namespace {

uint64_t Align(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

}  // namespace

Result<std::unique_ptr<ExternalProducer>> ExternalProducer::Create(
    const ExternalProducerConfig& config) {
  const auto& c = config;
  if (c.layout.bytes() == 0)
    return InvalidArgumentError("producer: empty sample layout {}x{}x{}; every image needs bytes",
                                c.layout.channels, c.layout.height, c.layout.width);
  if (c.producer_batch <= 0)
    return InvalidArgumentError("producer: producer_batch {} must be positive", c.producer_batch);
  if (c.max_consumer_batch == 0 || int64_t(c.max_consumer_batch) > c.producer_batch)
    return InvalidArgumentError(
        "producer: largest consumer batch {} must be between 1 and the producer batch {}; "
        "lower max_consumer_batch or publish larger batches",
        c.max_consumer_batch, c.producer_batch);
  if (c.ring_slots < 2)
    return InvalidArgumentError("producer: ring_slots {} must be at least 2", c.ring_slots);
  std::unique_ptr<ExternalProducer> p(new ExternalProducer(config));
  const uint64_t sb = c.layout.bytes();
  const uint64_t max_b = c.max_consumer_batch;
  // P distinct samples plus the fill repeats any consumer batch <= max_b can need.
  p->capacity_samples_ = uint64_t(c.producer_batch) + 2 * max_b - 1;
  p->labels_offset_ = Align(p->capacity_samples_ * sb, 64);
  p->ids_offset_ = Align(p->labels_offset_ + p->capacity_samples_ * sizeof(int64_t), 64);
  shm::RingConfig rc;
  rc.num_slots = c.ring_slots;
  rc.slot_bytes = Align(p->ids_offset_ + p->capacity_samples_ * sizeof(int64_t), 4096);
  rc.max_consumer_batch = c.max_consumer_batch;
  rc.producer_batch = static_cast<uint32_t>(c.producer_batch);
  rc.epoch_samples = static_cast<uint64_t>(std::max<int64_t>(0, c.epoch_samples));
  rc.socket_name = c.socket_name;
  rc.job = c.job;
  rc.rank = c.rank;
  rc.heartbeat_ms = c.heartbeat_ms;
  auto ring = shm::RingLeader::Create(rc);
  if (!ring.ok()) return ring.status().WithContext("producer");
  p->ring_ = std::move(ring).value();
  BC_LOG(Info, Node, "producer: external batches of up to {} samples ({} bytes each), {} slots "
         "of {} MiB at '{}'", c.producer_batch, sb, rc.num_slots, rc.slot_bytes >> 20,
         c.socket_name);
  return p;
}

ExternalProducer::~ExternalProducer() {
  if (ring_ && !ended_) ring_->Fail("producer: destroyed before the end of the stream");
}

Status ExternalProducer::WaitForConsumers(int n, int64_t timeout_ms) {
  BC_RETURN_IF_ERROR(ring_->WaitForJoined(n, timeout_ms));
  ring_->AdmitJoining(ring_->next_seq());
  return Status::Ok();
}

int ExternalProducer::AdmitJoining() { return ring_->AdmitJoining(ring_->next_seq()); }

int ExternalProducer::active_consumers() const {
  return ring_->CountMembers(shm::MemberState::kActive);
}

int ExternalProducer::joining_consumers() const {
  return ring_->CountMembers(shm::MemberState::kJoining);
}

Result<ExternalSlot> ExternalProducer::Begin(int64_t timeout_ms) {
  if (ended_) return FailedPreconditionError("producer: the stream has already ended");
  int64_t t0 = shm::MonotonicNs();
  auto w = ring_->AcquireSlot(timeout_ms);
  stats_.slot_wait_ns += shm::MonotonicNs() - t0;
  if (!w.ok()) return w.status();
  ExternalSlot s;
  s.write = *w;
  s.seq = w->seq;
  s.images = w->data;
  s.labels = reinterpret_cast<int64_t*>(w->data + labels_offset_);
  s.ids = reinterpret_cast<int64_t*>(w->data + ids_offset_);
  s.capacity = config_.producer_batch;
  return s;
}

Status ExternalProducer::Commit(const ExternalSlot& slot, const ExternalCommit& commit,
                                bool ids_written) {
  if (slot.seq != ring_->next_seq())
    return FailedPreconditionError("producer: commit of position {} but the next is {}",
                                   slot.seq, ring_->next_seq());
  if (commit.num_samples <= 0 || commit.num_samples > slot.capacity)
    return InvalidArgumentError("producer: a batch of {} samples does not fit a slot of {}",
                                commit.num_samples, slot.capacity);
  if (commit.epoch != epoch_) {
    epoch_ = commit.epoch;
    epoch_position_ = 0;
  }
  const uint32_t n = static_cast<uint32_t>(commit.num_samples);
  if (!ids_written)
    for (uint32_t i = 0; i < n; ++i) slot.ids[i] = epoch_position_ + i;
  uint32_t tail = 0;
  for (const auto& r : ring_->Receivers(slot.seq))
    tail = std::max(tail, shm::TailNeeded(n, r.batch_size, r.flags));
  if (n + uint64_t(tail) > capacity_samples_)
    return InternalError("producer: tail of {} does not fit a slot of {} samples", tail,
                         capacity_samples_);
  const uint64_t sb = config_.layout.bytes();
  for (uint32_t j = 0; j < tail; ++j) {  // fill repeats, written once for every consumer
    uint32_t src = j % n;
    std::memcpy(slot.images + uint64_t(n + j) * sb, slot.images + uint64_t(src) * sb, sb);
    slot.labels[n + j] = slot.labels[src];
    slot.ids[n + j] = slot.ids[src];
  }
  shm::SlotDesc* d = slot.write.desc;
  const int64_t p = config_.producer_batch;
  const int64_t epoch_samples = config_.epoch_samples;
  d->epoch = commit.epoch;
  d->batch_in_epoch = commit.batch_in_epoch;
  d->batches_in_epoch = epoch_samples > 0 ? uint64_t((epoch_samples + p - 1) / p) : 0;
  d->samples_in_epoch = static_cast<uint64_t>(std::max<int64_t>(0, epoch_samples));
  d->num_samples = n;
  d->tail = tail;
  d->skipped = 0;
  d->flags = commit.last_in_epoch ? uint32_t(shm::kLastInEpoch) : 0u;
  d->dtype = static_cast<uint32_t>(config_.layout.dtype);
  d->layout = static_cast<uint32_t>(config_.layout.layout);
  d->channels = config_.layout.channels;
  d->height = config_.layout.height;
  d->width = config_.layout.width;
  d->sample_bytes = sb;
  d->images_offset = 0;
  d->labels_offset = labels_offset_;
  d->ids_offset = ids_offset_;
  d->lr_factor = commit.lr_factor;
  d->image_size = config_.layout.height;
  uint64_t mask = ring_->Publish(slot.write);
  epoch_position_ += n;
  stats_.batches += 1;
  stats_.samples += n;
  stats_.tail_copies += tail;
  if (mask == 0) stats_.dropped_batches += 1;
  return Status::Ok();
}

void ExternalProducer::End() {
  if (ended_) return;
  ended_ = true;
  ring_->End();
  BC_LOG(Info, Node, "producer: stream complete: {} batches, {} samples, {} published to nobody",
         stats_.batches, stats_.samples, stats_.dropped_batches);
}

void ExternalProducer::Fail(const std::string& why) {
  if (ended_) return;
  ended_ = true;
  ring_->Fail(why);
}

ExternalProducerStats ExternalProducer::stats() const { return stats_; }

}  // namespace batchcast::node
