// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "transport/shm/ring_leader.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "core/errors.h"
#include "core/log.h"
#include "core/thread_name.h"
#include "transport/shm/control.h"
#include "transport/shm/futex.h"

namespace batchcast::shm {

std::string MemberInfo::Describe() const {
  std::string s = "consumer " + std::to_string(id) + " (";
  if (rank >= 0) s += "rank " + std::to_string(rank) + ", ";
  s += "pid " + std::to_string(pid);
  if (!name.empty()) s += ", '" + name + "'";
  return s + ")";
}

RingLeader::RingLeader(const RingConfig& config) : config_(config) {}

Result<std::unique_ptr<RingLeader>> RingLeader::Create(const RingConfig& config) {
  if (config.num_slots < 2)
    return InvalidArgumentError("ring: needs at least 2 slots, got {}", config.num_slots);
  if (config.slot_bytes == 0) return InvalidArgumentError("ring: slot size is 0 bytes");
  if (config.socket_name.empty()) return InvalidArgumentError("ring: empty control socket name");
  if (config.num_slots > kPositionTable / 2)
    return InvalidArgumentError("ring: {} slots exceed the {} the position table allows",
                                config.num_slots, kPositionTable / 2);
  if (config.max_slots != 0 && config.max_slots < config.num_slots + 2)
    return InvalidArgumentError("ring: a pool of {} slots cannot hold a ring of {} plus one "
                                "consumer's buffer; raise max_slots", config.max_slots,
                                config.num_slots);
  std::unique_ptr<RingLeader> ring(new RingLeader(config));
  BC_RETURN_IF_ERROR(ring->Init());
  return ring;
}

namespace {

// A memfd of `bytes`, sealed against resizing; `future_write` also against any new
// writable mapping (consumers can then only map it read-only; ours stays writable).
Result<int> CreateSegment(const std::string& name, uint64_t bytes, void** mapping) {
  int fd = memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return ErrnoError(errno, "ring: memfd_create '{}'", name);
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    int err = errno;
    close(fd);
    return ErrnoError(err, "ring: sizing the {} byte segment '{}'", bytes, name);
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  if (p == MAP_FAILED) {
    int err = errno;
    close(fd);
    return ErrnoError(err, "ring: mapping {} bytes of '{}'", bytes, name);
  }
  *mapping = p;
  return fd;
}

}  // namespace

Status RingLeader::Init() {
  uint32_t max_slots = config_.max_slots;
  if (max_slots == 0)
    max_slots = static_cast<uint32_t>(
        std::min<uint64_t>(uint64_t(config_.num_slots) * (kMaxConsumers + 1), kMaxSlots - 1));
  geo_ = ComputeGeometry(max_slots, config_.slot_bytes);
  pool_limit_.store(max_slots);
  reserved_.assign(max_slots, kNoSeq);
  const std::string name = "batchcast-" + std::to_string(getuid()) + "-" + config_.job;
  void* stream = nullptr;
  void* control = nullptr;
  BC_ASSIGN_OR_RETURN(stream_fd_, CreateSegment(name, geo_.stream_bytes, &stream));
  view_.stream = static_cast<StreamHeader*>(stream);
  BC_ASSIGN_OR_RETURN(control_fd_, CreateSegment(name + "-ctl", geo_.control_bytes, &control));
  view_.control = static_cast<ControlHeader*>(control);
  view_.geo = geo_;
  // Consumers receive these descriptors: sizes are sealed for both; the stream segment
  // also against new writable mappings, so batch bytes and descriptors are read-only to
  // every consumer (docs/data-plane.md, "Nobody can change a batch another trainer reads").
  if (fcntl(stream_fd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE |
                                         F_SEAL_SEAL) != 0)
    return ErrnoError(errno, "ring: sealing segment '{}'", name);
  if (fcntl(control_fd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
    return ErrnoError(errno, "ring: sealing segment '{}-ctl'", name);

  StreamHeader* h = view_.stream;
  h->magic = kSegmentMagic;
  h->version = kSegmentVersion;
  h->ring_slots = config_.num_slots;
  h->max_slots = geo_.max_slots;
  h->heartbeat_ms = static_cast<uint32_t>(config_.heartbeat_ms);
  h->slot_bytes = geo_.slot_bytes;
  h->slots_offset = geo_.slots_offset;
  h->positions_offset = geo_.positions_offset;
  h->data_offset = geo_.data_offset;
  h->total_bytes = geo_.stream_bytes;
  h->control_bytes = geo_.control_bytes;
  h->leader_pid = getpid();
  h->leader_uid = getuid();
  h->leader_rank = config_.rank;
  h->max_consumer_batch = config_.max_consumer_batch;
  h->producer_batch = config_.producer_batch;
  h->epoch_samples = config_.epoch_samples;
  if (config_.resize_spec.size() >= sizeof(h->resize_spec))
    return InvalidArgumentError("ring: resize spec of {} bytes does not fit the segment header "
                                "({} bytes); use fewer buckets", config_.resize_spec.size(),
                                sizeof(h->resize_spec) - 1);
  std::snprintf(h->resize_spec, sizeof(h->resize_spec), "%s", config_.resize_spec.c_str());
  h->stream_epochs = config_.stream_epochs;
  std::snprintf(h->job, sizeof(h->job), "%s", config_.job.c_str());
  gethostname(h->host, sizeof(h->host) - 1);
  h->published.store(0);
  h->prepared_slots.store(0);
  h->stream_state.store(static_cast<uint32_t>(StreamState::kRunning));
  h->leader_heartbeat_ns.store(MonotonicNs());
  for (uint32_t i = 0; i < geo_.max_slots; ++i) {
    new (&view_.slot(i)) SlotInfo();
    view_.slot(i).seq.store(kNoSeq);
    view_.pending(i).store(0);
  }
  for (uint64_t p = 0; p < kPositionTable; ++p) view_.position(p).store(~0ULL);
  ControlHeader* c = view_.control;
  c->magic = kControlSegmentMagic;
  c->version = kSegmentVersion;
  c->max_slots = geo_.max_slots;
  // The ring's slots and one consumer buffer's: what the first epoch uses anyway.
  PrepareSlots(std::min(config_.num_slots + 2, geo_.max_slots));

  BC_ASSIGN_OR_RETURN(listen_fd_, ListenAbstract(config_.socket_name));
  event_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (event_fd_ < 0) return ErrnoError(errno, "ring: eventfd");
  control_thread_ = std::thread([this] {
    NameThread("bc-ctl");
    ControlLoop();
  });
  BC_LOG(Info, Shm, "ring: {} slots ahead, a pool of up to {} x {} bytes, at {}", h->ring_slots,
         geo_.max_slots, geo_.slot_bytes, DisplayAddress(config_.socket_name));
  return Status::Ok();
}

RingLeader::~RingLeader() {
  if (view_.stream != nullptr &&
      view_.stream->stream_state.load() == static_cast<uint32_t>(StreamState::kRunning))
    Fail("leader shut down before the end of the stream");
  stop_.store(true);
  if (event_fd_ >= 0) {
    uint64_t one = 1;
    if (write(event_fd_, &one, sizeof(one)) < 0) BC_LOG(Warn, Shm, "ring: eventfd write: {}", errno);
  }
  if (control_thread_.joinable()) control_thread_.join();
  for (auto& [fd, id] : conn_member_) close(fd);
  if (listen_fd_ >= 0) close(listen_fd_);
  if (event_fd_ >= 0) close(event_fd_);
  // Consumers that still map the segments keep them alive; the kernel frees them after.
  if (view_.stream != nullptr) munmap(view_.stream, geo_.stream_bytes);
  if (view_.control != nullptr) munmap(view_.control, geo_.control_bytes);
  if (stream_fd_ >= 0) close(stream_fd_);
  if (control_fd_ >= 0) close(control_fd_);
}

void RingLeader::SetLossHandler(LossHandler handler) {
  std::lock_guard<std::mutex> lock(mu_);
  loss_handler_ = std::move(handler);
}

void RingLeader::SetMemberObserver(MemberObserver observer) {
  std::lock_guard<std::mutex> lock(mu_);
  member_observer_ = std::move(observer);
}

MemberInfo RingLeader::InfoLocked(uint32_t id) const {
  const ConsumerEntry& e = view_.control->consumers[id];
  MemberInfo m;
  m.id = id;
  m.generation = e.generation;
  m.state = static_cast<MemberState>(e.state.load());
  m.pid = e.pid;
  m.rank = e.rank;
  m.batch_size = e.batch_size;
  m.buffer_depth = e.buffer_depth;
  m.flags = e.flags;
  m.order_seed = e.order_seed;
  m.start_seq = e.start_seq.load();
  m.position = e.position.load();
  m.batches = e.batches.load();
  m.wait_ns = e.wait_ns.load();
  m.last_seen_ns = e.last_seen_ns.load();
  m.resumes = resume_[id].resumes;
  m.resume_epoch = resume_[id].epoch;
  m.resume_sample = resume_[id].sample;
  m.group = group_[id];
  m.name = std::string(e.name, strnlen(e.name, sizeof(e.name)));
  return m;
}

std::vector<MemberInfo> RingLeader::Members() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<MemberInfo> out;
  for (uint32_t i = 0; i < kMaxConsumers; ++i)
    if (view_.control->consumers[i].state.load() != static_cast<uint32_t>(MemberState::kFree))
      out.push_back(InfoLocked(i));
  return out;
}

std::string DescribeLoss(const MemberInfo& m, LossKind kind) {
  return m.Describe() + (kind == LossKind::kHeartbeat ? " stopped heart-beating"
                                                      : " died (its connection closed)");
}

std::vector<std::string> RingLeader::LostMembers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lost_members_;
}

int RingLeader::CountMembers(MemberState state) const {
  int n = 0;
  for (uint32_t i = 0; i < kMaxConsumers; ++i)
    if (view_.control->consumers[i].state.load() == static_cast<uint32_t>(state)) ++n;
  return n;
}

uint64_t RingLeader::MemberMask(MemberState state) const {
  uint64_t mask = 0;
  for (uint32_t i = 0; i < kMaxConsumers; ++i)
    if (view_.control->consumers[i].state.load() == static_cast<uint32_t>(state)) mask |= 1ULL << i;
  return mask;
}

std::vector<MemberInfo> RingLeader::Receivers(uint64_t seq) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<MemberInfo> out;
  for (uint32_t i = 0; i < kMaxConsumers; ++i) {
    const ConsumerEntry& e = view_.control->consumers[i];
    if (e.state.load() == static_cast<uint32_t>(MemberState::kActive) && e.start_seq.load() <= seq)
      out.push_back(InfoLocked(i));
  }
  return out;
}

