// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The leader side of the node data plane: owns the two shared-memory segments and the
// control socket, admits consumers and follows them through their lifecycle, and
// publishes producer batches into free slots of a pool.
//
// Membership is dynamic: consumers join and leave at any time through the control
// socket. A member is joining, then active (addressed by every publish at or after its
// start), then draining (it said it is done) or evicted (no sign of life for
// heartbeat_ms): no longer addressed, but the slots it holds are not reused until it
// releases them or its connection closes (the process is gone), so nobody's kept batch
// ever changes under it. A membership entry is reused only after its connection closed.
// Nothing here assumes a fixed set of consumers or that they are MPI ranks.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "batchcast/status.h"
#include "transport/shm/segment.h"


namespace batchcast::shm {

// The advice of a refused consumer batch size when the front door gave none.
inline constexpr const char* kLeaderBatchAdvice =
    "start the leader with a larger largest consumer batch, or ask for a smaller batch_size";

// A joiner's view (JoinRequest::view, "" = the leader's): its view group, or the refusal
// (sent to the joiner as it is). Called on the control thread, without the ring's lock;
// `in_use` has bit g set for every group a member of any state still belongs to.
struct ViewGroupAnswer {
  uint32_t group = 0;
  uint64_t view_key = 0;
  std::string canonical;  // the view's canonical spec (shown to the consumer)
};
using ViewAdmitter =
    std::function<Result<ViewGroupAnswer>(const std::string& spec, uint32_t in_use)>;

struct RingConfig {
  // Prefetch window: the leader publishes at most num_slots positions ahead of the slowest
  // active consumer. The slot pool is larger: it also holds what members keep.
  uint32_t num_slots = 4;
  // Slots in the pool (memory is committed only for slots used): 0 = num_slots x
  // (kMaxConsumers + 1), enough for every member to hold buffer_depth + 1 slots. A join
  // whose buffer the pool cannot hold is refused.
  uint32_t max_slots = 0;
  uint64_t slot_bytes = 0;
  uint32_t max_consumer_batch = 0;  // joins asking for larger batches are refused
  // What the user of this producer's front door does to admit a larger consumer batch (the
  // end of that refusal); "" = the leader's knobs (kLeaderBatchAdvice).
  std::string batch_limit_advice;
  uint32_t producer_batch = 0;      // shown to consumers (batches per epoch)
  uint64_t epoch_samples = 0;
  std::string resize_spec;          // progressive resizing spec in force ("" = none)
  uint32_t stream_epochs = 0;       // epochs of the run (the resize schedule depends on them)
  std::string socket_name;          // abstract socket name, unique per node
  std::string job;                  // identity shown in names and errors
  int rank = -1;                    // leader's rank, or -1 outside MPI
  int64_t heartbeat_ms = 10000;
  // A new connection that sends no complete join or status request within this long is
  // closed (it cannot hold a membership entry or the control thread).
  int64_t handshake_timeout_ms = 5000;
  // The producer replays the rest of an epoch to a joiner resuming behind the stream
  // (a producer::Producer whose feed can make any position again): told to consumers in the join reply (kLeaderReplaysResume).
  bool replays_resume = false;
  // Resolves joiners' views to groups (producer::ViewGroups). Unset: a join with a view is
  // refused (this leader makes its own view only).
  ViewAdmitter view_admitter;
  // Without replays_resume: why this producer cannot make a passed position again and what
  // its user does instead, for the message of a consumer resuming behind the stream (sent in
  // the join reply).
  std::string resume_refusal;
};

struct MemberInfo {
  uint32_t id = 0;
  uint64_t generation = 0;
  MemberState state = MemberState::kFree;
  int pid = 0;
  int rank = -1;
  uint32_t batch_size = 0, buffer_depth = 0, flags = 0;
  uint64_t order_seed = 0;
  uint64_t start_seq = 0, position = 0, batches = 0, wait_ns = 0;
  int64_t last_seen_ns = 0;
  // The resume point its join named (JoinRequest): sample resume_sample of epoch
  // resume_epoch's global order. Kept by the leader, not in the writable control segment.
  bool resumes = false;
  uint64_t resume_epoch = 0, resume_sample = 0;
  uint32_t group = 0;  // its view group (0: the leader's view; ViewAdmitter)
  std::string name;
  std::string Describe() const;  // "consumer 3 (rank 2, pid 1234, 'trial-a')"
};

enum class LossKind { kDetached, kDisconnected, kHeartbeat };
using LossHandler = std::function<void(const MemberInfo&, LossKind)>;
// "<member> died (its connection closed)" or "<member> stopped heart-beating": a loss in
// words, as LostMembers() lists it and loss handlers report it.
std::string DescribeLoss(const MemberInfo& m, LossKind kind);
// Membership for accounting (the telemetry's per-trial ledger): told of each admission
// (`lost` null) and of each loss (as the loss handler is), beside the front door's handler.
using MemberObserver = std::function<void(const MemberInfo&, const LossKind* lost)>;
struct StreamStatus;  // control.h
// Fills the stream part of a status reply (called on the control thread).
using StatusProvider = std::function<void(StreamStatus*)>;

// A slot the leader may fill: data, capacity and the descriptor to complete.
struct SlotWrite {
  uint64_t seq = 0;
  uint32_t slot = 0;
  uint8_t* data = nullptr;
  uint64_t capacity = 0;
  SlotDesc* desc = nullptr;
};

class RingLeader {
 public:
  static Result<std::unique_ptr<RingLeader>> Create(const RingConfig& config);
  ~RingLeader();
  RingLeader(const RingLeader&) = delete;
  RingLeader& operator=(const RingLeader&) = delete;

