// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// A node leader for batches made elsewhere (a Python DataLoader, a test, another
// process's pipeline): it owns the ring and the control socket like node::Leader, but
// instead of running a BatchSource it hands the caller an empty slot to write into and
// publishes it when the caller commits. Consumers cannot tell the difference: they carve
// their own batch sizes out of each published batch exactly as from the native leader.
//
//   auto p = ExternalProducer::Create(config).value();
//   BC_RETURN_IF_ERROR(p->WaitForConsumers(1, -1));
//   for each batch of the epoch:
//     BC_ASSIGN_OR_RETURN(ExternalSlot slot, p->Begin(-1));   // blocks on backpressure
//     write n samples to slot.images / slot.labels (/ slot.ids)
//     BC_RETURN_IF_ERROR(p->Commit(slot, {epoch, k, n, last, ids_written}));
//   p->End();
//
// Epochs are the caller's: the batch it commits with last_in_epoch ends the epoch.
// Slot layout, tail, descriptor, publish and telemetry are the producer core's
// (producer::SlotWriter), as for every other producer. Late join: a joiner is admitted at
// the caller's next epoch start (the first batch committed with batch_in_epoch 0, or
// AdmitJoining()); the batches are the caller's and cannot be made again, so there is no
// late-join replay here.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "batchcast/options.h"
#include "batchcast/status.h"
#include "pipeline/pipeline.h"
#include "producer/admission.h"
#include "producer/slot_writer.h"
#include "transport/shm/ring_leader.h"

namespace batchcast::telemetry {
class Collector;
}

namespace batchcast::node {

struct ExternalProducerConfig {
  pipeline::SampleLayout layout;     // every image has this layout (0 bytes: no images, then
                                     // `tensors` must name at least one tensor)
  std::vector<producer::TensorSpec> tensors;  // further named tensors of every sample
  int64_t producer_batch = 0;        // most samples one committed batch holds
  int64_t epoch_samples = 0;         // samples per epoch (0: unknown; consumers' len() is 0)
  int64_t epochs = 0;                // epochs the caller will publish (0: unknown)
  uint32_t max_consumer_batch = 0;   // largest consumer batch admitted (<= producer_batch)
  std::string batch_limit_advice;    // how its user admits a larger one ("" = generic)
  uint32_t ring_slots = 4;           // slots in flight (consumers' buffer depth + 2 or more)
  int64_t heartbeat_ms = 10000;
  std::string socket_name;           // abstract socket name, unique per node
  std::string job;
  int rank = -1;
  telemetry::Collector* collector = nullptr;  // optional; not owned
};

// An acquired slot: write up to `capacity` samples, then Commit() (or Abandon()).
struct ExternalSlot {
  uint64_t seq = 0;
  uint8_t* images = nullptr;         // capacity * layout.bytes()
  int64_t* labels = nullptr;         // capacity entries
  int64_t* ids = nullptr;            // capacity entries (dataset index of each sample)
  int64_t capacity = 0;              // == producer_batch
  std::vector<uint8_t*> tensors;     // config.tensors[t]: capacity x its sample bytes
  shm::SlotWrite write;
};

struct ExternalCommit {
  uint64_t epoch = 0;
  uint64_t batch_in_epoch = 0;
  int64_t num_samples = 0;           // samples written at the front of the slot
  bool last_in_epoch = false;
  float lr_factor = 1.0f;
};

struct ExternalProducerStats {
  int64_t batches = 0;
  int64_t samples = 0;
  int64_t dropped_batches = 0;       // published while nobody was attached
  int64_t tail_copies = 0;
  int64_t slot_wait_ns = 0;          // backpressure
};

class ExternalProducer {
 public:
  static Result<std::unique_ptr<ExternalProducer>> Create(const ExternalProducerConfig& config);
  ~ExternalProducer();
  ExternalProducer(const ExternalProducer&) = delete;
  ExternalProducer& operator=(const ExternalProducer&) = delete;

  const std::string& address() const { return config_.socket_name; }
  const ExternalProducerConfig& config() const { return config_; }
  shm::RingLeader& ring() { return *ring_; }

  // Waits up to timeout_ms (< 0: forever) until at least n consumers have joined, then
  // admits everyone waiting so they receive the next batch. kDeadlineExceeded on timeout
  // (nothing changes; call again).
  Status WaitForConsumers(int n, int64_t timeout_ms);
  // Admits consumers that joined since (call at an epoch boundary so they start an epoch).
  int AdmitJoining();
  int active_consumers() const;
  int joining_consumers() const;

  // Waits up to timeout_ms (< 0: forever) for the next free slot (backpressure from the
  // slowest consumer). kDeadlineExceeded on timeout: nothing was acquired; call again.
  Result<ExternalSlot> Begin(int64_t timeout_ms);
  // Completes the slot (fill repeats for consumers' carving, descriptor) and publishes it.
  // `ids_written` false: ids are the running index epoch_position + i.
  Status Commit(const ExternalSlot& slot, const ExternalCommit& commit, bool ids_written);

  // Normal end: consumers drain what was published, then see the end of the stream.
  void End();
  // Abnormal end: consumers fail with `why`.
  void Fail(const std::string& why);

  ExternalProducerStats stats() const;

 private:
  explicit ExternalProducer(const ExternalProducerConfig& config) : config_(config) {}

  ExternalProducerConfig config_;
  std::unique_ptr<shm::RingLeader> ring_;
  std::unique_ptr<producer::SlotWriter> writer_;
  std::unique_ptr<producer::Admission> admission_;
  uint64_t epoch_ = ~0ULL;
  int64_t epoch_position_ = 0;       // samples committed so far in the current epoch
  bool ended_ = false;
};

}  // namespace batchcast::node