Status RingLeader::WaitForJoined(int n, int64_t timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  auto joined = [&] {
    return CountMembers(MemberState::kJoining) + CountMembers(MemberState::kActive) >= n;
  };
  bool ok = joined_cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                                [&] { return joined() || stop_.load() || failed(); });
  if (failed()) return UnavailableError("ring: {}", view_.stream->failure);
  if (!ok)
    return DeadlineExceededError(
        "ring: only {} of {} consumers joined {} within {} ms (did a trainer rank fail to start, "
        "or is it attached to another job id?)",
        CountMembers(MemberState::kJoining) + CountMembers(MemberState::kActive), n,
        DisplayAddress(config_.socket_name), timeout_ms);
  return Status::Ok();
}

int RingLeader::AdmitJoining(uint64_t start_seq) {
  int admitted = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (uint32_t i = 0; i < kMaxConsumers; ++i) {
      ConsumerEntry& e = view_.control->consumers[i];
      if (e.state.load() != static_cast<uint32_t>(MemberState::kJoining)) continue;
      e.start_seq.store(start_seq);
      e.position.store(start_seq);
      e.state.store(static_cast<uint32_t>(MemberState::kActive));
      ++admitted;
      BC_LOG(Info, Shm, "ring: admitted {} from position {}", InfoLocked(i).Describe(), start_seq);
    }
  }
  if (admitted > 0) {
    view_.stream->member_futex.fetch_add(1);
    FutexWake(&view_.stream->member_futex, INT32_MAX);
  }
  return admitted;
}