  const std::string& socket_name() const { return config_.socket_name; }
  const RingConfig& config() const { return config_; }
  // The stream segment's header (futex words, state). Geometry comes from this object.
  StreamHeader* header() { return view_.stream; }
  const SegmentView& view() const { return view_; }
  // The slot pool: max_slots() slots of config().slot_bytes, contiguous from data_base().
  uint32_t max_slots() const { return pool_limit_.load(); }
  // Restricts the pool to its first `slots` slots (a device mirror of bounded size, the GPU
  // stager): joins whose buffers no longer fit are refused. Fails when the members attached
  // already need more. Call before the stream starts.
  Status LimitPool(uint32_t slots);
  uint8_t* slot_data(uint32_t slot) { return view_.data(slot); }
  uint8_t* data_base() { return view_.data(0); }
  uint64_t data_bytes() const { return uint64_t(geo_.max_slots) * geo_.slot_bytes; }

  // --- membership ---
  // Blocks until at least n consumers have joined (joining or active), the timeout
  // expires (kDeadlineExceeded naming how many arrived), or the ring is stopped.
  Status WaitForJoined(int n, int64_t timeout_ms);
  // Admits every joining consumer; it receives positions >= start_seq. Returns how many.
  int AdmitJoining(uint64_t start_seq);
  int CountMembers(MemberState state) const;
  // Bit mask of the members in `state`.
  uint64_t MemberMask(MemberState state) const;
  std::vector<MemberInfo> Members() const;
  // Every consumer lost without detaching so far ("<member> died (its connection closed)",
  // "... stopped heart-beating"), recorded before it stops being addressed: a stream that
  // ends because its last consumer died already lists it.
  std::vector<std::string> LostMembers() const;
  // Active consumers that will receive position `seq` if it is published now.
  std::vector<MemberInfo> Receivers(uint64_t seq) const;
  void SetLossHandler(LossHandler handler);
  void SetMemberObserver(MemberObserver observer);
  // Installs what a status query reports about the stream (`batchcast status`).
  void SetStatusProvider(StatusProvider provider);
  // Bit mask of the active consumers admitted at or before `seq` (who a publish reaches).
  uint64_t ReceiverMask(uint64_t seq) const;
  // Admits the joining consumers with the ids in `ids` only (or all when `ids` is ~0):
  // they receive positions >= start_seq. Returns the admitted consumers' bit mask.
  uint64_t AdmitJoiningMask(uint64_t start_seq, uint64_t ids = ~0ULL);

  // --- stream ---
  uint64_t next_seq() const { return next_seq_; }
  // Waits until the slot for next_seq() has been released by every consumer that got
  // it. Fails when the ring is failed/stopped or the wait exceeds timeout_ms (< 0: none).
  Result<SlotWrite> AcquireSlot(int64_t timeout_ms = -1);
  // Like AcquireSlot, for a position ahead: seq in [next_seq(), next_seq() + num_slots).
  // Lets a producer fill several slots before publishing them, which it must still do in
  // order (the multi-node leader keeps several producer batches' MPI exchanges in flight).
  // Waits until seq is within num_slots of every active consumer's position and a slot
  // of the pool is free (nobody holds it).
  Result<SlotWrite> AcquireSlotAt(uint64_t seq, int64_t timeout_ms = -1);
  // Publishes the slot to the active consumers admitted at or before its position, and
  // of those only to the ones in `only` (a targeted publish: a consumer skips positions
  // not addressed to it). Returns the receiver mask (0: nobody; the slot is free again).
  // Positions must be published in order, each acquired slot once: anything else fails
  // the stream (a producer bug) and returns 0.
  uint64_t Publish(const SlotWrite& slot, uint64_t only = ~0ULL);
  // The member-id bit of an active consumer, for targeted publishing.
  static uint64_t MemberBit(uint32_t id) { return 1ULL << id; }
  // Number of pool slots currently held by at least one consumer.
  int OccupiedSlots() const;
  // Consumers asleep in Acquire right now, waiting for a position to be published.
  int WaitingConsumers() const;
  // Publishes that found consumers asleep: each did one FUTEX_WAKE for all of them and
  // yielded the CPU once (the others made no system call).
  uint64_t publish_wakes() const { return publish_wakes_.load(std::memory_order_relaxed); }
  // Slots of the pool ever used (their memory is committed).
  uint32_t SlotsUsed() const { return slots_used_; }
  // Normal end of the stream: consumers drain what was published, then see the end.
  void End();
  // Abnormal end: consumers fail with `message` (it should name the cause).
  void Fail(const std::string& message);
  bool failed() const;

