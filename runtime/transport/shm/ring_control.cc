// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The leader's control thread: accepts consumers, validates their join requests,
// hands out the segment, and reaps consumers that leave, disconnect or go silent.
#include <poll.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "core/errors.h"
#include "core/log.h"
#include "transport/shm/control.h"
#include "transport/shm/futex.h"
#include "transport/shm/ring_leader.h"

namespace batchcast::shm {

namespace {

// now - then for a time a consumer wrote into the control segment (its heartbeat): any
// value may be there (a hostile or broken process), so no signed overflow: a time in the
// future reads as 0 (seen just now), one in the far past as INT64_MAX.
int64_t ElapsedSinceNs(int64_t now, int64_t then) {
  if (then >= now) return 0;
  const uint64_t d = static_cast<uint64_t>(now) - static_cast<uint64_t>(then);
  return d > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(d);
}

}  // namespace
namespace {

JoinReply MakeReply(const Status& status) {
  JoinReply r{};
  r.magic = kControlMagic;
  r.version = kProtocolVersion;
  r.type = static_cast<uint32_t>(MessageType::kJoinReply);
  r.code = static_cast<int32_t>(status.code());
  std::snprintf(r.message, sizeof(r.message), "%s", status.message().c_str());
  return r;
}

}  // namespace

RingLeader::ControlCounters RingLeader::control_counters() const {
  ControlCounters c;
  c.iterations = control_iterations_.load();
  c.accept_attempts = accept_attempts_.load();
  c.accept_failures = accept_failures_.load();
  return c;
}

void RingLeader::ControlLoop() {
  int64_t tick_ms = std::max<int64_t>(20, std::min<int64_t>(250, config_.heartbeat_ms / 4));
  std::vector<pollfd> fds;
  while (!stop_.load()) {
    // The leader's sign of life for consumers (a SIGSTOPped or hung leader is noticed).
    view_.stream->leader_heartbeat_ns.store(MonotonicNs());
    fds.clear();
    fds.push_back({event_fd_, POLLIN, 0});
    // Out of descriptors: leave new connections in the backlog for a while instead of
    // spinning on a listen socket that stays readable.
    auto* clock = accept_clock_.load();
    const bool accepting = (clock ? clock() : MonotonicNs()) >= accept_paused_until_;
    fds.push_back({accepting ? listen_fd_ : -1, POLLIN, 0});
    for (auto& [fd, id] : conn_member_) fds.push_back({fd, POLLIN, 0});
    int rc = poll(fds.data(), fds.size(), static_cast<int>(tick_ms));
    if (rc < 0 && errno != EINTR) {
      BC_LOG(Error, Shm, "ring: control poll failed: {}", std::strerror(errno));
      Fail(fmt::format("leader control thread: poll failed: {}", std::strerror(errno)));
      return;
    }
    if (stop_.load()) break;
    if (rc > 0 && (fds[0].revents & POLLIN)) {  // the leader thread asks for slots' pages
      uint64_t requests = 0;
      if (read(event_fd_, &requests, sizeof(requests)) < 0 && errno != EAGAIN)
        BC_LOG(Debug, Shm, "ring: control eventfd read: {}", std::strerror(errno));
    }
    PrepareSlots(prepare_target_.load());
    if (rc > 0) {
      if (fds[1].revents & POLLIN) HandleAccept();
      for (size_t i = 2; i < fds.size(); ++i)
        if (fds[i].revents != 0) HandleReadable(fds[i].fd);
    }
    CheckHeartbeats();
    CloseSlowHandshakes();
    control_iterations_.fetch_add(1);
  }
}

void RingLeader::HandleAccept() {
  accept_attempts_.fetch_add(1);
  auto conn = AcceptConnection(listen_fd_);
  if (conn.ok()) {
    conn_member_[*conn] = -1;
    handshake_since_[*conn] = MonotonicNs();
    if (accept_paused_until_ != 0) {
      BC_LOG(Info, Shm, "ring: accepting connections again");
      accept_paused_until_ = 0;
    }
    return;
  }
  // EMFILE, ENFILE, ENOMEM (the status code, not errno: formatting the message may change it).
  if (conn.status().code() == StatusCode::kResourceExhausted) {
    accept_failures_.fetch_add(1);
    if (accept_paused_until_ == 0)
      BC_LOG(Warn, Shm, "ring: cannot accept a connection ({}); {} connections are open. "
             "Pausing new connections for 100 ms at a time until descriptors are free "
             "(raise `ulimit -n`, or find who opens so many)", conn.status().message(),
             conn_member_.size());
    auto* clock = accept_clock_.load();
    accept_paused_until_ = (clock ? clock() : MonotonicNs()) + 100 * 1000000LL;
    return;
  }
  BC_LOG(Warn, Shm, "ring: {}", conn.status().message());
}

void RingLeader::HandleReadable(int fd) {
  union {
    JoinRequest join;
    MemberMessage member;
  } msg;
  int id = conn_member_[fd];
  // A joined consumer may only send drain/leave; a new connection only a join or a status query.
  size_t want = id < 0 ? sizeof(JoinRequest) : sizeof(MemberMessage);
  // Never block here: this thread serves every consumer (a partial message is refused).
  size_t got = 0;
  Status st = RecvMessageNow(fd, &msg, want, &got);
  if (st.code() == StatusCode::kDeadlineExceeded) return;  // spurious wake-up
  if (id < 0) handshake_since_.erase(fd);
  if (id < 0 && got >= kMessageHeaderBytes && msg.join.magic == kControlMagic &&
      msg.join.version != kProtocolVersion) {
    // Another Batchcast version (its messages may have another size): say so, by version.
    const Status why = VersionMismatch(msg.join.version, "consumer", "leader");
    BC_LOG(Warn, Shm, "ring: refused a connection: {}", why.message());
    JoinReply r = MakeReply(why);
    SendMessage(fd, &r, sizeof(r)).IgnoreError();
    close(fd);
    conn_member_.erase(fd);
    return;
  }
  if (st.ok() && id < 0 && msg.join.magic == kControlMagic &&
      msg.join.version == kProtocolVersion &&
      msg.join.type == static_cast<uint32_t>(MessageType::kStatus)) {
    HandleStatus(fd);
    close(fd);
    conn_member_.erase(fd);
    return;
  }
  if (!st.ok() && id < 0) {
    BC_LOG(Warn, Shm, "ring: refused a connection: {}", st.message());
    close(fd);
    conn_member_.erase(fd);
    return;
  }
  if (st.ok() && id < 0) {
    if (msg.join.magic != kControlMagic || msg.join.type != static_cast<uint32_t>(MessageType::kJoin)) {
      BC_LOG(Warn, Shm, "ring: refused a connection that sent no valid join request");
      JoinReply r = MakeReply(InvalidArgumentError(
          "not a Batchcast join request of protocol {} (a consumer built from another Batchcast "
          "version? rebuild it against this one)", kProtocolVersion));
      SendMessage(fd, &r, sizeof(r)).IgnoreError();
      close(fd);
      conn_member_.erase(fd);
      return;
    }
    HandleJoin(fd, msg.join);
    return;
  }
  const bool valid = st.ok() && msg.member.magic == kControlMagic &&
                     msg.member.version == kProtocolVersion;
  if (valid && msg.member.type == static_cast<uint32_t>(MessageType::kDrain)) {
    // Done, but may still hold batches: stop addressing it, keep the connection.
    Unaddress(static_cast<uint32_t>(id), MemberState::kDraining);
    return;
  }
  if (valid && msg.member.type == static_cast<uint32_t>(MessageType::kLeave)) {
    Reap(static_cast<uint32_t>(id), LossKind::kDetached);
  } else {
    if (st.ok())  // anything else from a member is a protocol violation
      BC_LOG(Warn, Shm, "ring: consumer {} sent a malformed control message; detaching it", id);
    Reap(static_cast<uint32_t>(id), LossKind::kDisconnected);
  }
  close(fd);
  conn_member_.erase(fd);
}

void RingLeader::HandleJoin(int fd, const JoinRequest& req) {
  auto refuse = [&](const Status& why) {
    BC_LOG(Warn, Shm, "ring: refused consumer pid {}: {}", req.pid, why.message());
    JoinReply r = MakeReply(why);
    SendMessage(fd, &r, sizeof(r)).IgnoreError();
    close(fd);
    conn_member_.erase(fd);
  };
  auto cred = GetPeerCred(fd);
  if (!cred.ok()) return refuse(cred.status());
  if (cred->uid != getuid())
    return refuse(PermissionDeniedError(
        "uid {} may not attach: this leader serves only uid {} (segments are owner-only)",
        cred->uid, getuid()));
  if (failed() || view_.stream->stream_state.load() != static_cast<uint32_t>(StreamState::kRunning))
    return refuse(UnavailableError("the stream has already ended"));
  if (req.batch_size == 0 || req.batch_size > config_.max_consumer_batch)
    return refuse(InvalidArgumentError(
        "batch size {} is outside 1..{} (the largest consumer batch this stream admits): {}",
        req.batch_size, config_.max_consumer_batch,
        config_.batch_limit_advice.empty() ? kLeaderBatchAdvice
                                           : config_.batch_limit_advice.c_str()));
  if (req.buffer_depth == 0 || req.buffer_depth >= config_.num_slots)
    return refuse(InvalidArgumentError(
        "buffer depth {} is outside 1..{} (the ring has {} slots; raise ring_slots)",
        req.buffer_depth, config_.num_slots - 1, config_.num_slots));
  if ((req.flags & ~uint32_t(kCarveOffset | kCarveShuffle | kLoopHoldsBatch)) != 0)
    return refuse(InvalidArgumentError("unknown consumer flags 0x{:x}", req.flags));
  if (req.resumes > 1)
    return refuse(InvalidArgumentError("join field 'resumes' is {} (0 or 1)", req.resumes));
  if (strnlen(req.view, sizeof(req.view)) == sizeof(req.view))
    return refuse(InvalidArgumentError("join field 'view' is not NUL-terminated"));
  const std::string spec(req.view);
  ViewGroupAnswer group;
  const ViewAdmitter& admitter = config_.view_admitter;
  uint32_t in_use = 0;  // the groups of the members (this thread alone adds or frees them)
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (uint32_t i = 0; i < kMaxConsumers; ++i)
      if (view_.control->consumers[i].state.load() != static_cast<uint32_t>(MemberState::kFree))
        in_use |= 1u << group_[i];
  }
  if (!spec.empty() && !admitter)
    return refuse(InvalidArgumentError(
        "view '{}': this leader makes its own view only (its producer serves no view groups); "
        "attach without a view", spec));
  if (admitter) {
    auto answer = admitter(spec, in_use);
    if (!answer.ok()) return refuse(answer.status());
    group = std::move(answer).value();
    if (group.group >= kMaxViewGroups)
      return refuse(InternalError("view group {} is out of range (a producer bug)", group.group));
  }