bool RingLeader::failed() const {
  return view_.stream->stream_state.load() == static_cast<uint32_t>(StreamState::kFailed);
}

Result<SlotWrite> RingLeader::AcquireSlot(int64_t timeout_ms) {
  return AcquireSlotAt(next_seq_, timeout_ms);
}

Status RingLeader::LimitPool(uint32_t slots) {
  std::lock_guard<std::mutex> lock(mu_);
  if (slots < config_.num_slots + 2 || slots > geo_.max_slots)
    return InvalidArgumentError("ring: cannot limit a pool of {} slots to {} (a ring of {} needs "
                                "at least {})", geo_.max_slots, slots, config_.num_slots,
                                config_.num_slots + 2);
  if (PoolDemandLocked() > slots || slots_used_ > slots)
    return FailedPreconditionError("ring: the attached consumers may hold {} slots, more than "
                                   "a pool of {}", PoolDemandLocked(), slots);
  pool_limit_.store(slots);
  BC_LOG(Info, Shm, "ring: pool limited to {} slots", slots);
  return Status::Ok();
}

uint32_t RingLeader::PoolDemandLocked() const {
  uint32_t demand = config_.num_slots;
  for (uint32_t i = 0; i < kMaxConsumers; ++i) {
    const ConsumerEntry& e = view_.control->consumers[i];
    if (e.state.load() != static_cast<uint32_t>(MemberState::kFree))
      demand += MemberPoolSlots(e.buffer_depth, e.flags);  // what it holds and carves
  }
  return demand;
}

