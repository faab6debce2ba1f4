// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "transport/shm/segment.h"

#include <sys/mman.h>

#include <algorithm>

#include "core/errors.h"

namespace batchcast::shm {
namespace {

constexpr uint64_t kPage = 4096;
uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

}  // namespace

const char* MemberStateName(MemberState s) {
  switch (s) {
    case MemberState::kFree: return "free";
    case MemberState::kJoining: return "joining";
    case MemberState::kActive: return "active";
    case MemberState::kLeaving: return "leaving";
    case MemberState::kDraining: return "draining";
    case MemberState::kEvicted: return "evicted";
  }
  return "unknown";
}

const char* MemberDisplayState(MemberState s, uint64_t start_seq, uint64_t published) {
  if (s == MemberState::kActive && (start_seq == kNoSeq || start_seq >= published))
    return "waiting";
  return MemberStateName(s);
}

Status CheckStreamLayout(const StreamHeader* h, uint64_t stream_bytes) {
  if (stream_bytes < sizeof(uint64_t) + sizeof(uint32_t) || h->magic != kSegmentMagic)
    return CorruptDataError("the stream segment ({} bytes) is not a Batchcast stream: the "
                            "address belongs to another program", stream_bytes);
  if (h->version != kSegmentVersion)
    return FailedPreconditionError(
        "the leader writes shared-memory layout version {} and this consumer reads version {} "
        "({}): run the leader and its consumers from the same Batchcast release",
        h->version, kSegmentVersion,
        h->version < kSegmentVersion ? "the leader is older" : "the leader is newer");
  if (stream_bytes < sizeof(StreamHeader))
    return CorruptDataError("the stream segment has {} bytes, less than its {} byte header",
                            stream_bytes, sizeof(StreamHeader));
  return Status::Ok();
}

bool PopulatePages(void* p, size_t bytes, bool write) {
  constexpr size_t kPiece = 256 << 10;
  auto* first = static_cast<uint8_t*>(p);
  for (size_t done = 0; done < bytes; done += kPiece)
    if (madvise(first + done, std::min(kPiece, bytes - done),
                write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ) != 0)
      return false;
  return true;
}

SegmentGeometry ComputeGeometry(uint32_t max_slots, uint64_t slot_bytes) {
  SegmentGeometry g;
  g.max_slots = max_slots;
  g.slot_bytes = slot_bytes;
  g.slots_offset = AlignUp(sizeof(StreamHeader), 64);
  g.positions_offset = AlignUp(g.slots_offset + uint64_t(max_slots) * sizeof(SlotInfo), 64);
  g.data_offset =
      AlignUp(g.positions_offset + uint64_t(kPositionTable) * sizeof(std::atomic<uint64_t>), kPage);
  g.stream_bytes = g.data_offset + uint64_t(max_slots) * slot_bytes;
  g.pending_offset = AlignUp(sizeof(ControlHeader), 64);
  g.control_bytes = AlignUp(g.pending_offset + uint64_t(max_slots) * sizeof(SlotPending), kPage);
  return g;
}

}  // namespace batchcast::shm
