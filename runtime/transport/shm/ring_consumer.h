// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The consumer side of the node data plane: joins a leader through its control socket
// (after checking who listens there), maps the stream segment read-only and the control
// segment read-write, waits (futex, no spinning) for published producer batches, and
// releases them. A heartbeat thread keeps the membership entry alive and watches the
// socket, so a dead leader is noticed within a heartbeat tick even while the trainer is
// busy; waits also watch the leader's own heartbeat, so a stopped or hung leader is
// noticed too.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "batchcast/status.h"
#include "transport/shm/segment.h"

namespace batchcast::shm {

struct ConsumerConfig {
  uint32_t batch_size = 64;
  uint32_t buffer_depth = 2;
  uint32_t flags = 0;         // ConsumerFlags
  uint64_t order_seed = 0;
  int rank = -1;
  std::string name;
  int64_t heartbeat_ms = 10000;  // used until the leader's own period is known
  int64_t join_timeout_ms = 60000;
  // A leader of another uid is refused unless it is this one (-1: only our own uid).
  int64_t allowed_leader_uid = -1;
  // Resume point sent with the join (JoinRequest): sample resume_sample of the epoch's
  // global order in epoch resume_epoch.
  bool resumes = false;
  uint64_t resume_epoch = 0, resume_sample = 0;
  // The view it asks for (JoinRequest::view): "" = the leader's own.
  std::string view;
};

// One producer batch a consumer acquired: valid until Release(slot).
struct AcquiredBatch {
  uint64_t seq = 0;
  uint32_t slot = 0;
  const SlotDesc* desc = nullptr;
  const uint8_t* data = nullptr;
};

class RingConsumer {
 public:
  static Result<std::unique_ptr<RingConsumer>> Attach(const std::string& socket_name,
                                                      const ConsumerConfig& config);
  ~RingConsumer();  // leaves if still attached, then unmaps
  RingConsumer(const RingConsumer&) = delete;
  RingConsumer& operator=(const RingConsumer&) = delete;

  // Blocks until the leader admits this consumer; returns its first stream position.
  // No deadline (timeout_ms < 0): a late joiner may wait for the next epoch however long
  // it takes; the wait fails only when the leader fails, ends, dies or stops beating.
  Result<uint64_t> WaitAdmitted(int64_t timeout_ms = -1);

  // Blocks until the next producer batch addressed to this consumer is published and
  // returns it (valid until Release); advances position(). kEndOfStream when the stream
  // ended; kUnavailable naming the cause when the leader failed, vanished or stopped
  // beating, or when this consumer was evicted. *waited_ns gets the time spent blocked.
  // Not thread-safe against itself; Release may be called concurrently from any thread.
  Result<AcquiredBatch> Acquire(int64_t* waited_ns);
  // Gives a producer batch back; thread-safe; each acquired batch exactly once.
  void Release(const AcquiredBatch& batch);

  // This consumer is done: the leader stops addressing it at once; what it holds stays
  // valid until released. Idempotent. Acquire fails afterwards.
  Status Drain();
  // Leaves the stream (the leader releases whatever this consumer still holds): call only
  // when no view of its batches is alive. Idempotent.
  Status Detach();

  // Ok while the leader still addresses this consumer; the eviction error otherwise.
  Status CheckAddressed() const;
  // Whether the leader's control connection has closed (its process exited or died); after
  // a normal end this is no error: what was published is still read to the end.
  bool leader_gone() const { return leader_gone_.load(); }

  uint64_t position() const { return position_; }
  uint32_t id() const { return id_; }
  const StreamHeader* header() const { return view_.stream; }
  const SegmentView& view() const { return view_; }
  const ConsumerConfig& config() const { return config_; }
  // LeaderFeature bits of the leader (control.h), from its join reply.
  uint32_t leader_features() const { return leader_features_; }
  // Its view group (0: the leader's view), the group's key and canonical view spec (from
  // the join reply; "" for the leader's view).
  uint32_t group() const { return group_; }
  const std::string& view_spec() const { return view_spec_; }
  // Without kLeaderReplaysResume: why that leader cannot replay a passed position and what to
  // do ("" from a leader that does not say).
  const std::string& resume_refusal() const { return resume_refusal_; }
  // The leader's heartbeat period, which this consumer follows.
  int64_t heartbeat_ms() const { return heartbeat_ms_; }
  void RecordBatch();  // bookkeeping shown by the leader (batches taken)

 private:
  explicit RingConsumer(const ConsumerConfig& config) : config_(config) {}
  Status Join(const std::string& socket_name);
  Status CheckLeader(int fd, const std::string& socket_name) const;
  Status MapSegments(int stream_fd, int control_fd, uint64_t stream_bytes,
                     uint64_t control_bytes);
  // Ok unless the stream failed, this consumer was detached, evicted or drained, or the
  // leader of a stream still running died or stopped beating (an ended stream's leader may
  // have exited: what it published is read to the end).
  Status CheckAlive() const;
  Result<const SlotDesc*> AcquireAt(uint64_t seq, uint32_t* slot, int64_t* waited_ns);
  // Maps the slots the leader has prepared (StreamHeader::prepared_slots) into this
  // process's page tables (MADV_POPULATE_READ); called while idle, before waiting.
  void MapPreparedSlots();
  void HeartbeatLoop();
  // A group g > 0: a private copy of slot s's descriptor with group g's image geometry in
  // place of the leader view's (valid while the slot is held). Fails when the slot does not
  // hold the group (a leader bug) or its region does not fit the slot.
  Result<const SlotDesc*> GroupDescOf(uint32_t s, const SlotDesc& shared);
  void MoveTo(uint64_t position);

  ConsumerConfig config_;
  std::string address_;
  int sock_ = -1;
  int stop_fd_ = -1;
  SegmentView view_;
  ConsumerEntry* entry_ = nullptr;
  uint32_t id_ = 0;
  uint64_t generation_ = 0;
  uint32_t leader_features_ = 0;
  uint32_t group_ = 0;
  uint64_t view_key_ = 0;
  std::string view_spec_;
  std::vector<std::unique_ptr<SlotDesc>> group_descs_;  // slot -> GroupDescOf's copy
  std::string resume_refusal_;
  uint64_t position_ = 0;
  uint32_t mapped_slots_ = 0;  // data slots [0, mapped_slots_) are in our page tables
  int64_t heartbeat_ms_ = 10000;
  bool guarded_ = false;  // the stream segment is in the read-only guard's registry
  std::atomic<bool> leader_gone_{false};
  std::atomic<bool> drained_{false};
  std::atomic<bool> detached_{false};
  std::thread heartbeat_;
};

}  // namespace batchcast::shm