  int id = -1;
  uint64_t generation = 0;
  uint32_t demand = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    demand = PoolDemandLocked() + MemberPoolSlots(req.buffer_depth, req.flags);
    for (uint32_t i = 0; i < kMaxConsumers && demand <= pool_limit_.load(); ++i) {
      ConsumerEntry& e = view_.control->consumers[i];
      if (e.state.load() != static_cast<uint32_t>(MemberState::kFree)) continue;
      e.pid = cred->pid;  // trust the kernel, not the message
      e.rank = req.rank;
      e.batch_size = req.batch_size;
      e.buffer_depth = req.buffer_depth;
      e.flags = req.flags;
      e.order_seed = req.order_seed;
      e.generation += 1;
      e.start_seq.store(kNoSeq);
      e.position.store(kNoSeq);
      e.batches.store(0);
      e.wait_ns.store(0);
      e.last_seen_ns.store(MonotonicNs());
      std::memset(e.name, 0, sizeof(e.name));
      std::memcpy(e.name, req.name, strnlen(req.name, sizeof(req.name) - 1));
      resume_[i] = ResumePoint{req.resumes == 1, req.resume_epoch, req.resume_sample};
      group_[i] = group.group;
      e.state.store(static_cast<uint32_t>(MemberState::kJoining));
      id = static_cast<int>(i);
      generation = e.generation;
      break;
    }
  }
  if (id < 0 && demand > pool_limit_.load())
    return refuse(ResourceExhaustedError(
        "the slot pool of {} slots cannot also hold this consumer's buffer of {} batches (the "
        "ring's {} slots and the attached consumers' buffers need {}; a GPU-staged ring mirrors "
        "at most 16 slots on the device); attach with a smaller buffer_depth, or lower "
        "ring_slots", pool_limit_.load(), req.buffer_depth, config_.num_slots,
        demand - MemberPoolSlots(req.buffer_depth, req.flags)));
  if (id < 0)
    return refuse(ResourceExhaustedError(
        "all {} consumer entries are in use (entries of stopped or finished consumers are "
        "reused only once their process is gone)", kMaxConsumers));
  join_ns_[id] = MonotonicNs();
  JoinReply r = MakeReply(Status::Ok());
  r.consumer_id = static_cast<uint32_t>(id);
  r.features = config_.replays_resume ? uint32_t(kLeaderReplaysResume) : 0u;
  if (!config_.replays_resume)
    std::snprintf(r.resume_refusal, sizeof(r.resume_refusal), "%s",
                  config_.resume_refusal.c_str());
  r.generation = generation;
  r.segment_bytes = geo_.stream_bytes;
  r.control_bytes = geo_.control_bytes;
  r.group = group.group;
  r.view_key = group.view_key;
  std::snprintf(r.message, sizeof(r.message), "%s", group.canonical.c_str());
  Status st = SendMessage(fd, &r, sizeof(r), stream_fd_, control_fd_);
  if (!st.ok()) {
    BC_LOG(Warn, Shm, "ring: join reply to pid {} failed: {}", req.pid, st.message());
    Reap(static_cast<uint32_t>(id), LossKind::kDisconnected);
    close(fd);
    conn_member_.erase(fd);
    return;
  }
  conn_member_[fd] = id;
  BC_LOG(Info, Shm, "ring: consumer {} joined (pid {}, rank {}, batch {}, depth {}{})", id,
         cred->pid, req.rank, req.batch_size, req.buffer_depth,
         req.resumes ? fmt::format(", resuming at epoch {} sample {}", req.resume_epoch,
                                   req.resume_sample)
                     : std::string());
  joined_cv_.notify_all();
}

