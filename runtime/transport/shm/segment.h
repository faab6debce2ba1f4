// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Layout of the node data plane's two shared-memory segments (one pair per node leader).
//
//   stream segment   written only by the leader; consumers map it PROT_READ (the memfd is
//                    sealed F_SEAL_FUTURE_WRITE after the leader maps it, so no consumer can
//                    map it writable): identity, geometry, stream state, the position table,
//                    one SlotInfo per slot of the pool, then the slot data (page aligned).
//   control segment  what consumers write: their membership entry (heartbeat, position,
//                    counters), the per-slot pending masks they clear on release, and the
//                    futex words they bump. The leader trusts nothing it reads here beyond
//                    one consumer's own bits and counters (it keeps private copies of all
//                    geometry).
//
// Both are memfds: they have no name in /dev/shm, so nothing can be left behind when any
// process dies, and they reach consumers only as file descriptors passed over the leader's
// Unix socket after a credential check in both directions (docs/data-plane.md).
//
// Stream position p lives in any free slot of the pool; the position table maps p to its
// slot. A consumer may keep up to buffer_depth batches alive for any time: the leader fills
// other free slots meanwhile (the pool holds ring_slots + the depth of every member).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "batchcast/status.h"

namespace batchcast::shm {

constexpr uint64_t kSegmentMagic = 0x5453414348544142ULL;  // "BATCHAST"
constexpr uint64_t kControlSegmentMagic = 0x4c52544354414242ULL;
// 2: SlotDesc gained the resizing fields; 3: the header names the resize schedule;
// 4: stream/control split, slot pool with a position table, leader heartbeat;
// 5: SlotDesc holds a table of further named tensors (TensorDesc); 6: and a table of view
// groups' image regions (GroupDesc), and a TensorDesc describes variable-length tensors
// (values + offsets).
constexpr uint32_t kSegmentVersion = 6;
constexpr uint32_t kMaxConsumers = 64;  // one bit each in a slot's pending mask
constexpr uint32_t kPositionTable = 4096;  // positions a reader may trail `published` by
constexpr uint64_t kNoSeq = ~0ULL;

enum class StreamState : uint32_t { kRunning = 0, kEnded = 1, kFailed = 2 };
// The member lifecycle (docs/data-plane.md): joining -> active -> draining or evicted ->
// free. Draining (the consumer is done: Detach, destructor, its epochs complete) and
// evicted (no heartbeat within heartbeat_ms: stopped, suspended, hung) members are no
// longer addressed and do not hold the stream back, but the slots they still hold are
// not reused until they release them or their process is gone (its socket closes).
enum class MemberState : uint32_t {
  kFree = 0,
  kJoining = 1,
  kActive = 2,
  kLeaving = 3,   // transient, while the leader frees the entry
  kDraining = 4,
  kEvicted = 5,
};

// "free", "joining", "active", "leaving", "draining" (done; still holds batches), "evicted"
// (no heartbeat; holds its batches), "unknown": status reports (CLI, Python).
const char* MemberStateName(MemberState s);
// What a status report shows for a member: its state's name, but "waiting" for an active
// member whose first position is not out yet (positions [0, published) are): a joiner admitted
// at the next epoch's start, which receives nothing until then.
const char* MemberDisplayState(MemberState s, uint64_t start_seq, uint64_t published);

enum SlotFlags : uint32_t {
  kLastInEpoch = 1u << 0,
};
enum ConsumerFlags : uint32_t {
  kCarveOffset = 1u << 0,
  kCarveShuffle = 1u << 1,
  // The consumer holds one batch beyond its buffer_depth while it asks for the next (the
  // Python consumer's release="on_free": a `for` loop's variables keep the previous batch
  // until the next one is fetched). The pool reserves that slot too; buffer_depth stays the
  // number the user gave (checked against 1..ring_slots - 1, shown by `batchcast status`).
  kLoopHoldsBatch = 1u << 2,
};
// The slots the pool reserves for a member: the batches it may hold (buffer_depth, plus the
// loop's batch with kLoopHoldsBatch) and the producer batch it is carving.
inline uint32_t MemberPoolSlots(uint32_t buffer_depth, uint32_t flags) {
  return buffer_depth + 1 + ((flags & kLoopHoldsBatch) != 0 ? 1 : 0);
}

// Further named tensors of a slot, beside images, labels and ids (docs/data-plane.md
// "Named tensors"): tensor t holds sample_bytes per position at `offset` within the slot's
// data, C-contiguous with the per-sample shape shape[0..ndim); the fill-repeat tail and every
// carve apply to it as to the labels. dtype is the public batchcast::DType code.
//
// A variable-length tensor ("Variable-length tensors"; shape[0] == kVariableExtent: its first
// per-sample dimension varies) holds, at `offset`, int64 row offsets for positions [0, n]
// (offsets[0] == 0; sample i is rows [offsets[i], offsets[i+1]) of its values) and, at
// values_offset, the rows of the n samples one after another (values_bytes of room, the
// producer's per-batch budget); sample_bytes is the bytes of one row. Its fill-repeat tail is
// not written: position n + j is sample j mod n, which a consumer views or copies from there.
constexpr uint32_t kMaxTensors = 8;
constexpr uint32_t kTensorNameBytes = 32;  // NUL included
constexpr uint32_t kTensorMaxDims = 3;     // per sample (the batch adds the first dimension)
constexpr int64_t kVariableExtent = -1;    // shape[0] of a variable-length tensor
struct TensorDesc {
  char name[kTensorNameBytes];
  uint32_t dtype;
  uint32_t ndim;
  int64_t shape[kTensorMaxDims];
  uint64_t sample_bytes;
  uint64_t offset;
  uint64_t values_offset;   // variable-length: its rows (0 otherwise)
  uint64_t values_bytes;    // variable-length: room for the rows of one producer batch
};
inline bool IsVariableLength(const TensorDesc& t) {
  return t.ndim > 0 && t.shape[0] == kVariableExtent;
}

// View groups (docs/pipeline.md "Views through the Producer"): consumers with equal views
// form a group; the slot holds each group's images in a region of its own. Group 0 is the
// leader's view, at images_offset with the descriptor's own geometry; a consumer of group g
// reads groups[g] instead (present when bit g of group_mask is set, with its view key).
constexpr uint32_t kMaxViewGroups = 16;
struct GroupDesc {
  uint64_t view_key;       // the group's view (core::ViewKey); joins name it
  uint64_t images_offset;  // within the slot's data
  uint64_t sample_bytes;   // bytes of one image
  uint32_t dtype, layout;  // pipeline::DType, pipeline::Layout
  int32_t channels, height, width;
  int32_t image_size;
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
  uint32_t num_tensors;        // entries of `tensors` in use (<= kMaxTensors)
  uint32_t repeats;            // the last `repeats` of [0, n) repeat samples another consumer
                               // received (a shard tail cut by the leader): reported repeats
  TensorDesc tensors[kMaxTensors];
  uint32_t group_mask;         // bit g: groups[g] is filled in this slot (0: group 0 only)
  uint32_t reserved_groups;
  GroupDesc groups[kMaxViewGroups];
};

// --- the stream segment (leader writes, consumers read) ---

struct alignas(64) SlotInfo {
  std::atomic<uint64_t> seq;   // position held, kNoSeq when never written
  SlotDesc desc;
};

struct StreamHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t ring_slots;              // prefetch window: positions ahead of the slowest reader
  uint32_t max_slots;               // slots in the pool (SlotInfo entries, data slots)
  uint32_t heartbeat_ms;            // the leader's; consumers beat at a quarter of it
  uint64_t slot_bytes;
  uint64_t slots_offset;            // SlotInfo[max_slots]
  uint64_t positions_offset;        // atomic<uint64_t>[kPositionTable]
  uint64_t data_offset;             // page aligned
  uint64_t total_bytes;
  uint64_t control_bytes;           // size of the control segment
  int32_t leader_pid;
  uint32_t leader_uid;
  int32_t leader_rank;
  uint32_t max_consumer_batch;
  uint32_t producer_batch;          // samples per full producer batch
  uint32_t stream_epochs;           // epochs of the stream (0: unbounded or unknown)
  uint64_t epoch_samples;           // samples per epoch (before skips)
  // Progressive resizing: the canonical spec the leader executes, so consumers derive
  // their exact batches per epoch (Consumer::BatchesPerEpoch). Empty: none.
  char resize_spec[1024];
  char job[64];
  char host[64];

