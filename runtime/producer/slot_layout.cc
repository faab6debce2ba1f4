// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "producer/slot_layout.h"

#include <algorithm>
#include <climits>

#include "core/dtype.h"
#include "core/errors.h"
#include "schedule/resize_schedule.h"
#include "transport/shm/carving.h"

namespace batchcast::producer {
namespace {

uint64_t Align(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// n distinct samples plus the largest fill tail of a consumer batch <= b (2b - 2).
uint64_t WithTail(uint64_t n, uint64_t b) { return n + 2 * b - 1; }

}  // namespace

Result<BatchSizes> ResolveBatchSizes(const Options& options, uint32_t max_consumer_batch,
                                     std::string_view who) {
  BatchSizes s;
  s.max_consumer_batch = max_consumer_batch ? max_consumer_batch
                                            : static_cast<uint32_t>(std::max(options.batch_size, 0));
  s.producer_batch = options.producer_batch > 0 ? options.producer_batch
                                                : 2 * int64_t(s.max_consumer_batch);
  if (s.max_consumer_batch == 0)
    return InvalidArgumentError("{}: the largest consumer batch is 0; set batch_size", who);
  if (s.producer_batch < int64_t(s.max_consumer_batch))
    return InvalidArgumentError(
        "{}: producer_batch {} is smaller than the largest consumer batch {}; raise "
        "producer_batch", who, s.producer_batch, s.max_consumer_batch);
  return s;
}

uint32_t RingSlots(const Options& options) {
  return static_cast<uint32_t>(options.ring_slots > 0 ? options.ring_slots
                                                      : options.buffer_depth + 2);
}

namespace {

// Labels, ids and the slot size after images of l.images_bytes.
void PlaceAfterImages(SlotLayout* l) {
  l->labels_offset = Align(l->images_bytes, 64);
  l->ids_offset = Align(l->labels_offset + l->capacity_samples * sizeof(int64_t), 64);
  l->slot_bytes = Align(l->ids_offset + l->capacity_samples * sizeof(int64_t), 4096);
}

}  // namespace

SlotLayout ComputeSlotLayout(int64_t producer_batch, uint32_t max_consumer_batch,
                             const pipeline::SampleLayout& sample,
                             std::span<const SlotBucket> buckets) {
  SlotLayout l;
  l.capacity_samples = WithTail(uint64_t(producer_batch), max_consumer_batch);
  l.images_bytes = l.capacity_samples * sample.bytes();
  l.images_fill_bytes = uint64_t(producer_batch) * sample.bytes();
  for (const SlotBucket& b : buckets) {
    const uint64_t count = WithTail(b.producer_batch, b.max_consumer_batch);
    l.capacity_samples = std::max(l.capacity_samples, count);
    l.images_bytes = std::max<uint64_t>(l.images_bytes, count * b.sample.bytes());
    l.images_fill_bytes = std::max<uint64_t>(l.images_fill_bytes,
                                              b.producer_batch * b.sample.bytes());
  }
  PlaceAfterImages(&l);
  return l;
}

void DropImagesTail(SlotLayout* layout) {
  layout->images_bytes = layout->images_fill_bytes;
  PlaceAfterImages(layout);
}

uint64_t TensorSpec::sample_bytes() const {
  const core::DTypeInfo* t = core::DTypeInfoOf(dtype);
  uint64_t bytes = t ? t->bytes : 0;
  for (size_t k = variable_length() ? 1 : 0; k < shape.size(); ++k)
    bytes *= uint64_t(std::max<int64_t>(shape[k], 0));
  return bytes;
}

uint8_t* SlotLayout::tensor(uint8_t* slot, std::string_view name) const {
  for (const TensorSlot& t : tensors)
    if (t.spec.name == name) return slot + t.offset;
  return nullptr;
}

namespace {

Status CheckTensor(const TensorSpec& t, const SlotLayout& layout, std::string_view who) {
  if (t.name.empty() || t.name.size() >= shm::kTensorNameBytes)
    return InvalidArgumentError("{}: tensor name '{}' must have 1 to {} characters", who, t.name,
                                shm::kTensorNameBytes - 1);
  if (t.name == "images" || t.name == "labels" || t.name == "sample_ids")
    return InvalidArgumentError("{}: tensor name '{}' is reserved for the batch's own {}; "
                                "name the further tensor otherwise", who, t.name, t.name);
  for (const TensorSlot& o : layout.tensors)
    if (o.spec.name == t.name)
      return InvalidArgumentError("{}: tensor '{}' is given twice", who, t.name);
  if (core::DTypeInfoOf(t.dtype) == nullptr)
    return InvalidArgumentError("{}: tensor '{}' has an unknown dtype code {}; use one of {}",
                                who, t.name, t.dtype, core::DTypeNames());
  if (t.shape.size() > shm::kTensorMaxDims)
    return InvalidArgumentError("{}: tensor '{}' has {} dimensions per sample; at most {} are "
                                "supported (reshape it)", who, t.name, t.shape.size(),
                                shm::kTensorMaxDims);
  for (size_t k = t.variable_length() ? 1 : 0; k < t.shape.size(); ++k)
    if (t.shape[k] <= 0)
      return InvalidArgumentError(
          "{}: tensor '{}' has a per-sample extent {} in dimension {}; every extent must be "
          "positive{}", who, t.name, t.shape[k], k,
          t.shape[k] == shm::kVariableExtent
              ? " (only the first per-sample dimension may vary: values + offsets)" : "");
  if (t.variable_length() && t.values_bytes == 0)
    return InvalidArgumentError("{}: variable-length tensor '{}' has no room for its values; "
                                "give it a per-batch byte budget", who, t.name);
  if (!t.variable_length() && t.values_bytes != 0)
    return InvalidArgumentError("{}: tensor '{}' has a fixed per-sample shape but a values "
                                "budget of {} bytes; only a variable-length tensor has one",
                                who, t.name, t.values_bytes);
  if (layout.tensors.size() >= shm::kMaxTensors)
    return InvalidArgumentError("{}: tensor '{}' is one too many: a slot holds at most {} named "
                                "tensors besides images, labels and sample_ids", who, t.name,
                                shm::kMaxTensors);
  return Status::Ok();
}

}  // namespace

Status AddTensors(std::span<const TensorSpec> tensors, std::string_view who, SlotLayout* layout) {
  SlotLayout& l = *layout;
  // A tensor's end: its rows, or a variable-length one's offsets and values.
  auto end_of = [&](const TensorSlot& t) {
    return t.spec.variable_length() ? t.values_offset + t.spec.values_bytes
                                    : t.offset + l.capacity_samples * t.spec.sample_bytes();
  };
  uint64_t end = l.ids_offset + l.capacity_samples * sizeof(int64_t);
  for (const TensorSlot& t : l.tensors) end = std::max(end, end_of(t));
  for (const TensorSpec& t : tensors) {
    BC_RETURN_IF_ERROR(CheckTensor(t, l, who));
    TensorSlot slot{t, Align(end, 64), 0};
    if (t.variable_length())
      slot.values_offset = Align(slot.offset + (l.capacity_samples + 1) * sizeof(int64_t), 64);
    end = end_of(slot);
    l.tensors.push_back(std::move(slot));
  }
  l.slot_bytes = std::max(l.slot_bytes, Align(end, 4096));
  return Status::Ok();
}

void AddViewRoom(uint64_t bytes, SlotLayout* layout) {
  SlotLayout& l = *layout;
  // After the images, the labels, the ids and the named tensors: the end of the slot's data.
  l.views_offset = Align(l.slot_bytes, 64);
  l.views_bytes = bytes;
  l.slot_bytes = std::max(l.slot_bytes, Align(l.views_offset + bytes, 4096));
}

std::vector<SlotBucket> ResizeBuckets(
    const schedule::ResizeSchedule& schedule, int64_t producer_batch, uint32_t max_consumer_batch,
    uint32_t scale_cap, const std::function<pipeline::SampleLayout(int)>& layout_of) {
  std::vector<SlotBucket> out;
  const uint64_t full = static_cast<uint64_t>(schedule.full_size());
  for (int size : schedule.bucket_sizes()) {
    const auto num = static_cast<uint32_t>(full * full);
    const auto den = static_cast<uint32_t>(uint64_t(size) * uint64_t(size));
    SlotBucket b;
    b.producer_batch = uint64_t(producer_batch) * num / den;  // the schedule's batch at this size
    b.max_consumer_batch = shm::ScaledConsumerBatch(max_consumer_batch, num, den, scale_cap);
    b.sample = layout_of(size);
    out.push_back(b);
  }
  return out;
}

shm::RingConfig RingConfigFor(const SlotLayout& layout, uint32_t num_slots,
                              uint32_t max_consumer_batch, uint64_t slot_producer_batch,
                              uint64_t epoch_samples, int64_t stream_epochs) {
  shm::RingConfig rc;
  rc.num_slots = num_slots;
  rc.slot_bytes = layout.slot_bytes;
  rc.max_consumer_batch = max_consumer_batch;
  rc.producer_batch = static_cast<uint32_t>(std::min<uint64_t>(slot_producer_batch, UINT32_MAX));
  rc.epoch_samples = epoch_samples;
  rc.stream_epochs = static_cast<uint32_t>(std::clamp<int64_t>(stream_epochs, 0, UINT32_MAX));
  return rc;
}

}  // namespace batchcast::producer
