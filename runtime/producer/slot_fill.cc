// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "producer/slot_fill.h"

#include <algorithm>
#include <cstring>

#include "core/errors.h"

namespace batchcast::producer {
namespace {

void DescribeTensors(std::span<const TensorSlot> tensors, shm::SlotDesc* d) {
  d->num_tensors = static_cast<uint32_t>(tensors.size());  // AddTensors caps it at kMaxTensors
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorSpec& spec = tensors[i].spec;
    shm::TensorDesc& t = d->tensors[i];
    t = shm::TensorDesc{};
    std::memcpy(t.name, spec.name.data(), std::min<size_t>(spec.name.size(),
                                                           shm::kTensorNameBytes - 1));
    t.dtype = spec.dtype;
    t.ndim = static_cast<uint32_t>(spec.shape.size());
    for (size_t k = 0; k < spec.shape.size(); ++k) t.shape[k] = spec.shape[k];
    t.sample_bytes = spec.sample_bytes();
    t.offset = tensors[i].offset;
    t.values_offset = tensors[i].values_offset;
    t.values_bytes = spec.values_bytes;
  }
}

void DescribeGroups(std::span<const GroupRegion> groups, shm::SlotDesc* d) {
  d->group_mask = 0;
  for (const GroupRegion& r : groups) {
    shm::GroupDesc& g = d->groups[r.group];  // ViewGroups keeps r.group < kMaxViewGroups
    g.view_key = r.view_key;
    g.images_offset = r.offset;
    g.sample_bytes = r.sample.bytes();
    g.dtype = static_cast<uint32_t>(r.sample.dtype);
    g.layout = static_cast<uint32_t>(r.sample.layout);
    g.channels = r.sample.channels;
    g.height = r.sample.height;
    g.width = r.sample.width;
    g.image_size = r.sample.height;
    d->group_mask |= 1u << r.group;
  }
}

// The view groups' regions hold n + tail images each within the slot.
Status CheckGroups(const shm::SlotWrite& w, uint64_t positions,
                   std::span<const GroupRegion> groups) {
  for (const GroupRegion& r : groups) {
    if (r.group >= shm::kMaxViewGroups || r.offset > w.capacity ||
        positions * r.sample.bytes() > w.capacity - r.offset)
      return InternalError("slot: view group {} of {} positions at {} bytes each from offset {} "
                           "does not fit a slot of {} bytes", r.group, positions,
                           r.sample.bytes(), r.offset, w.capacity);
  }
  return Status::Ok();
}

}  // namespace

uint32_t TailForReceivers(const shm::RingLeader& ring, uint64_t seq, uint64_t only,
                          const SlotContents& c) {
  uint32_t tail = 0;
  for (const auto& r : ring.Receivers(seq)) {
    if ((shm::RingLeader::MemberBit(r.id) & only) == 0) continue;
    // A view group's consumer keeps its batch size under a schedule (RingConsumer::GroupDescOf).
    uint32_t b = r.group != 0 ? r.batch_size
                              : shm::ScaledConsumerBatch(r.batch_size, c.scale_num, c.scale_den,
                                                         c.scale_cap);
    tail = std::max(tail, shm::TailNeeded(c.num_samples, b, r.flags, c.scale_den));
  }
  return tail;
}

Status CompleteSlot(const shm::SlotWrite& w, uint32_t tail, const SlotContents& c) {
  const uint32_t n = c.num_samples;
  const uint64_t sb = c.layout.bytes();
  const uint64_t images_bytes = c.images_bytes ? c.images_bytes : c.capacity_samples * sb;
  if (n + uint64_t(tail) > c.capacity_samples || (n + uint64_t(tail)) * sb > images_bytes)
    return InternalError("slot: {} samples and a tail of {} at {} bytes each do not fit a slot "
                         "of {} samples / {} image bytes", n, tail, sb, c.capacity_samples,
                         images_bytes);
  BC_RETURN_IF_ERROR(CheckGroups(w, n + uint64_t(tail), c.groups));
  auto* labels = reinterpret_cast<int64_t*>(w.data + c.labels_offset);
  auto* ids = reinterpret_cast<int64_t*>(w.data + c.ids_offset);
  for (uint32_t j = 0; j < tail && n > 0; ++j) {  // fill repeats, written once for everyone
    const uint32_t src = j % n;
    std::memcpy(w.data + uint64_t(n + j) * sb, w.data + uint64_t(src) * sb, sb);
    labels[n + j] = labels[src];
    ids[n + j] = ids[src];
    for (const TensorSlot& t : c.tensors) {
      if (t.spec.variable_length()) continue;  // consumers read position n + j at j mod n
      const uint64_t tb = t.spec.sample_bytes();
      uint8_t* base = w.data + t.offset;
      std::memcpy(base + uint64_t(n + j) * tb, base + uint64_t(src) * tb, tb);
    }
    for (const GroupRegion& r : c.groups) {
      if (r.group == 0) continue;  // the leader's view: copied above
      const uint64_t gb = r.sample.bytes();
      uint8_t* base = w.data + r.offset;
      std::memcpy(base + uint64_t(n + j) * gb, base + uint64_t(src) * gb, gb);
    }
  }
  shm::SlotDesc* d = w.desc;
  d->epoch = c.epoch;
  d->batch_in_epoch = static_cast<uint64_t>(c.batch);
  d->batches_in_epoch = static_cast<uint64_t>(c.batches_in_epoch);
  d->samples_in_epoch = c.samples_in_epoch;
  d->num_samples = n;
  d->tail = tail;
  d->skipped = c.skipped;
  d->repeats = std::min(c.repeats, n);
  const bool last = c.last_in_epoch.value_or(c.batch == c.batches_in_epoch - 1);
  d->flags = last ? uint32_t(shm::kLastInEpoch) : 0u;
  d->dtype = static_cast<uint32_t>(c.layout.dtype);
  d->layout = static_cast<uint32_t>(c.layout.layout);
  d->channels = c.layout.channels;
  d->height = c.layout.height;
  d->width = c.layout.width;
  d->sample_bytes = sb;
  d->images_offset = 0;
  d->labels_offset = c.labels_offset;
  d->ids_offset = c.ids_offset;
  d->lr_factor = c.lr_factor;
  d->image_size = c.image_size ? c.image_size : c.layout.height;
  d->scale_num = c.scale_num;
  d->scale_den = c.scale_den;
  d->scale_cap = c.scale_cap;
  d->lr_rule = c.lr_rule;
  DescribeTensors(c.tensors, d);
  DescribeGroups(c.groups, d);
  return Status::Ok();
}

}  // namespace batchcast::producer
