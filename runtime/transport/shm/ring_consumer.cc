// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "transport/shm/ring_consumer.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "core/errors.h"
#include "core/readonly_guard.h"
#include "core/log.h"
#include "transport/shm/control.h"
#include "transport/shm/futex.h"

namespace batchcast::shm {
namespace {

constexpr int64_t kWakeNs = 200 * 1000000LL;  // waits wake this often to notice failures

}  // namespace

Result<std::unique_ptr<RingConsumer>> RingConsumer::Attach(const std::string& socket_name,
                                                           const ConsumerConfig& config) {
  std::unique_ptr<RingConsumer> c(new RingConsumer(config));
  BC_RETURN_IF_ERROR(c->Join(socket_name));
  return c;
}

// Trust goes both ways: before sending or mapping anything, check who listens there.
Status RingConsumer::CheckLeader(int fd, const std::string& socket_name) const {
  BC_ASSIGN_OR_RETURN(PeerCred cred, GetPeerCred(fd));
  if (cred.uid == getuid()) return Status::Ok();
  if (config_.allowed_leader_uid >= 0 && cred.uid == uid_t(config_.allowed_leader_uid))
    return Status::Ok();
  return PermissionDeniedError(
      "refusing the leader at {}: it runs as uid {} (pid {}), not as this user (uid {}). "
      "Another user's process holds this address, so it cannot be trusted with your training "
      "data; stop it, use another address or job id, or allow that uid explicitly "
      "(allowed_leader_uid)", DisplayAddress(socket_name), cred.uid, cred.pid, getuid());
}

Status RingConsumer::Join(const std::string& socket_name) {
  address_ = socket_name;
  BC_ASSIGN_OR_RETURN(sock_, ConnectAbstract(socket_name));
  BC_RETURN_IF_ERROR(CheckLeader(sock_, socket_name));
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
  if (config_.view.size() >= sizeof(req.view))
    return InvalidArgumentError("option 'view': the spec '{}' has {} characters, at most {} fit "
                                "a join; leave out the keys that keep the leader's values",
                                config_.view, config_.view.size(), sizeof(req.view) - 1);
  std::memcpy(req.view, config_.view.data(), config_.view.size());
  if (config_.resumes) {
    req.resumes = 1;
    req.resume_epoch = config_.resume_epoch;
    req.resume_sample = config_.resume_sample;
  }
  BC_RETURN_IF_ERROR(SendMessage(sock_, &req, sizeof(req)));
  JoinReply reply{};
  int stream_fd = -1, control_fd = -1;
  Status st = RecvMessage(sock_, &reply, sizeof(reply), &stream_fd, config_.join_timeout_ms,
                          &control_fd);
  auto close_fds = [&] {
    if (stream_fd >= 0) close(stream_fd);
    if (control_fd >= 0) close(control_fd);
  };
  if (!st.ok()) {
    close_fds();
    return st.WithContext("joining " + DisplayAddress(socket_name));
  }
  if (reply.magic != kControlMagic || reply.type != static_cast<uint32_t>(MessageType::kJoinReply)) {
    close_fds();
    return CorruptDataError("joining {}: malformed reply", DisplayAddress(socket_name));
  }
  if (reply.version != kProtocolVersion) {
    close_fds();
    return VersionMismatch(reply.version, "leader", "consumer")
        .WithContext("joining " + DisplayAddress(socket_name));
  }
  if (reply.code != 0) {
    close_fds();
    reply.message[sizeof(reply.message) - 1] = '\0';
    return Status(static_cast<StatusCode>(reply.code),
                  fmt::format("leader at {} refused to attach: {}", DisplayAddress(socket_name),
                              reply.message));
  }
  if (stream_fd < 0 || control_fd < 0) {
    close_fds();
    return CorruptDataError("joining {}: the leader sent no segments", DisplayAddress(socket_name));
  }
  st = MapSegments(stream_fd, control_fd, reply.segment_bytes, reply.control_bytes);
  close_fds();  // the mappings keep the memory; no descriptor stays open
  if (!st.ok()) return st.WithContext("joining " + DisplayAddress(socket_name));
  id_ = reply.consumer_id;
  generation_ = reply.generation;
  leader_features_ = reply.features;
  group_ = reply.group;
  view_key_ = reply.view_key;
  reply.message[sizeof(reply.message) - 1] = '\0';
  view_spec_ = group_ != 0 ? std::string(reply.message) : std::string();
  if (group_ >= kMaxViewGroups)
    return CorruptDataError("joining {}: the leader assigned view group {} (at most {})",
                            DisplayAddress(socket_name), group_, kMaxViewGroups - 1);
  reply.resume_refusal[sizeof(reply.resume_refusal) - 1] = '\0';
  if ((leader_features_ & kLeaderReplaysResume) == 0) resume_refusal_ = reply.resume_refusal;
  if (id_ >= kMaxConsumers) return CorruptDataError("leader assigned consumer id {}", id_);
  entry_ = &view_.control->consumers[id_];
  heartbeat_ms_ = view_.stream->heartbeat_ms > 0 ? view_.stream->heartbeat_ms : config_.heartbeat_ms;
  if (heartbeat_ms_ != config_.heartbeat_ms)
    BC_LOG(Debug, Shm, "consumer: following the leader's heartbeat of {} ms", heartbeat_ms_);
  stop_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (stop_fd_ < 0) return ErrnoError(errno, "consumer: eventfd");
  heartbeat_ = std::thread([this] { HeartbeatLoop(); });
  return Status::Ok();
}

Status RingConsumer::MapSegments(int stream_fd, int control_fd, uint64_t stream_bytes,
                                 uint64_t control_bytes) {
  // The stream segment read-only: batch bytes, descriptors and stream state cannot be
  // changed from here (the memfd is sealed against writable mappings anyway).
  void* s = mmap(nullptr, stream_bytes, PROT_READ, MAP_SHARED | MAP_NORESERVE, stream_fd, 0);
  if (s == MAP_FAILED) return ErrnoError(errno, "mapping the {} byte stream segment", stream_bytes);
  view_.stream = static_cast<StreamHeader*>(s);
  view_.geo.stream_bytes = stream_bytes;
  void* c = mmap(nullptr, control_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, control_fd, 0);
  if (c == MAP_FAILED)
    return ErrnoError(errno, "mapping the {} byte control segment", control_bytes);
  view_.control = static_cast<ControlHeader*>(c);
  view_.geo.control_bytes = control_bytes;
  const StreamHeader* h = view_.stream;
  BC_RETURN_IF_ERROR(CheckStreamLayout(h, stream_bytes));
  // Geometry is recomputed here, not trusted: it must agree with the sizes we mapped.
  const SegmentGeometry g = ComputeGeometry(h->max_slots, h->slot_bytes);
  if (h->max_slots == 0 || h->max_slots >= kMaxSlots || g.stream_bytes != stream_bytes ||
      g.control_bytes != control_bytes || g.slots_offset != h->slots_offset ||
      g.data_offset != h->data_offset || g.positions_offset != h->positions_offset ||
      view_.control->magic != kControlSegmentMagic)
    return CorruptDataError("the leader's segments do not match their declared geometry");
  view_.geo = g;
  // A write into it faults (PROT_READ); say which memory it was and what to do instead.
  Status guard = RegisterReadOnlyRegion(
      s, stream_bytes, fmt::format("batch memory of the leader at {} (pid {})",
                                   DisplayAddress(address_), h->leader_pid));
  if (guard.ok()) guarded_ = true;
  else BC_LOG(Warn, Shm, "consumer: {}; a write into a shared batch will fault without an "
              "explanation", guard.message());
  return Status::Ok();
}

RingConsumer::~RingConsumer() {
  Detach().IgnoreError();
  if (guarded_) UnregisterReadOnlyRegion(view_.stream);
  if (view_.stream != nullptr) munmap(view_.stream, view_.geo.stream_bytes);
  if (view_.control != nullptr) munmap(view_.control, view_.geo.control_bytes);
}

void RingConsumer::HeartbeatLoop() {
  int64_t tick_ms = std::max<int64_t>(20, std::min<int64_t>(250, heartbeat_ms_ / 4));
  pollfd fds[2] = {{sock_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
  for (;;) {
    entry_->last_seen_ns.store(MonotonicNs(), std::memory_order_relaxed);
    int rc = poll(fds, 2, static_cast<int>(tick_ms));
    if (rc < 0 && errno != EINTR) break;
    if (fds[1].revents) return;
    if (fds[0].revents) {  // the leader never writes after the join: this is a close
      leader_gone_.store(true);
      // Wake our own waiting thread (it re-checks leader_gone_); the words are read-only
      // here, so wake without changing them.
      FutexWake(&view_.stream->publish_futex, INT32_MAX);
      FutexWake(&view_.stream->member_futex, INT32_MAX);
      return;
    }
  }
}

Status RingConsumer::CheckAlive() const {
  const StreamHeader* h = view_.stream;
  if (h->stream_state.load() == static_cast<uint32_t>(StreamState::kFailed))
    return UnavailableError("leader (rank {}, pid {}, host {}) failed: {}", h->leader_rank,
                            h->leader_pid, h->host, h->failure);
  const uint32_t state = entry_->state.load();
  if (entry_->generation != generation_ || state == static_cast<uint32_t>(MemberState::kFree))
    return UnavailableError("this consumer was detached by the leader at {}",
                            DisplayAddress(address_));
  if (state == static_cast<uint32_t>(MemberState::kEvicted))
    return UnavailableError(
        "this consumer was evicted by the leader at {}: it showed no sign of life for {} ms "
        "(was the process stopped, suspended or hung?). The others went on without it; the "
        "batches it holds are intact until released. Attach again to continue",
        DisplayAddress(address_), heartbeat_ms_);
  if (drained_.load())
    return FailedPreconditionError("this consumer has drained (its epochs are complete or it "
                                   "was detached); it receives no more batches");
  // A normally ended stream: what the leader published stays readable (this process maps
  // it) although the leader may have exited since. Positions addressed to others are then
  // still skipped on the way to this consumer's own last ones (a late joiner's catch-up
  // replays come before them) and the stream's end is read as its end, not as a dead leader.
  if (h->stream_state.load() == static_cast<uint32_t>(StreamState::kEnded)) return Status::Ok();
  if (leader_gone_.load())
    return UnavailableError(
        "leader (rank {}, pid {}, host {}) is gone: its control connection closed (did the "
        "leader process die?)",
        h->leader_rank, h->leader_pid, h->host);
  const int64_t silent = MonotonicNs() - h->leader_heartbeat_ns.load();
  if (silent > heartbeat_ms_ * 1000000LL)
    return UnavailableError(
        "leader (rank {}, pid {}, host {}) has shown no sign of life for {} ms (heartbeat {} "
        "ms): is it stopped (SIGSTOP, a debugger, a suspended job) or hung?",
        h->leader_rank, h->leader_pid, h->host, silent / 1000000, heartbeat_ms_);
  return Status::Ok();
}

Status RingConsumer::CheckAddressed() const {
  const uint32_t state = entry_->state.load(std::memory_order_relaxed);
  if (state == static_cast<uint32_t>(MemberState::kActive) && entry_->generation == generation_)
    return Status::Ok();
  return CheckAlive();
}

Result<uint64_t> RingConsumer::WaitAdmitted(int64_t timeout_ms) {
  const int64_t deadline = timeout_ms < 0 ? -1 : MonotonicNs() + timeout_ms * 1000000LL;
  for (;;) {
    uint32_t v = view_.stream->member_futex.load();
    if (entry_->state.load() == static_cast<uint32_t>(MemberState::kActive)) break;
    BC_RETURN_IF_ERROR(CheckAlive());
    if (view_.stream->stream_state.load() == static_cast<uint32_t>(StreamState::kEnded))
      return Status(StatusCode::kEndOfStream, "the stream ended before this consumer was admitted");
    int64_t wait = kWakeNs;
    if (deadline >= 0) {
      const int64_t left = deadline - MonotonicNs();
      if (left <= 0)
        return DeadlineExceededError("consumer {} was not admitted within {} ms", id_, timeout_ms);
      wait = std::min(wait, left);
    }
    FutexWait(&view_.stream->member_futex, v, wait);
  }
  position_ = entry_->start_seq.load();
  return position_;
}

// A consumer touches every page of a batch it steps on. Without this, the first batch in each
// slot cost every consumer one minor fault per 16 pages (fault-around) right after the
// hand-off, while the consumers woken with it waited for the CPU (docs/data-plane.md,
// "Pages"). Populating read-only maps pages that exist (the leader prepared them) without
// copying; an old kernel (EINVAL) or a failure only means those faults come back.
void RingConsumer::MapPreparedSlots() {
  const uint32_t prepared = std::min(view_.stream->prepared_slots.load(), view_.geo.max_slots);
  if (prepared <= mapped_slots_) return;
  const uint8_t* first = view_.data(mapped_slots_);
  const size_t bytes = size_t(prepared - mapped_slots_) * view_.geo.slot_bytes;
  if (!PopulatePages(const_cast<uint8_t*>(first), bytes, /*write=*/false))
    BC_LOG(Debug, Shm, "consumer {}: mapping slots {}..{}: {}", id_, mapped_slots_, prepared - 1,
           std::strerror(errno));
  mapped_slots_ = prepared;
}

void RingConsumer::MoveTo(uint64_t position) {
  position_ = position;
  entry_->position.store(position);  // seq_cst: see Unaddress in ring_control.cc
  if (view_.control->leader_waiting.load()) {
    view_.control->release_futex.fetch_add(1);
    FutexWake(&view_.control->release_futex, INT32_MAX);
  }
}

Result<AcquiredBatch> RingConsumer::Acquire(int64_t* waited_ns) {
  if (drained_.load()) return CheckAlive();
  int64_t total_wait = 0;
  for (;;) {
    int64_t waited = 0;
    uint32_t slot = 0;
    const uint64_t seq = position_;
    auto r = AcquireAt(seq, &slot, &waited);
    total_wait += waited;
    if (!r.ok() || *r != nullptr) {
      if (waited_ns) *waited_ns = total_wait;
      if (!r.ok()) return r.status();
      const SlotDesc* desc = *r;
      if (group_ != 0) {
        auto own = GroupDescOf(slot, *desc);
        if (!own.ok()) {
          Release(AcquiredBatch{seq, slot, desc, view_.data(slot)});
          return own.status();
        }
        desc = *own;
      }
      return AcquiredBatch{seq, slot, desc, view_.data(slot)};
    }
    MoveTo(seq + 1);  // a targeted publish for other consumers: not ours, skip it
  }
}

// Waits for position `seq`; returns its descriptor, or nullptr when it was published but
// not to this consumer. A position addressed to us cannot be recycled before we release
// it, so a slot that lacks our bit, or that holds another position, was not ours
// (docs/data-plane.md, "Publishing and releasing").
Result<const SlotDesc*> RingConsumer::AcquireAt(uint64_t seq, uint32_t* slot, int64_t* waited_ns) {
  const StreamHeader* h = view_.stream;
  ControlHeader* c = view_.control;
  int64_t start = 0;
  bool counted = false;
  while (h->published.load() <= seq) {
    if (!counted) {
      MapPreparedSlots();  // idle: nothing to take yet
      if (h->published.load() > seq) break;
      start = MonotonicNs();
      c->consumer_waiters.fetch_add(1);
      counted = true;
    }
    uint32_t v = h->publish_futex.load();
    if (h->published.load() > seq) break;
    // A normally ended stream reads as its end even if the leader has exited since.
    Status alive = h->stream_state.load() == static_cast<uint32_t>(StreamState::kEnded)
                       ? Status(StatusCode::kEndOfStream, "end of stream")
                       : CheckAlive();
    if (!alive.ok()) {
      c->consumer_waiters.fetch_sub(1);
      return alive;
    }
    FutexWait(const_cast<std::atomic<uint32_t>*>(&h->publish_futex), v, kWakeNs);
  }
  int64_t waited = 0;
  if (counted) {
    c->consumer_waiters.fetch_sub(1);
    waited = MonotonicNs() - start;
    entry_->wait_ns.fetch_add(static_cast<uint64_t>(waited), std::memory_order_relaxed);
  }
  if (waited_ns) *waited_ns = waited;
  const uint64_t entry = view_.position(seq).load();
  if (PositionSeq(entry) != seq) {
    BC_RETURN_IF_ERROR(CheckAlive());
    return InternalError("consumer {}: position {} is no longer in the position table (it "
                         "holds {}); the leader ran more than {} positions ahead", id_, seq,
                         PositionSeq(entry), kPositionTable);
  }
  const uint32_t s = PositionSlot(entry);
  if (s >= view_.geo.max_slots)
    return CorruptDataError("consumer {}: position {} names slot {} of {}", id_, seq, s,
                            view_.geo.max_slots);
  const uint64_t bit = 1ULL << id_;
  // Our bit first, then the slot's position (the leader stores them in the other order).
  if ((view_.pending(s).load() & bit) == 0 || view_.slot(s).seq.load() != seq) {
    BC_RETURN_IF_ERROR(CheckAlive());
    return static_cast<const SlotDesc*>(nullptr);
  }
  // Ours. Publish the new position, then check we are still addressed: if the leader
  // unaddressed us meanwhile it may not have seen this acquisition, so give it back.
  MoveTo(seq + 1);
  if (entry_->state.load() != static_cast<uint32_t>(MemberState::kActive)) {
    view_.pending(s).fetch_and(~bit);
    BC_RETURN_IF_ERROR(CheckAlive());
    return UnavailableError("consumer {}: no longer addressed by the leader", id_);
  }
  *slot = s;
  return &view_.slot(s).desc;
}

Result<const SlotDesc*> RingConsumer::GroupDescOf(uint32_t s, const SlotDesc& shared) {
  const GroupDesc g = shared.groups[group_];  // a copy: the leader's memory is read once
  const uint64_t positions = uint64_t(shared.num_samples) + shared.tail;
  const uint64_t slot_bytes = view_.geo.slot_bytes;
  if ((shared.group_mask & (1u << group_)) == 0 || g.view_key != view_key_)
    return InternalError("consumer {}: position {} was published to this consumer without its "
                         "view group {} (a leader bug)", id_, shared.seq, group_);
  if (g.sample_bytes == 0 || g.images_offset > slot_bytes ||
      positions > (slot_bytes - g.images_offset) / g.sample_bytes)
    return CorruptDataError("consumer {}: position {}: view group {} has {} positions of {} "
                            "bytes at {}, beyond the slot of {} bytes", id_, shared.seq, group_,
                            positions, g.sample_bytes, g.images_offset, slot_bytes);
  if (group_descs_.size() < view_.geo.max_slots) group_descs_.resize(view_.geo.max_slots);
  auto& own = group_descs_[s];
  if (own == nullptr) own = std::make_unique<SlotDesc>();
  *own = shared;
  own->images_offset = g.images_offset;
  own->sample_bytes = g.sample_bytes;
  own->dtype = g.dtype;
  own->layout = g.layout;
  own->channels = g.channels;
  own->height = g.height;
  own->width = g.width;
  own->image_size = g.image_size;
  // Under the leader's progressive-resizing schedule only its own group's batches scale: a
  // view group's consumers carve each producer batch at their own batch size, LR factor 1
  // (docs/progressive-resizing.md "A schedule per view"; the leader's tail follows suit).
  if (own->scale_den != 0) {
    own->scale_num = own->scale_den = 1;
    own->scale_cap = 0;
    own->lr_rule = kLrGiven;
    own->lr_factor = 1.0f;
  }
  return own.get();
}

void RingConsumer::Release(const AcquiredBatch& batch) {
  ControlHeader* c = view_.control;
  if (view_.slot(batch.slot).seq.load() != batch.seq)
    BC_LOG(Error, Shm, "consumer {}: releasing position {} but slot {} holds {} (a batch "
           "released twice?)", id_, batch.seq, batch.slot, view_.slot(batch.slot).seq.load());
  view_.pending(batch.slot).fetch_and(~(1ULL << id_));
  c->release_futex.fetch_add(1);
  if (c->leader_waiting.load()) FutexWake(&c->release_futex, INT32_MAX);
}

void RingConsumer::RecordBatch() { entry_->batches.fetch_add(1, std::memory_order_relaxed); }

Status RingConsumer::Drain() {
  if (detached_.load() || drained_.exchange(true)) return Status::Ok();
  if (sock_ < 0 || entry_ == nullptr || leader_gone_.load()) return Status::Ok();
  MemberMessage msg{kControlMagic, kProtocolVersion, static_cast<uint32_t>(MessageType::kDrain), 0,
                    entry_->position.load()};
  return SendMessage(sock_, &msg, sizeof(msg));
}

Status RingConsumer::Detach() {
  if (detached_.exchange(true)) return Status::Ok();
  drained_.store(true);
  Status st;
  if (sock_ >= 0 && entry_ != nullptr && !leader_gone_.load()) {
    MemberMessage msg{kControlMagic, kProtocolVersion, static_cast<uint32_t>(MessageType::kLeave),
                      0, entry_->position.load()};
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
