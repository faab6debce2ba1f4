// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "node/external_producer.h"

#include <algorithm>
#include <cstring>

#include "core/errors.h"
#include "core/log.h"
#include "producer/slot_layout.h"

namespace batchcast::node {

Result<std::unique_ptr<ExternalProducer>> ExternalProducer::Create(
    const ExternalProducerConfig& config) {
  const auto& c = config;
  if (c.layout.bytes() == 0 && c.tensors.empty())
    return InvalidArgumentError("producer: empty sample layout {}x{}x{} and no named tensors; "
                                "every sample needs an image or a named tensor",
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
  producer::SlotLayout slot =
      producer::ComputeSlotLayout(c.producer_batch, c.max_consumer_batch, c.layout);
  BC_RETURN_IF_ERROR(producer::AddTensors(c.tensors, "producer", &slot));
  shm::RingConfig rc = producer::RingConfigFor(
      slot, c.ring_slots, c.max_consumer_batch, static_cast<uint64_t>(c.producer_batch),
      static_cast<uint64_t>(std::max<int64_t>(0, c.epoch_samples)), c.epochs);
  rc.socket_name = c.socket_name;
  rc.batch_limit_advice = c.batch_limit_advice;
  rc.job = c.job;
  rc.rank = c.rank;
  rc.heartbeat_ms = c.heartbeat_ms;
  auto ring = shm::RingLeader::Create(rc);
  if (!ring.ok()) return ring.status().WithContext("producer");
  p->ring_ = std::move(ring).value();
  p->writer_ = std::make_unique<producer::SlotWriter>(p->ring_.get(), slot, "producer",
                                                      c.collector);
  producer::AdmissionPolicy policy;
  policy.late_join_window = 0;  // no replay: the batches are the caller's
  policy.ring_slots = rc.num_slots;
  p->admission_ = std::make_unique<producer::Admission>(p->ring_.get(), policy);
  BC_LOG(Info, Node, "producer: external batches of up to {} samples ({} bytes each), {} slots "
         "of {} MiB at '{}'", c.producer_batch, c.layout.bytes(), rc.num_slots,
         rc.slot_bytes >> 20, c.socket_name);
  return p;
}

ExternalProducer::~ExternalProducer() {
  if (ring_ && !ended_) ring_->Fail("producer: destroyed before the end of the stream");
}

Status ExternalProducer::WaitForConsumers(int n, int64_t timeout_ms) {
  BC_RETURN_IF_ERROR(ring_->WaitForJoined(n, timeout_ms));
  AdmitJoining();
  return Status::Ok();
}

// The caller's epoch boundary: joiners receive the next batch committed.
int ExternalProducer::AdmitJoining() {
  return __builtin_popcountll(admission_->AdmitJoiners(ring_->next_seq(), 0, 1));
}

int ExternalProducer::active_consumers() const {
  return ring_->CountMembers(shm::MemberState::kActive);
}

int ExternalProducer::joining_consumers() const {
  return ring_->CountMembers(shm::MemberState::kJoining);
}

Result<ExternalSlot> ExternalProducer::Begin(int64_t timeout_ms) {
  if (ended_) return FailedPreconditionError("producer: the stream has already ended");
  producer::AcquireWait wait;
  if (timeout_ms >= 0) {
    wait.poll_ms = [timeout_ms] { return timeout_ms; };
    wait.on_timeout = [timeout_ms]() -> Result<bool> {
      return DeadlineExceededError("producer: no free slot within {} ms", timeout_ms);
    };
  }
  BC_ASSIGN_OR_RETURN(std::optional<shm::SlotWrite> w,
                      writer_->Acquire(ring_->next_seq(), wait));
  const producer::SlotLayout& layout = writer_->layout();
  ExternalSlot s;
  s.write = *w;
  s.seq = w->seq;
  s.images = w->data;
  s.labels = layout.labels(w->data);
  s.ids = layout.ids(w->data);
  s.capacity = config_.producer_batch;
  for (const producer::TensorSlot& t : layout.tensors) s.tensors.push_back(w->data + t.offset);
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
  if (commit.batch_in_epoch == 0) AdmitJoining();  // the caller's epoch starts here
  const int64_t p = config_.producer_batch;
  const int64_t epoch_samples = std::max<int64_t>(0, config_.epoch_samples);
  producer::SlotContents c;
  c.epoch = commit.epoch;
  c.batch = static_cast<int64_t>(commit.batch_in_epoch);
  c.batches_in_epoch = epoch_samples > 0 ? (epoch_samples + p - 1) / p : 0;
  c.last_in_epoch = commit.last_in_epoch;
  c.samples_in_epoch = static_cast<uint64_t>(epoch_samples);
  c.num_samples = n;
  c.layout = config_.layout;
  c.lr_factor = commit.lr_factor;
  BC_RETURN_IF_ERROR(writer_->Publish(slot.write, c, ~0ULL, producer::BatchRecord{}).status());
  epoch_position_ += n;
  return Status::Ok();
}

void ExternalProducer::End() {
  if (ended_) return;
  ended_ = true;
  ring_->End();
  const ExternalProducerStats s = stats();
  BC_LOG(Info, Node, "producer: stream complete: {} batches, {} samples, {} published to nobody",
         s.batches, s.samples, s.dropped_batches);
}

void ExternalProducer::Fail(const std::string& why) {
  if (ended_) return;
  ended_ = true;
  ring_->Fail(why);
}

ExternalProducerStats ExternalProducer::stats() const {
  const producer::WriterStats& w = writer_->stats();
  ExternalProducerStats s;
  s.batches = w.producer_batches;
  s.samples = w.samples_produced;
  s.dropped_batches = w.dropped_batches;
  s.tail_copies = w.tail_copies;
  s.slot_wait_ns = w.slot_wait_ns;
  return s;
}

}  // namespace batchcast::node
