// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The only place producer and gpu code reach into the leader's segments: the slot pool
// (larger than RingConfig::num_slots: it also holds what consumers keep) and the membership
// futex word.
#pragma once

#include <cstdint>

#include "transport/shm/futex.h"
#include "transport/shm/ring_leader.h"
#include "transport/shm/segment.h"

namespace batchcast::producer {

// Slots whose memory a device mirror must cover.
inline uint32_t RingMaxSlots(shm::RingLeader& ring) { return ring.max_slots(); }
// Bytes of one slot.
inline uint64_t RingSlotBytes(shm::RingLeader& ring) { return ring.config().slot_bytes; }
// Host memory of slot 0; slot i starts at i x RingSlotBytes().
inline uint8_t* RingDataBase(shm::RingLeader& ring) { return ring.data_base(); }

// The word that changes whenever membership changes (futex wait on it).
inline std::atomic<uint32_t>* RingMemberWord(shm::RingLeader& ring) {
  return &ring.header()->member_futex;
}

}  // namespace batchcast::producer