void RingLeader::Reap(uint32_t id, LossKind kind) {
  MemberInfo info;
  LossHandler handler;
  MemberObserver observer;
  bool was_evicted = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ConsumerEntry& e = view_.control->consumers[id];
    if (e.state.load() == static_cast<uint32_t>(MemberState::kFree)) return;
    observer = member_observer_;
    info = InfoLocked(id);
    was_evicted = info.state == MemberState::kEvicted;
    // A loss (not a detach, nor a member reported at its eviction) is listed before the
    // entry is released, so that whoever sees the stream empty sees it listed.
    if (kind == LossKind::kDisconnected && !was_evicted && info.state != MemberState::kDraining)
      lost_members_.push_back(DescribeLoss(info, kind));
    // Its process is gone (or it said it is done and holds nothing): every bit it has,
    // held or not, is released, and the entry may be reused from now on.
    e.state.store(static_cast<uint32_t>(MemberState::kLeaving));
    const uint64_t bit = 1ULL << id;
    for (uint32_t s = 0; s < geo_.max_slots; ++s) view_.pending(s).fetch_and(~bit);
    e.state.store(static_cast<uint32_t>(MemberState::kFree));
    handler = loss_handler_;
  }
  WakeLeader();
  view_.stream->member_futex.fetch_add(1);
  FutexWake(&view_.stream->member_futex, INT32_MAX);
  joined_cv_.notify_all();
  switch (kind) {
    case LossKind::kDetached:
      BC_LOG(Info, Shm, "ring: {} detached at position {}", info.Describe(), info.position);
      break;
    case LossKind::kDisconnected:
      if (was_evicted || info.state == MemberState::kDraining)
        BC_LOG(Info, Shm, "ring: {} is gone; the slots it held are released", info.Describe());
      else
        BC_LOG(Warn, Shm, "ring: {} disconnected without detaching (process died?); its slots "
               "are released", info.Describe());
      break;
    case LossKind::kHeartbeat:
      break;  // reported at eviction
  }
  // A draining member said it was done: however its connection ends, it left normally.
  // An evicted one was reported when it was evicted.
  if (info.state == MemberState::kDraining) kind = LossKind::kDetached;
  if (observer && !was_evicted) observer(info, &kind);
  if (handler && !was_evicted) handler(info, kind);
}