bool RingLeader::SlotReadyLocked(uint64_t seq, uint32_t* slot, std::string* why) const {
  // The prefetch window: the leader runs at most num_slots positions ahead of the batch
  // the slowest active reader works on (the one before its next position, while it still
  // holds it; else its next position). Older batches a reader keeps are not counted:
  // holding never blocks the stream, the pool has room for it. This is the lead a ring of
  // num_slots slots allowed.
  for (uint32_t i = 0; i < kMaxConsumers; ++i) {
    const ConsumerEntry& e = view_.control->consumers[i];
    if (e.state.load() != static_cast<uint32_t>(MemberState::kActive)) continue;
    const uint64_t start = e.start_seq.load();
    if (start > seq) continue;
    uint64_t base = std::max(e.position.load(), start);
    if (base > start) {
      const uint64_t entry = view_.position(base - 1).load();
      const uint32_t slot = PositionSlot(entry);
      if (PositionSeq(entry) == base - 1 && slot < geo_.max_slots &&
          view_.slot(slot).seq.load() == base - 1 &&
          (view_.pending(slot).load() & (1ULL << i)) != 0)
        base -= 1;
    }
    if (seq >= base + config_.num_slots) {
      *why = fmt::format("consumer {} (pid {}) works on position {}, {} behind", i, e.pid, base,
                         seq - base);
      return false;
    }
  }
  const uint32_t limit = pool_limit_.load();
  for (uint32_t i = 0; i < limit; ++i) {
    if (reserved_[i] != kNoSeq || view_.pending(i).load() != 0) continue;
    *slot = i;
    return true;
  }
  *why = fmt::format("all {} slots of the pool are held", limit);
  return false;
}

