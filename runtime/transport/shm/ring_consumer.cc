// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "transport/shm/ring_consumer.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "core/errors.h"
#include "core/log.h"
#include "transport/shm/control.h"
#include "transport/shm/futex.h"

namespace batchcast::shm {

Result<std::unique_ptr<RingConsumer>> RingConsumer::Attach(const std::string& socket_name,
                                                           const ConsumerConfig& config) {
  std::unique_ptr<RingConsumer> c(new RingConsumer(config));
  BC_RETURN_IF_ERROR(c->Join(socket_name));
  return c;
}

Status RingConsumer::Join(const std::string& socket_name) {
  BC_ASSIGN_OR_RETURN(sock_, ConnectAbstract(socket_name));
  JoinRequest req{};
  req.magic = kControlMagic;
  req.version = kProtocolVersion;
  req.type = static_cast<uint32_t>(MessageType::kJoin);
  req.pid = getpid();
  req.rank = config_.rank;
  req.batch_size = config_.batch_size;
  req.buffer_depth = config_.buffer_depth;
  req.flags = config_.flags;
  req.order_seed = config_.order_seed;
  std::snprintf(req.name, sizeof(req.name), "%s", config_.name.c_str());
  BC_RETURN_IF_ERROR(SendMessage(sock_, &req, sizeof(req)));
  JoinReply reply{};
  int fd = -1;
  Status st = RecvMessage(sock_, &reply, sizeof(reply), &fd, config_.join_timeout_ms);
  if (!st.ok()) return st.WithContext("joining " + DisplayAddress(socket_name));
  if (reply.magic != kControlMagic || reply.type != static_cast<uint32_t>(MessageType::kJoinReply)) {
    if (fd >= 0) close(fd);
    return CorruptDataError("joining {}: malformed reply", DisplayAddress(socket_name));
  }
  if (reply.code != 0) {
    if (fd >= 0) close(fd);
    reply.message[sizeof(reply.message) - 1] = '\0';
    return Status(static_cast<StatusCode>(reply.code),
                  fmt::format("leader at {} refused to attach: {}", DisplayAddress(socket_name),
                              reply.message));
  }
  if (fd < 0) return CorruptDataError("joining {}: no segment received", DisplayAddress(socket_name));
  void* p = mmap(nullptr, reply.segment_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int map_err = errno;
  close(fd);
  if (p == MAP_FAILED) return ErrnoError(map_err, "mapping the {} byte segment", reply.segment_bytes);
  header_ = static_cast<SegmentHeader*>(p);
  mapped_bytes_ = reply.segment_bytes;
  if (header_->magic != kSegmentMagic || header_->version != kSegmentVersion ||
      header_->total_bytes != reply.segment_bytes)
    return CorruptDataError("segment from {} has a foreign layout (version {} vs {})",
                            DisplayAddress(socket_name), header_->version, kSegmentVersion);
  id_ = reply.consumer_id;
  generation_ = reply.generation;
  if (id_ >= kMaxConsumers) return CorruptDataError("leader assigned consumer id {}", id_);
  entry_ = &header_->consumers[id_];
  stop_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (stop_fd_ < 0) return ErrnoError(errno, "consumer: eventfd");
  heartbeat_ = std::thread([this] { HeartbeatLoop(); });
  return Status::Ok();
}

RingConsumer::~RingConsumer() {
  Detach().IgnoreError();
  if (header_ != nullptr) munmap(header_, mapped_bytes_);
}

void RingConsumer::HeartbeatLoop() {
  int64_t tick_ms = std::max<int64_t>(20, std::min<int64_t>(250, config_.heartbeat_ms / 4));
  pollfd fds[2] = {{sock_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
  for (;;) {
    entry_->last_seen_ns.store(MonotonicNs(), std::memory_order_relaxed);
    int rc = poll(fds, 2, static_cast<int>(tick_ms));
    if (rc < 0 && errno != EINTR) break;
    if (fds[1].revents) return;
    if (fds[0].revents) {  // the leader never writes after the join: this is a close
      leader_gone_.store(true);
      // Wake our own waiting thread (and, harmlessly, any other waiter).
      header_->publish_futex.fetch_add(1);
      FutexWake(&header_->publish_futex, INT32_MAX);
      header_->member_futex.fetch_add(1);
      FutexWake(&header_->member_futex, INT32_MAX);
      return;
    }
  }
}

Status RingConsumer::CheckAlive() const {
  if (header_->stream_state.load() == static_cast<uint32_t>(StreamState::kFailed))
    return UnavailableError("leader (rank {}, pid {}, host {}) failed: {}", header_->leader_rank,
                            header_->leader_pid, header_->host, header_->failure);
  if (entry_->generation != generation_ ||
      entry_->state.load() == static_cast<uint32_t>(MemberState::kFree))
    return UnavailableError(
        "this consumer was detached by the leader (no heartbeat within {} ms?)",
        config_.heartbeat_ms);
  if (leader_gone_.load())
    return UnavailableError(
        "leader (rank {}, pid {}, host {}) is gone: its control connection closed (did the "
        "leader process die?)",
        header_->leader_rank, header_->leader_pid, header_->host);
  return Status::Ok();
}

Result<uint64_t> RingConsumer::WaitAdmitted(int64_t timeout_ms) {
  int64_t deadline = MonotonicNs() + timeout_ms * 1000000LL;
  for (;;) {
    uint32_t v = header_->member_futex.load();
    if (entry_->state.load() == static_cast<uint32_t>(MemberState::kActive)) break;
    BC_RETURN_IF_ERROR(CheckAlive());
    if (header_->stream_state.load() == static_cast<uint32_t>(StreamState::kEnded))
      return Status(StatusCode::kEndOfStream, "the stream ended before this consumer was admitted");
    int64_t left = deadline - MonotonicNs();
    if (left <= 0)
      return DeadlineExceededError("consumer {} was not admitted within {} ms", id_, timeout_ms);
    FutexWait(&header_->member_futex, v, std::min<int64_t>(left, 200000000LL));
  }
  position_ = entry_->start_seq.load();
  return position_;
}

Result<const SlotDesc*> RingConsumer::Acquire(int64_t* waited_ns) {
  int64_t total_wait = 0;
  for (;;) {
    int64_t waited = 0;
    auto r = AcquireAt(position_, &waited);
    total_wait += waited;
    if (!r.ok() || *r != nullptr) {
      if (waited_ns) *waited_ns = total_wait;
      return r;
    }
    ++position_;  // a targeted publish for other consumers: not ours, skip it
    entry_->position.store(position_, std::memory_order_relaxed);
  }
}

// Waits for position `seq`; returns its descriptor, or nullptr when it was published but
// not to this consumer. A position addressed to us cannot be recycled before we release
// it, so a slot that already holds a later position, or lacks our bit, was not ours.
Result<const SlotDesc*> RingConsumer::AcquireAt(uint64_t seq, int64_t* waited_ns) {
  SegmentHeader* h = header_;
  int64_t start = 0;
  bool counted = false;
  while (h->published.load(std::memory_order_acquire) <= seq) {
    if (!counted) {
      start = MonotonicNs();
      h->consumer_waiters.fetch_add(1);
      counted = true;
    }
    uint32_t v = h->publish_futex.load(std::memory_order_acquire);
    if (h->published.load(std::memory_order_acquire) > seq) break;
    // A normally ended stream reads as its end even if the leader has exited since.
    Status alive = h->stream_state.load() == static_cast<uint32_t>(StreamState::kEnded)
                       ? Status(StatusCode::kEndOfStream, "end of stream")
                       : CheckAlive();
    if (!alive.ok()) {
      h->consumer_waiters.fetch_sub(1);
      return alive;
    }
    FutexWait(&h->publish_futex, v, 200000000LL);
  }
  int64_t waited = 0;
  if (counted) {
    h->consumer_waiters.fetch_sub(1);
    waited = MonotonicNs() - start;
    entry_->wait_ns.fetch_add(static_cast<uint64_t>(waited), std::memory_order_relaxed);
  }
  if (waited_ns) *waited_ns = waited;
  SlotHeader& s = Slots(h)[seq % h->num_slots];
  uint64_t held = s.seq.load(std::memory_order_acquire);
  if (held != seq || (s.pending.load() & (1ULL << id_)) == 0) {
    BC_RETURN_IF_ERROR(CheckAlive());
    if (held != kNoSeq && held < seq)
      return InternalError("consumer {}: slot {} holds position {}, older than published {}", id_,
                           seq % h->num_slots, held, seq);
    return static_cast<const SlotDesc*>(nullptr);
  }
  ++position_;
  entry_->position.store(position_, std::memory_order_relaxed);
  return &s.desc;
}

const uint8_t* RingConsumer::Data(const SlotDesc* desc) const {
  return SlotData(header_, static_cast<uint32_t>(desc->seq % header_->num_slots));
}

void RingConsumer::Release(uint64_t seq) {
  SegmentHeader* h = header_;
  SlotHeader& s = Slots(h)[seq % h->num_slots];
  s.pending.fetch_and(~(1ULL << id_), std::memory_order_acq_rel);
  h->release_futex.fetch_add(1, std::memory_order_release);
  if (h->leader_waiting.load()) FutexWake(&h->release_futex, INT32_MAX);
}

void RingConsumer::RecordBatch() { entry_->batches.fetch_add(1, std::memory_order_relaxed); }

Status RingConsumer::Detach() {
  if (detached_.exchange(true)) return Status::Ok();
  Status st;
  if (sock_ >= 0 && !leader_gone_.load()) {
    LeaveRequest msg{kControlMagic, kProtocolVersion, static_cast<uint32_t>(MessageType::kLeave), 0};
    st = SendMessage(sock_, &msg, sizeof(msg));
  }
  if (stop_fd_ >= 0) {
    uint64_t one = 1;
    if (write(stop_fd_, &one, sizeof(one)) < 0) BC_LOG(Warn, Shm, "consumer: eventfd write failed");
  }
  if (heartbeat_.joinable()) heartbeat_.join();
  if (sock_ >= 0) close(sock_);
  if (stop_fd_ >= 0) close(stop_fd_);
  sock_ = stop_fd_ = -1;
  return st;
}

}  // namespace batchcast::shm