void RingLeader::Unaddress(uint32_t id, MemberState state) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ConsumerEntry& e = view_.control->consumers[id];
    const uint32_t now = e.state.load();
    if (now != static_cast<uint32_t>(MemberState::kActive) &&
        now != static_cast<uint32_t>(MemberState::kJoining))
      return;
    // The handshake with a consumer acquiring concurrently (docs/data-plane.md): we store
    // the state, then read its position; it stores its position, then reads the state
    // (all seq_cst). Either we see the position past what it acquired, or it sees it was
    // unaddressed and gives that batch back unread. Positions >= it are not held by it.
    e.state.store(static_cast<uint32_t>(state));
    // The entry's position is authoritative (the consumer stores it before it reads its
    // state); a drain message's position only repeats it, for the log.
    const uint64_t pos = e.position.load();
    const uint64_t bit = 1ULL << id;
    for (uint32_t s = 0; s < geo_.max_slots; ++s) {
      const uint64_t seq = view_.slot(s).seq.load();
      if (seq != kNoSeq && (pos == kNoSeq || seq >= pos)) view_.pending(s).fetch_and(~bit);
    }
  }
  WakeLeader();
  view_.stream->member_futex.fetch_add(1);
  FutexWake(&view_.stream->member_futex, INT32_MAX);
  joined_cv_.notify_all();
}