Result<SlotWrite> RingLeader::AcquireSlotAt(uint64_t seq, int64_t timeout_ms) {
  StreamHeader* h = view_.stream;
  ControlHeader* c = view_.control;
  if (seq < next_seq_ || seq - next_seq_ >= config_.num_slots)
    return InvalidArgumentError("ring: cannot acquire position {}: the next to publish is {} and "
                                "the ring has {} slots; acquire positions in order within the "
                                "ring", seq, next_seq_, config_.num_slots);
  for (uint32_t i = 0; i < geo_.max_slots; ++i)
    if (reserved_[i] == seq)
      return InvalidArgumentError("ring: position {} is already acquired (slot {})", seq, i);
  int64_t deadline = timeout_ms < 0 ? -1 : MonotonicNs() + timeout_ms * 1000000LL;
  uint32_t slot = 0;
  std::string why;
  for (;;) {
    if (failed()) return UnavailableError("ring: {}", h->failure);
    uint32_t v = c->release_futex.load();
    bool ready;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ready = SlotReadyLocked(seq, &slot, &why);
    }
    if (ready) break;
    c->leader_waiting.store(1);
    {
      std::lock_guard<std::mutex> lock(mu_);
      ready = SlotReadyLocked(seq, &slot, &why);
    }
    if (ready) {
      c->leader_waiting.store(0);
      break;
    }
    int64_t wait = 200 * 1000000LL;  // wake now and then to notice failures
    if (deadline >= 0) {
      int64_t left = deadline - MonotonicNs();
      if (left <= 0) {
        c->leader_waiting.store(0);
        return DeadlineExceededError("ring: no slot for position {} after {} ms: {}", seq,
                                     timeout_ms, why);
      }
      wait = std::min(wait, left);
    }
    FutexWait(&c->release_futex, v, wait);
    c->leader_waiting.store(0);
  }
  reserved_[slot] = seq;
  slots_used_ = std::max(slots_used_, slot + 1);
  // The pool grows: two slots past this one get their pages (the control thread populates
  // them) before anybody touches them; a consumer asleep since before this acquisition has
  // mapped what was prepared then.
  if (slot + 2 >= view_.stream->prepared_slots.load(std::memory_order_relaxed) &&
      slot + 3 > prepare_target_.load()) {
    prepare_target_.store(std::min(slot + 3, geo_.max_slots));
    uint64_t one = 1;
    if (write(event_fd_, &one, sizeof(one)) < 0)
      BC_LOG(Debug, Shm, "ring: cannot wake the control thread: {}", std::strerror(errno));
  }
  SlotWrite w;
  w.seq = seq;
  w.slot = slot;
  w.data = view_.data(slot);
  w.capacity = geo_.slot_bytes;
  w.desc = &view_.slot(slot).desc;
  std::memset(w.desc, 0, sizeof(SlotDesc));
  w.desc->seq = seq;
  return w;
}