  alignas(64) std::atomic<uint32_t> publish_futex;  // bumped at every publish and state change
  std::atomic<uint64_t> published;                   // positions [0, published) are out

  alignas(64) std::atomic<uint32_t> member_futex;   // bumped at admission and eviction
  std::atomic<uint32_t> stream_state;                // StreamState
  char failure[512];

  // CLOCK_MONOTONIC of the leader's last sign of life (its control thread, every
  // heartbeat_ms / 4): a stopped or hung leader is noticed by waiting consumers.
  alignas(64) std::atomic<int64_t> leader_heartbeat_ns;
  // Data slots [0, prepared_slots) have their pages (the leader populated them before first
  // use): a consumer maps them into its page tables while it waits, so that touching a
  // batch after a hand-off never faults (docs/data-plane.md, "Pages"). In the padding of the
  // line above: 0 from a leader that predates it (the consumer then faults as before).
  std::atomic<uint32_t> prepared_slots;
};

// --- the control segment (consumers write) ---

struct alignas(64) ConsumerEntry {
  std::atomic<uint32_t> state;      // MemberState (written by the leader)
  int32_t pid;
  int32_t rank;                     // MPI rank or -1
  uint32_t batch_size;
  uint32_t buffer_depth;
  uint32_t flags;                   // ConsumerFlags
  uint64_t order_seed;
  uint64_t generation;              // bumped every time the entry is reused
  std::atomic<uint64_t> start_seq;  // first stream position it receives (set at admission)
  std::atomic<uint64_t> position;   // next position it will acquire (written by the consumer)
  std::atomic<int64_t> last_seen_ns;
  std::atomic<uint64_t> batches;    // consumer batches taken
  std::atomic<uint64_t> wait_ns;    // time blocked waiting for data
  char name[32];
};