uint64_t RingLeader::ReceiverMask(uint64_t seq) const {
  uint64_t mask = 0;
  for (uint32_t i = 0; i < kMaxConsumers; ++i) {
    const ConsumerEntry& e = view_.control->consumers[i];
    if (e.state.load() == static_cast<uint32_t>(MemberState::kActive) && e.start_seq.load() <= seq)
      mask |= 1ULL << i;
  }
  return mask;
}

uint64_t RingLeader::AdmitJoiningMask(uint64_t start_seq, uint64_t ids) {
  uint64_t admitted = 0;
  std::vector<MemberInfo> infos;
  MemberObserver observer;
  {
    std::lock_guard<std::mutex> lock(mu_);
    observer = member_observer_;
    for (uint32_t i = 0; i < kMaxConsumers; ++i) {
      ConsumerEntry& e = view_.control->consumers[i];
      if ((ids & (1ULL << i)) == 0 ||
          e.state.load() != static_cast<uint32_t>(MemberState::kJoining))
        continue;
      e.start_seq.store(start_seq);
      e.position.store(start_seq);
      e.state.store(static_cast<uint32_t>(MemberState::kActive));
      admitted |= 1ULL << i;
      infos.push_back(InfoLocked(i));
      BC_LOG(Info, Shm, "ring: admitted {} from position {}", infos.back().Describe(), start_seq);
    }
  }
  if (observer)
    for (const MemberInfo& m : infos) observer(m, nullptr);
  if (admitted != 0) {
    view_.stream->member_futex.fetch_add(1);
    FutexWake(&view_.stream->member_futex, INT32_MAX);
  }
  return admitted;
}

void RingLeader::SetStatusProvider(StatusProvider provider) {
  std::lock_guard<std::mutex> lock(mu_);
  status_provider_ = std::move(provider);
}