uint64_t RingLeader::Publish(const SlotWrite& w, uint64_t only) {
  StreamHeader* h = view_.stream;
  if (w.slot >= geo_.max_slots || reserved_[w.slot] != w.seq || w.seq != next_seq_) {
    Fail(fmt::format("ring: publish of position {} in slot {} out of order (the next position "
                     "is {}; a slot must be acquired before it is published, once)", w.seq,
                     w.slot, next_seq_));
    return 0;
  }
  SlotInfo& info = view_.slot(w.slot);
  info.desc.publish_ns = MonotonicNs();
  uint64_t mask = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (uint32_t i = 0; i < kMaxConsumers; ++i) {
      const ConsumerEntry& e = view_.control->consumers[i];
      if (e.state.load() == static_cast<uint32_t>(MemberState::kActive) &&
          e.start_seq.load() <= w.seq)
        mask |= 1ULL << i;
    }
    mask &= only;
    // Order matters (docs/data-plane.md): a reader that sees our bit in the pending mask
    // must also see this position in the slot, so the slot's position is stored first;
    // the position table and `published` last. All seq_cst.
    info.seq.store(w.seq);
    view_.pending(w.slot).store(mask);
    view_.position(w.seq).store(PackPosition(w.seq, w.slot));
    h->published.store(w.seq + 1);
  }
  reserved_[w.slot] = kNoSeq;
  ++next_seq_;
  if (WakeConsumers()) {
    // Consumers were asleep: one FUTEX_WAKE woke them all. The kernel often queues a woken
    // consumer on this CPU, behind this thread, which would go on with its next batch for
    // tens of microseconds before it sleeps; giving the CPU up once lets the consumer run
    // first (hand-off p50 at K=1 on 2 busy cores: 1.6-1.7x the futex-ping floor without,
    // 1.0-1.1x with; docs/benchmarks.md). Nobody waiting: no syscall at all.
    publish_wakes_.fetch_add(1, std::memory_order_relaxed);
    sched_yield();
  }
  return mask;
}

// Populating a slot costs what its first fill's page faults would (allocating and zeroing
// every page), but once, here, instead of in the decode workers during a fill and in every
// consumer's step right after the first hand-off of that slot (each of the K consumers woken
// at once faulting in 16 pages at a time while the others wait for the CPU). Slots already
// in use are never touched (a failed populate is only a missed optimisation).
void RingLeader::PrepareSlots(uint32_t n) {
  if (n <= prepared_slots_) return;
  uint8_t* first = view_.data(prepared_slots_);
  const size_t bytes = size_t(n - prepared_slots_) * geo_.slot_bytes;
  if (!PopulatePages(first, bytes, /*write=*/true))
    BC_LOG(Debug, Shm, "ring: populating slots {}..{}: {} (they fault on first use)",
           prepared_slots_, n - 1, std::strerror(errno));
  prepared_slots_ = n;
  view_.stream->prepared_slots.store(n);
}

int RingLeader::WaitingConsumers() const {
  return static_cast<int>(view_.control->consumer_waiters.load());
}

int RingLeader::OccupiedSlots() const {
  int n = 0;
  for (uint32_t i = 0; i < geo_.max_slots; ++i)
    if (view_.pending(i).load(std::memory_order_relaxed) != 0) ++n;
  return n;
}

bool RingLeader::WakeConsumers() {
  view_.stream->publish_futex.fetch_add(1);
  if (view_.control->consumer_waiters.load() == 0) return false;
  FutexWake(&view_.stream->publish_futex, INT32_MAX);
  return true;
}

void RingLeader::WakeLeader() {
  view_.control->release_futex.fetch_add(1);
  FutexWake(&view_.control->release_futex, INT32_MAX);
}

void RingLeader::End() {
  uint32_t running = static_cast<uint32_t>(StreamState::kRunning);
  view_.stream->stream_state.compare_exchange_strong(running, static_cast<uint32_t>(StreamState::kEnded));
  WakeConsumers();
  joined_cv_.notify_all();
}

void RingLeader::Fail(const std::string& message) {
  {
    static std::mutex fail_mu;
    std::lock_guard<std::mutex> lock(fail_mu);
    if (view_.stream->stream_state.load() != static_cast<uint32_t>(StreamState::kRunning)) return;
    std::snprintf(view_.stream->failure, sizeof(view_.stream->failure), "%s", message.c_str());
    view_.stream->stream_state.store(static_cast<uint32_t>(StreamState::kFailed));
  }
  // Info, not Error: whoever fails the stream reports the cause to the user, and every
  // consumer receives it; an Error here printed the same cause a second time.
  BC_LOG(Info, Shm, "ring: stream failed: {}", message);
  WakeConsumers();
  WakeLeader();
  joined_cv_.notify_all();
}

}  // namespace batchcast::shm
