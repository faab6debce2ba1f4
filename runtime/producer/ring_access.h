// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The only place producer and gpu code read the leader's segment header. The shared-memory
// protocol is being reworked (a slot pool larger than RingConfig::num_slots, a separate data
// segment): when RingLeader grows slot_data() / data_base() / data_bytes() / max_slots(),
// these functions switch to them and nothing else changes.
#pragma once

#include <cstdint>

#include "transport/shm/futex.h"
#include "transport/shm/ring_leader.h"
#include "transport/shm/segment.h"

namespace batchcast::producer {

// Slots whose memory a device mirror must cover.
inline uint32_t RingMaxSlots(shm::RingLeader& ring) { return ring.header()->num_slots; }
// Bytes of one slot.
inline uint64_t RingSlotBytes(shm::RingLeader& ring) { return ring.header()->slot_bytes; }
// Host memory of slot 0; slot i starts at i x RingSlotBytes().
inline uint8_t* RingDataBase(shm::RingLeader& ring) { return shm::SlotData(ring.header(), 0); }

// The word that changes whenever membership changes (futex wait on it).
inline std::atomic<uint32_t>* RingMemberWord(shm::RingLeader& ring) {
  return &ring.header()->member_futex;
}

}  // namespace batchcast::producer