// Answers a status query from the membership table (same uid only, like a join).
void RingLeader::HandleStatus(int fd) {
  auto r = std::make_unique<StatusReply>();
  std::memset(r.get(), 0, sizeof(StatusReply));
  r->magic = kControlMagic;
  r->version = kProtocolVersion;
  r->type = static_cast<uint32_t>(MessageType::kStatusReply);
  auto cred = GetPeerCred(fd);
  if (!cred.ok() || cred->uid != getuid()) {
    r->code = static_cast<int32_t>(StatusCode::kPermissionDenied);
    std::snprintf(r->message, sizeof(r->message), "uid %u may not query this leader (uid %u)",
                  cred.ok() ? cred->uid : ~0u, getuid());
    SendMessage(fd, r.get(), sizeof(StatusReply)).IgnoreError();
    return;
  }
  const int64_t now = MonotonicNs();
  StatusProvider provider;
  {
    std::lock_guard<std::mutex> lock(mu_);
    provider = status_provider_;
    for (uint32_t i = 0; i < kMaxConsumers; ++i) {
      if (view_.control->consumers[i].state.load() == static_cast<uint32_t>(MemberState::kFree)) continue;
      MemberInfo m = InfoLocked(i);
      MemberStatus& s = r->members[r->count++];
      s.id = m.id;
      s.state = static_cast<uint32_t>(m.state);
      s.pid = m.pid;
      s.rank = m.rank;
      s.batch_size = m.batch_size;
      s.buffer_depth = m.buffer_depth;
      s.start_seq = m.start_seq;
      s.position = m.position;
      s.batches = m.batches;
      s.wait_ns = m.wait_ns;
      s.attached_ns = now - join_ns_[i];
      s.silent_ns = ElapsedSinceNs(now, m.last_seen_ns);
      s.group = m.group;
      std::snprintf(s.name, sizeof(s.name), "%s", m.name.c_str());
    }
  }
  r->leader_pid = getpid();
  r->stream_state = view_.stream->stream_state.load();
  r->num_slots = config_.num_slots;
  r->published = view_.stream->published.load();
  r->occupied_slots = static_cast<uint32_t>(OccupiedSlots());
  r->heartbeat_ms = static_cast<uint32_t>(config_.heartbeat_ms);
  if (provider) provider(&r->stream);
  Status st = SendMessage(fd, r.get(), sizeof(StatusReply));
  if (!st.ok()) BC_LOG(Warn, Shm, "ring: status reply failed: {}", st.message());
}

// Connections that sent nothing useful within the handshake timeout are closed.
void RingLeader::CloseSlowHandshakes() {
  const int64_t limit = config_.handshake_timeout_ms * 1000000LL;
  const int64_t now = MonotonicNs();
  for (auto it = handshake_since_.begin(); it != handshake_since_.end();) {
    if (now - it->second > limit) {
      BC_LOG(Warn, Shm, "ring: closed a connection that sent no join request within {} ms",
             config_.handshake_timeout_ms);
      close(it->first);
      conn_member_.erase(it->first);
      it = handshake_since_.erase(it);
    } else {
      ++it;
    }
  }
}

void RingLeader::CheckHeartbeats() {
  int64_t now = MonotonicNs();
  int64_t limit = config_.heartbeat_ms * 1000000LL;
  for (auto& [fd, id] : conn_member_) {
    if (id < 0) continue;
    const ConsumerEntry& e = view_.control->consumers[id];
    const uint32_t state = e.state.load();
    if (state != static_cast<uint32_t>(MemberState::kActive) &&
        state != static_cast<uint32_t>(MemberState::kJoining))
      continue;
    if (ElapsedSinceNs(now, e.last_seen_ns.load()) <= limit) continue;
    // Stopped (SIGSTOP, Slurm suspend, a debugger) or hung: the others go on without it,
    // but what it holds stays intact and its entry stays its own while its process lives.
    MemberInfo info;
    LossHandler handler;
    MemberObserver observer;
    {
      std::lock_guard<std::mutex> lock(mu_);
      info = InfoLocked(static_cast<uint32_t>(id));
      handler = loss_handler_;
      observer = member_observer_;
      lost_members_.push_back(DescribeLoss(info, LossKind::kHeartbeat));
    }
    Unaddress(static_cast<uint32_t>(id), MemberState::kEvicted);
    BC_LOG(Warn, Shm, "ring: {} showed no sign of life for {} ms (stopped or hung?); it is no "
           "longer addressed, and the batches it holds stay untouched until it releases them "
           "or exits", info.Describe(), config_.heartbeat_ms);
    const LossKind silent = LossKind::kHeartbeat;
    if (observer) observer(info, &silent);
    if (handler) handler(info, LossKind::kHeartbeat);
  }
}

}  // namespace batchcast::shm