struct alignas(64) SlotPending {
  std::atomic<uint64_t> mask;  // consumers that were given this slot and have not released it
};

struct ControlHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t max_slots;
  alignas(64) std::atomic<uint32_t> consumer_waiters;
  alignas(64) std::atomic<uint32_t> release_futex;  // bumped at every release / position move
  std::atomic<uint32_t> leader_waiting;
  ConsumerEntry consumers[kMaxConsumers];
  // followed by SlotPending[max_slots]
};

static_assert(std::atomic<uint64_t>::is_always_lock_free, "needs lock-free 64-bit atomics");
static_assert(std::atomic<uint32_t>::is_always_lock_free, "needs lock-free 32-bit atomics");
static_assert(std::atomic<int64_t>::is_always_lock_free, "needs lock-free 64-bit atomics");

// A position table entry packs the position and its slot: (seq << 16) | slot.
constexpr uint32_t kMaxSlots = 1u << 16;
inline uint64_t PackPosition(uint64_t seq, uint32_t slot) { return (seq << 16) | slot; }
inline uint64_t PositionSeq(uint64_t v) { return v >> 16; }
inline uint32_t PositionSlot(uint64_t v) { return static_cast<uint32_t>(v & 0xffff); }

// A consumer's check of the stream segment it mapped: the magic and the layout version this
// build reads. A leader of another layout version (an older or newer Batchcast) is refused
// with both versions and what to do, before anything else of the segment is read.
Status CheckStreamLayout(const StreamHeader* h, uint64_t stream_bytes);

// Geometry of a segment pair; computed once by the leader (and checked by consumers).
struct SegmentGeometry {
  uint32_t max_slots = 0;
  uint64_t slot_bytes = 0;
  uint64_t slots_offset = 0, positions_offset = 0, data_offset = 0, stream_bytes = 0;
  uint64_t pending_offset = 0, control_bytes = 0;
};
SegmentGeometry ComputeGeometry(uint32_t max_slots, uint64_t slot_bytes);

// Populates the page tables of [p, p + bytes) (docs/data-plane.md, "Pages"): `write`,
// allocating missing pages (the leader); else mapping them readable (a consumer). In pieces
// of 256 KiB, so that the address-space lock it holds never stalls the process's other
// threads (an mmap, a munmap, and every page fault queued behind them) for longer than one
// piece. False (errno set) when the kernel refuses (before 5.14: no MADV_POPULATE_*).
bool PopulatePages(void* p, size_t bytes, bool write);

// Typed views of the two segments, from base pointers and a geometry the caller trusts
// (the leader's private copy, or one a consumer validated against the segment sizes).
struct SegmentView {
  StreamHeader* stream = nullptr;
  ControlHeader* control = nullptr;
  SegmentGeometry geo;

  SlotInfo& slot(uint32_t i) const {
    return reinterpret_cast<SlotInfo*>(reinterpret_cast<char*>(stream) + geo.slots_offset)[i];
  }
  std::atomic<uint64_t>& position(uint64_t seq) const {
    return reinterpret_cast<std::atomic<uint64_t>*>(reinterpret_cast<char*>(stream) +
                                                    geo.positions_offset)[seq % kPositionTable];
  }
  std::atomic<uint64_t>& pending(uint32_t i) const {
    return reinterpret_cast<SlotPending*>(reinterpret_cast<char*>(control) +
                                          geo.pending_offset)[i].mask;
  }
  uint8_t* data(uint32_t i) const {
    return reinterpret_cast<uint8_t*>(stream) + geo.data_offset + uint64_t(i) * geo.slot_bytes;
  }
};

}  // namespace batchcast::shm
