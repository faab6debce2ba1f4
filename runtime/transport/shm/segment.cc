// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "transport/shm/segment.h"

namespace batchcast::shm {

uint64_t SegmentBytes(uint32_t num_slots, uint64_t slot_bytes, uint64_t* slots_offset,
                      uint64_t* data_offset) {
  constexpr uint64_t kPage = 4096;
  uint64_t so = (sizeof(SegmentHeader) + 63) & ~uint64_t(63);
  uint64_t end = so + uint64_t(num_slots) * sizeof(SlotHeader);
  uint64_t dof = (end + kPage - 1) & ~(kPage - 1);
  if (slots_offset) *slots_offset = so;
  if (data_offset) *data_offset = dof;
  return dof + uint64_t(num_slots) * slot_bytes;
}

}  // namespace batchcast::shm
