// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "capi/handles.h"

#include "core/errors.h"

namespace batchcast::capi {
namespace {

constexpr uint32_t kIndexBits = 24;
constexpr uint64_t kIndexMask = (uint64_t(1) << kIndexBits) - 1;
constexpr uint32_t kMaxEntries = static_cast<uint32_t>(kIndexMask);  // index + 1 fits

bool KnownKind(uint8_t tag) {
  return tag == uint8_t(HandleKind::kConsumer) || tag == uint8_t(HandleKind::kBatch) ||
         tag == uint8_t(HandleKind::kLeader);
}

}  // namespace

const char* HandleTypeName(HandleKind kind) {
  switch (kind) {
    case HandleKind::kConsumer: return "bc_consumer_t";
    case HandleKind::kBatch: return "bc_batch_t";
    case HandleKind::kLeader: return "bc_leader_t";
  }
  return "handle";
}

const char* HandleEndName(HandleKind kind) {
  switch (kind) {
    case HandleKind::kConsumer: return "detached (bc_consumer_detach); attach a new consumer";
    case HandleKind::kBatch:
      return "released (bc_batch_release); a batch is released once, and its info and tensors "
             "are read before that (or kept through bc_batch_to_dlpack)";
    case HandleKind::kLeader: return "destroyed (bc_leader_destroy); start a new leader";
  }
  return "ended";
}

Result<uint32_t> HandleTableBase::IndexOf(uint64_t h, const char* function) const {
  const uint8_t tag = static_cast<uint8_t>(h >> 56);
  const char* type = HandleTypeName(kind_);
  if (tag != uint8_t(kind_)) {
    if (KnownKind(tag))
      return InvalidArgumentError("{}: handle 0x{:x} is a {}, not a {}", function, h,
                                  HandleTypeName(HandleKind(tag)), type);
    return InvalidArgumentError(
        "{}: 0x{:x} is not a {} this library handed out (an uninitialised variable, or memory "
        "overwritten?)", function, h, type);
  }
  const uint64_t slot = h & kIndexMask;
  const uint32_t generation = static_cast<uint32_t>(h >> kIndexBits);
  if (slot == 0 || slot > generation_.size() || generation % 2 == 0 ||
      generation > generation_[slot - 1])
    return InvalidArgumentError(
        "{}: 0x{:x} is not a {} this library handed out (an uninitialised variable, or memory "
        "overwritten?)", function, h, type);
  if (generation != generation_[slot - 1])
    return InvalidArgumentError("{}: {} 0x{:x} was {}; it may not be used again", function, type,
                                h, HandleEndName(kind_));
  return static_cast<uint32_t>(slot - 1);
}

Result<uint32_t> HandleTableBase::Allocate(const char* function) {
  uint32_t index;
  if (!free_.empty()) {
    index = free_.front();
    free_.pop_front();
  } else {
    if (generation_.size() >= kMaxEntries)
      return ResourceExhaustedError("{}: {} {}s are live at once, the most this library keeps; "
                                    "release some", function, generation_.size(),
                                    HandleTypeName(kind_));
    index = static_cast<uint32_t>(generation_.size());
    generation_.push_back(0);
  }
  generation_[index] += 1;  // odd: in use
  return index;
}

uint64_t HandleTableBase::WordOf(uint32_t index) const {
  return (uint64_t(uint8_t(kind_)) << 56) | (uint64_t(generation_[index]) << kIndexBits) |
         (uint64_t(index) + 1);
}

void HandleTableBase::Free(uint32_t index) {
  generation_[index] += 1;  // even: free; every handle of the old generation is stale
  // A generation that would wrap is retired for good: a handle word is never issued twice.
  if (generation_[index] < 0xFFFFFFFEu) free_.push_back(index);
}

HandleTable<bc_consumer_s>& Consumers() {
  static auto* table = new HandleTable<bc_consumer_s>(HandleKind::kConsumer);
  return *table;
}

HandleTable<bc_batch_s>& Batches() {
  static auto* table = new HandleTable<bc_batch_s>(HandleKind::kBatch);
  return *table;
}

HandleTable<bc_leader_s>& Leaders() {
  static auto* table = new HandleTable<bc_leader_s>(HandleKind::kLeader);
  return *table;
}

}  // namespace batchcast::capi
