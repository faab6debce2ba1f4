// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// How a ring slot is laid out, computed in one place for every producer (docs/data-plane.md):
//
//   [ images: capacity x sample bytes | labels: capacity x int64 | ids: capacity x int64 |
//     0                               ^ 64-aligned                 ^ 64-aligned
//     named tensor 0: capacity x its sample bytes | ... ]               (4 KiB slot)
//     ^ 64-aligned each
//   (a variable-length named tensor: capacity + 1 int64 row offsets | its values budget)
//
// capacity = P + 2 b - 1: room for P distinct samples plus the fill-repeat tail any consumer
// batch <= b can need (shm::TailNeeded). With progressive resizing (buckets), the largest
// over the buckets: a bucket's producer batch holds floor(P x B_S) smaller samples and its
// consumers carve scaled batches.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "batchcast/options.h"
#include "batchcast/status.h"
#include "pipeline/pipeline.h"
#include "transport/shm/ring_leader.h"

namespace batchcast::schedule {
class ResizeSchedule;
}

namespace batchcast::producer {

// The producer batch and the largest consumer batch a producer runs with.
struct BatchSizes {
  int64_t producer_batch = 0;
  uint32_t max_consumer_batch = 0;
};

// max_consumer_batch (0: options.batch_size) and options.producer_batch (0: twice that).
// Fails, naming `who`, when the producer batch is smaller than the consumer batch.
Result<BatchSizes> ResolveBatchSizes(const Options& options, uint32_t max_consumer_batch,
                                     std::string_view who);

// The one slot-count rule: the ring's prefetch window in positions, options.ring_slots or
// buffer_depth + 2 (a consumer's buffer_depth batches held, one being carved, one being
// filled). Every producer uses it; one that publishes each position as one slot per local
// trainer (shard) multiplies it by their number (Distribution::PartsPerPosition).
uint32_t RingSlots(const Options& options);

// One bucket of a progressive-resizing schedule: its producer batch, its largest (scaled)
// consumer batch and its sample layout.
struct SlotBucket {
  uint64_t producer_batch = 0;
  uint64_t max_consumer_batch = 0;
  pipeline::SampleLayout sample;
};

// A further named tensor of every sample (shm::TensorDesc): name, batchcast::DType code and
// per-sample shape (at most shm::kTensorMaxDims dimensions, C-contiguous). A variable-length
// tensor (docs/data-plane.md "Variable-length tensors") has shape[0] == shm::kVariableExtent
// and values_bytes, the room for the values of one producer batch (its per-batch budget).
struct TensorSpec {
  std::string name;
  uint32_t dtype = 0;
  std::vector<int64_t> shape;
  uint64_t values_bytes = 0;  // variable-length only
  // Bytes of one sample; of a variable-length tensor, of one row (one step of its first dim).
  uint64_t sample_bytes() const;
  bool variable_length() const { return !shape.empty() && shape[0] == shm::kVariableExtent; }
};
// Its place in the slot: sample_bytes per position from `offset`; a variable-length tensor's
// capacity + 1 row offsets at `offset` and its values at values_offset.
struct TensorSlot {
  TensorSpec spec;
  uint64_t offset = 0;
  uint64_t values_offset = 0;
};

struct SlotLayout {
  uint64_t capacity_samples = 0;  // label / id entries a slot holds
  uint64_t images_bytes = 0;      // room for images at the front of a slot
  uint64_t images_fill_bytes = 0; // of which the distinct samples' (without the tail)
  uint64_t labels_offset = 0;
  uint64_t ids_offset = 0;
  std::vector<TensorSlot> tensors;  // further named tensors, after the ids
  // Image room for view groups beyond the leader's own (AddViewRoom; ViewGroups hands out
  // regions of it), after everything else.
  uint64_t views_offset = 0, views_bytes = 0;
  uint64_t slot_bytes = 0;        // a multiple of 4 KiB

  int64_t* labels(uint8_t* slot) const { return reinterpret_cast<int64_t*>(slot + labels_offset); }
  int64_t* ids(uint8_t* slot) const { return reinterpret_cast<int64_t*>(slot + ids_offset); }
  // Tensor `name`'s memory in `slot` (nullptr: the layout has no such tensor).
  uint8_t* tensor(uint8_t* slot, std::string_view name) const;
};

// The one sizing function: a slot for `producer_batch` samples of `sample` and consumer
// batches up to `max_consumer_batch`, and for every bucket in `buckets`.
SlotLayout ComputeSlotLayout(int64_t producer_batch, uint32_t max_consumer_batch,
                             const pipeline::SampleLayout& sample,
                             std::span<const SlotBucket> buckets = {});

// Images that only a model stage reads (keep_input=false: consumers never see them) need no
// room for the fill-repeat tail: shrinks images to images_fill_bytes and moves the labels and
// ids after them. Call before AddTensors.
void DropImagesTail(SlotLayout* layout);

// Adds named tensors after the ids (capacity_samples rows each; a variable-length one: its
// offsets and values_bytes) and grows slot_bytes.
// Refuses, naming `who` and the tensor, an empty, too long, repeated or reserved name
// ("images", "labels", "sample_ids"), an unknown dtype, more than shm::kTensorMaxDims
// per-sample dimensions, a non-positive extent (but a variable first one), a variable-length
// tensor without values_bytes, or more than shm::kMaxTensors tensors.
Status AddTensors(std::span<const TensorSpec> tensors, std::string_view who, SlotLayout* layout);

// Reserves `bytes` of image room for view groups after everything else, 64-aligned, and
// grows slot_bytes. Call last (after AddTensors).
void AddViewRoom(uint64_t bytes, SlotLayout* layout);

// The buckets of a resize schedule run at producer batch P, consumers up to b (scaled
// batches capped at scale_cap); layout_of gives the sample layout at an image size.
std::vector<SlotBucket> ResizeBuckets(
    const schedule::ResizeSchedule& schedule, int64_t producer_batch, uint32_t max_consumer_batch,
    uint32_t scale_cap, const std::function<pipeline::SampleLayout(int)>& layout_of);

// The ring a producer with this slot layout creates; the caller adds its identity
// (socket_name, job, rank), heartbeat and resize spec. stream_epochs 0: unbounded/unknown.
shm::RingConfig RingConfigFor(const SlotLayout& layout, uint32_t num_slots,
                              uint32_t max_consumer_batch, uint64_t slot_producer_batch,
                              uint64_t epoch_samples, int64_t stream_epochs);

}  // namespace batchcast::producer