  // What the control thread has done (tests: the accept back-off on fd exhaustion).
  struct ControlCounters {
    uint64_t iterations = 0;       // control-loop rounds (one poll each)
    uint64_t accept_attempts = 0;  // accept() calls
    uint64_t accept_failures = 0;  // of those, out of descriptors or memory
  };
  ControlCounters control_counters() const;
  // Replaces the clock of the accept back-off (tests: a frozen clock shows that an
  // exhausted leader does not retry before its pause is over). Call before connections come.
  void SetAcceptClockForTesting(int64_t (*clock)()) { accept_clock_.store(clock); }

 private:
  explicit RingLeader(const RingConfig& config);
  Status Init();
  void ControlLoop();
  void HandleReadable(int fd);
  void HandleJoin(int fd, const struct JoinRequest& req);
  void HandleStatus(int fd);
  void HandleAccept();
  void CloseSlowHandshakes();
  void Reap(uint32_t id, LossKind kind);
  // Stops addressing member `id` (state kDraining or kEvicted): clears its bit from the
  // positions it has not acquired; the slots it holds stay pending.
  void Unaddress(uint32_t id, MemberState state);
  void CheckHeartbeats();
  bool WakeConsumers();
  void WakeLeader();
  MemberInfo InfoLocked(uint32_t id) const;
  uint32_t PoolDemandLocked() const;  // slots the members' buffers may hold
  // Why `seq` cannot be given a slot now (empty: it can); *slot gets the free slot.
  bool SlotReadyLocked(uint64_t seq, uint32_t* slot, std::string* why) const;
  // Gives data slots [prepared, n) their pages now (MADV_POPULATE_WRITE), off the fills and
  // the hand-offs, and tells consumers (StreamHeader::prepared_slots). Init, then the control
  // thread, which the leader thread asks through prepare_target_ (it never waits for it).
  void PrepareSlots(uint32_t n);

  RingConfig config_;
  SegmentGeometry geo_;              // private copy: never read back from shared memory
  SegmentView view_;
  int stream_fd_ = -1;
  int control_fd_ = -1;
  int listen_fd_ = -1;
  int event_fd_ = -1;
  uint64_t next_seq_ = 0;
  std::vector<uint64_t> reserved_;   // slot -> position acquired but not yet published
  uint32_t slots_used_ = 0;
  uint32_t prepared_slots_ = 0;      // Init, then the control thread
  std::atomic<uint32_t> prepare_target_{0};  // slots the leader thread wants prepared
  std::atomic<uint32_t> pool_limit_{0};  // slots of the pool in use (<= geo_.max_slots)
  int64_t accept_paused_until_ = 0;  // fd exhaustion: accept() backs off until then (ns)
  std::atomic<int64_t (*)()> accept_clock_{nullptr};  // nullptr: MonotonicNs
  std::atomic<uint64_t> control_iterations_{0};
  std::atomic<uint64_t> accept_attempts_{0};
  std::atomic<uint64_t> accept_failures_{0};
  std::atomic<uint64_t> publish_wakes_{0};

  mutable std::mutex mu_;            // membership table and receiver masks
  std::vector<std::string> lost_members_;  // under mu_ (LostMembers)
  std::condition_variable joined_cv_;
  std::map<int, int> conn_member_;   // control connection fd -> member id (-1: handshake)
  LossHandler loss_handler_;
  MemberObserver member_observer_;
  StatusProvider status_provider_;
  std::map<int, int64_t> handshake_since_;  // control connection fd -> accept time (ns)
  int64_t join_ns_[64] = {};                // member id -> join time (status: attached for)
  struct ResumePoint {
    bool resumes = false;
    uint64_t epoch = 0, sample = 0;
  };
  ResumePoint resume_[64];                  // member id -> its join's resume point (mu_)
  uint32_t group_[64] = {};                 // member id -> its view group (mu_)
  std::atomic<bool> stop_{false};
  std::thread control_thread_;
};

}  // namespace batchcast::shm
