// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Layout of the node data plane's shared-memory segment (one per node leader).
//
//   SegmentHeader   identity, stream state, futex words, membership table
//   SlotHeader[N]   per slot: sequence number, pending-consumer mask, batch descriptor
//   (page aligned)  N slots of slot_bytes each: images | labels | sample ids
//
// The segment is a memfd: it has no name in /dev/shm, so nothing can be left behind
// when any process dies, and it reaches consumers only as a file descriptor passed over
// the leader's Unix socket after a credential check (docs/data-plane.md).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace batchcast::shm {

constexpr uint64_t kSegmentMagic = 0x5453414348544142ULL;  // "BATCHAST"
constexpr uint32_t kSegmentVersion = 3;  // 2: SlotDesc gained the resizing fields;
                                         // 3: the header names the resize schedule
constexpr uint32_t kMaxConsumers = 64;  // one bit each in a slot's pending mask
constexpr uint64_t kNoSeq = ~0ULL;

enum class StreamState : uint32_t { kRunning = 0, kEnded = 1, kFailed = 2 };
enum class MemberState : uint32_t { kFree = 0, kJoining = 1, kActive = 2, kLeaving = 3 };

enum SlotFlags : uint32_t {
  kLastInEpoch = 1u << 0,
};
enum ConsumerFlags : uint32_t {
  kCarveOffset = 1u << 0,
  kCarveShuffle = 1u << 1,
};

// What a consumer needs to view one producer batch in place. Written by the leader
// before it publishes the slot; read-only for consumers.
struct SlotDesc {
  uint64_t seq;                // position in the stream
  uint64_t epoch;
  uint64_t batch_in_epoch;     // producer batch index within the epoch
  uint64_t batches_in_epoch;   // producer batches in this epoch
  uint64_t samples_in_epoch;   // samples the epoch delivers (after skips so far: see skipped)
  uint32_t num_samples;        // n distinct samples at positions [0, n)
  uint32_t tail;               // copies of samples (j mod n) at positions [n, n + tail)
  uint32_t skipped;            // bad samples dropped from this batch (on_bad_sample=skip)
  uint32_t flags;              // SlotFlags
  uint32_t dtype;              // pipeline::DType
  uint32_t layout;             // pipeline::Layout
  int32_t channels, height, width;
  uint64_t sample_bytes;       // bytes of one image
  uint64_t images_offset;      // within the slot's data
  uint64_t labels_offset;      // int64 per position
  uint64_t ids_offset;         // int64 dataset index per position
  float lr_factor;             // progressive resizing: learning-rate factor for this batch
  int32_t image_size;
  int64_t publish_ns;          // CLOCK_MONOTONIC at publish (hand-off latency)
  // Progressive resizing (docs/progressive-resizing.md): every consumer carves
  // ScaledConsumerBatch(own b, ...) samples per batch from this producer batch, i.e.
  // max(b, floor(b x scale_num / scale_den)) capped at max(scale_cap, b) when scale_cap > 0.
  // scale_den == 0: no scaling (carve b). lr_rule says how a consumer derives its own LR
  // factor from its scaled batch (carving.h LrRuleCode); 0 = take lr_factor as is.
  uint32_t scale_num;          // W_full^2
  uint32_t scale_den;          // W^2 of this batch's image size
  uint32_t scale_cap;          // max_batch of the resize spec (0 = no cap)
  uint32_t lr_rule;
};

struct alignas(64) ConsumerEntry {
  std::atomic<uint32_t> state;      // MemberState
  int32_t pid;
  int32_t rank;                     // MPI rank or -1
  uint32_t batch_size;
  uint32_t buffer_depth;
  uint32_t flags;                   // ConsumerFlags
  uint64_t order_seed;
  uint64_t generation;              // bumped every time the entry is reused
  std::atomic<uint64_t> start_seq;  // first stream position it receives (set at admission)
  std::atomic<uint64_t> position;   // next position it will acquire
  std::atomic<int64_t> last_seen_ns;
  std::atomic<uint64_t> batches;    // consumer batches taken
  std::atomic<uint64_t> wait_ns;    // time blocked waiting for data
  char name[32];
};

struct SegmentHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t num_slots;
  uint64_t slot_bytes;
  uint64_t slots_offset;            // SlotHeader array
  uint64_t data_offset;             // page aligned
  uint64_t total_bytes;
  int32_t leader_pid;
  uint32_t leader_uid;
  int32_t leader_rank;
  uint32_t max_consumer_batch;
  uint32_t producer_batch;          // samples per full producer batch
  uint32_t reserved0;
  uint64_t epoch_samples;           // samples per epoch (before skips)
  // Progressive resizing: the canonical spec the leader executes and the run's epochs, so
  // consumers derive their exact batches per epoch (Consumer::BatchesPerEpoch). Empty: none.
  uint32_t stream_epochs;
  uint32_t reserved1;
  char resize_spec[1024];
  char job[64];
  char host[64];

  alignas(64) std::atomic<uint32_t> publish_futex;  // bumped at every publish and state change
  std::atomic<uint32_t> consumer_waiters;
  std::atomic<uint64_t> published;                   // positions [0, published) are out

  alignas(64) std::atomic<uint32_t> release_futex;  // bumped at every slot release / reap
  std::atomic<uint32_t> leader_waiting;

  alignas(64) std::atomic<uint32_t> member_futex;   // bumped at admission
  std::atomic<uint32_t> stream_state;                // StreamState
  char failure[512];

  ConsumerEntry consumers[kMaxConsumers];
};

struct alignas(64) SlotHeader {
  std::atomic<uint64_t> seq;      // position held, kNoSeq when never written
  std::atomic<uint64_t> pending;  // consumers that were given this slot and have not released it
  SlotDesc desc;
};

static_assert(std::atomic<uint64_t>::is_always_lock_free, "needs lock-free 64-bit atomics");
static_assert(std::atomic<uint32_t>::is_always_lock_free, "needs lock-free 32-bit atomics");

inline SlotHeader* Slots(SegmentHeader* h) {
  return reinterpret_cast<SlotHeader*>(reinterpret_cast<char*>(h) + h->slots_offset);
}
inline uint8_t* SlotData(SegmentHeader* h, uint32_t slot) {
  return reinterpret_cast<uint8_t*>(h) + h->data_offset + uint64_t(slot) * h->slot_bytes;
}

// Bytes needed for a segment of `num_slots` slots of `slot_bytes` each; fills offsets.
uint64_t SegmentBytes(uint32_t num_slots, uint64_t slot_bytes, uint64_t* slots_offset,
                      uint64_t* data_offset);

}  // namespace batchcast::shm
