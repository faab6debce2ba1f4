// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// What a consumer knows of its stream (batches per epoch, whether the device path can map
// its batches) and the runtime-internal hooks of consumer_internal.h.
#include <cstring>
#include <string>
#include <vector>

#include "batchcast/consumer.h"
#include "core/errors.h"
#include "core/log.h"
#include "node/consumer_core.h"
#include "node/consumer_internal.h"
#include "schedule/resize_schedule.h"
#include "schedule/resize_spec.h"
#include "telemetry/collector.h"
#include "transport/shm/carving.h"
#include "transport/shm/control.h"
#include "transport/shm/ring_consumer.h"

namespace batchcast {
namespace internal {

// A batch asked for after Next() has returned kEndOfStream: a loop over more epochs than
// this consumer's stream has (`for epoch in range(E)` around a per-epoch loop) would
// otherwise train on nothing, silently. Names both epoch counts.
Status ConsumerCore::PastTheEndLocked() const {
  const uint64_t stream = ring->header()->stream_epochs;
  const int64_t done = stats.epochs_completed;
  const std::string where = shm::DisplayAddress(address);
  const std::string stream_text =
      stream > 0 ? fmt::format("{} epoch{}", stream, stream == 1 ? "" : "s") : "an open end";
  if (options.epochs < kEpochsUntilStreamEnds && done >= epoch_budget)
    return FailedPreconditionError(
        "consumer: a batch was asked for after the end of this consumer's stream: it has "
        "completed the {} epoch{} it asked for (option epochs; the leader's stream at {} has "
        "{}). A loop over more epochs would train on nothing: loop over at most {} epochs, "
        "or attach with more", epoch_budget, epoch_budget == 1 ? "" : "s", where,
        stream_text, epoch_budget);
  return FailedPreconditionError(
      "consumer: a batch was asked for after the end of this consumer's stream: it has "
      "completed {} epoch{} and the leader's stream at {} {}: there is no further epoch (a "
      "loop over more epochs than the stream has would train on nothing). Loop over at most "
      "{} epochs, or start the leader with more epochs",
      done, done == 1 ? "" : "s", where, stream > 0 ? "has " + stream_text : "has ended", done);
}

telemetry::Collector* ConsumerAccess::GetCollector(const Consumer& c) {
  std::lock_guard<std::mutex> lock(c.core_->mu);
  return c.core_->collector;
}

const shm::SegmentView* ConsumerAccess::Segment(const Consumer& c) {
  return c.core_->ring ? &c.core_->ring->view() : nullptr;
}

Status ConsumerAccess::CheckDeviceCarving(const Consumer& consumer) {
  const internal::ConsumerCore& c = *consumer.core_;
  if (!c.ring) return FailedPreconditionError("gpu: the consumer has no mapped ring; attach it first");
  const shm::StreamHeader* h = c.ring->header();
  // Per-producer-batch carving (carve_offset, carve_shuffle, progressive resizing) never joins.
  if ((c.ring->config().flags & (shm::kCarveOffset | shm::kCarveShuffle)) || h->resize_spec[0])
    return Status::Ok();
  const auto b = static_cast<uint32_t>(c.options.batch_size);
  const char* why = c.shard_world > 1 ? "mode=shard collects each epoch's tail batch"
                    : c.options.pad_last ? "pad_last pads the epoch's last batch"
                    : (b == 0 || h->producer_batch % b != 0)
                        ? "batch_size does not divide the producer batch, so batches span two"
                        : nullptr;
  if (why == nullptr) return Status::Ok();
  return FailedPreconditionError(
      "gpu: this consumer (batch_size {}, producer batch {}) would get batches joined in private "
      "host memory, which the device path cannot map: {}. Use a batch_size that divides the "
      "producer batch (or a producer_batch that is a multiple of it), no pad_last and "
      "mode=replicate, or carve_offset=true (per-producer-batch carving with fill repeats), "
      "or gpu=off (docs/gpu.md)", b, h->producer_batch, why);
}

void ConsumerAccess::OwnTelemetry(Consumer& c, std::shared_ptr<void> owned,
                                  std::function<Status()> finish) {
  std::lock_guard<std::mutex> lock(c.core_->mu);
  c.core_->owned_telemetry = std::move(owned);
  c.core_->finish_telemetry = std::move(finish);
}

void ConsumerAccess::SetCollector(Consumer& c, telemetry::Collector* collector) {
  std::lock_guard<std::mutex> lock(c.core_->mu);
  c.core_->collector = collector;
}

}  // namespace internal

namespace {

// Batches per epoch of a consumer of base batch `b` under the resize schedule in `h`.
// `scaled` false: a consumer of another view group than the leader's, whose batch size the
// schedule does not scale.
std::vector<int64_t> ResizeBatchesPerEpoch(const shm::StreamHeader* h, int64_t b, bool scaled) {
  auto spec = schedule::ParseResizeSpec(std::string(h->resize_spec, strnlen(h->resize_spec,
                                                                           sizeof(h->resize_spec))));
  schedule::ResizeScheduleParams params;
  if (spec.ok()) params.spec = *spec;
  params.num_samples = static_cast<int64_t>(h->epoch_samples);
  params.total_epochs = static_cast<int>(h->stream_epochs);
  params.base_batch_size = h->producer_batch;
  params.carve_unit = h->max_consumer_batch;  // as the leader cuts its producer batches
  auto s = spec.ok() ? schedule::ResizeSchedule::Create(params)
                     : Result<std::unique_ptr<schedule::ResizeSchedule>>(spec.status());
  auto summaries = s.ok() ? (*s)->Summaries() : Result<std::vector<schedule::EpochSummary>>(s.status());
  if (!summaries.ok()) {
    BC_LOG(Warn, Node, "consumer: cannot derive batches per epoch from the leader's resize spec "
           "'{}': {}", h->resize_spec, summaries.status().message());
    return {};
  }
  std::vector<int64_t> out;
  for (const auto& summary : *summaries)
    out.push_back((*s)->ConsumerBatches(summary, 0, b, scaled));
  return out;
}

}  // namespace

int64_t Consumer::BatchesPerEpoch() const {
  uint64_t epoch = 0;
  {
    std::lock_guard<std::mutex> lock(core_->mu);
    if (core_->epoch != ~0ULL) epoch = core_->epoch;
  }
  return BatchesPerEpoch(epoch);
}

int64_t Consumer::BatchesPerEpoch(uint64_t epoch) const {
  const shm::StreamHeader* h = core_->ring->header();
  if (h->resize_spec[0] != '\0') {
    auto& c = *core_;
    std::lock_guard<std::mutex> lock(c.resize_mu);
    if (!c.resize_derived) {
      c.resize_batches = ResizeBatchesPerEpoch(h, c.options.batch_size, c.ring->group() == 0);
      c.resize_derived = true;
    }
    return epoch < c.resize_batches.size() ? c.resize_batches[epoch] : 0;
  }
  if (h->stream_epochs > 0 && epoch >= h->stream_epochs) return 0;
  const int64_t n = static_cast<int64_t>(h->epoch_samples);
  const int64_t p = h->producer_batch;
  const int64_t b = core_->options.batch_size;
  if (p <= 0) return 0;
  if (const int64_t exact = core_->ExactBatchesPerEpoch(0); exact >= 0) return exact;
  const int64_t full = n / p, rem = n % p;
  return full * ((p + b - 1) / b) + (rem + b - 1) / b;
}

}  // namespace batchcast
