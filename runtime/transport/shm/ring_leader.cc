// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "transport/shm/ring_leader.h"

#include <fcntl.h>
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
  std::unique_ptr<RingLeader> ring(new RingLeader(config));
  BC_RETURN_IF_ERROR(ring->Init());
  return ring;
}

Status RingLeader::Init() {
  uint64_t slots_off = 0, data_off = 0;
  uint64_t total = SegmentBytes(config_.num_slots, config_.slot_bytes, &slots_off, &data_off);
  std::string name = "batchcast-" + std::to_string(getuid()) + "-" + config_.job;
  memfd_ = memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (memfd_ < 0) return ErrnoError(errno, "ring: memfd_create '{}'", name);
  if (ftruncate(memfd_, static_cast<off_t>(total)) != 0)
    return ErrnoError(errno, "ring: sizing the {} byte segment '{}'", total, name);
  // Consumers get this fd; sealing the size stops them from shrinking it under us.
  if (fcntl(memfd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
    return ErrnoError(errno, "ring: sealing segment '{}'", name);
  void* p = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, memfd_, 0);
  if (p == MAP_FAILED) return ErrnoError(errno, "ring: mapping {} bytes of '{}'", total, name);
  header_ = static_cast<SegmentHeader*>(p);
  mapped_bytes_ = total;

  SegmentHeader* h = header_;
  h->magic = kSegmentMagic;
  h->version = kSegmentVersion;
  h->num_slots = config_.num_slots;
  h->slot_bytes = config_.slot_bytes;
  h->slots_offset = slots_off;
  h->data_offset = data_off;
  h->total_bytes = total;
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
  h->stream_state.store(static_cast<uint32_t>(StreamState::kRunning));
  SlotHeader* slots = Slots(h);
  for (uint32_t i = 0; i < h->num_slots; ++i) {
    new (&slots[i]) SlotHeader();
    slots[i].seq.store(kNoSeq);
    slots[i].pending.store(0);
  }

  BC_ASSIGN_OR_RETURN(listen_fd_, ListenAbstract(config_.socket_name));
  event_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (event_fd_ < 0) return ErrnoError(errno, "ring: eventfd");
  control_thread_ = std::thread([this] { ControlLoop(); });
  BC_LOG(Info, Shm, "ring: {} slots x {} bytes ({} MiB) at {}", h->num_slots, h->slot_bytes,
         total >> 20, DisplayAddress(config_.socket_name));
  return Status::Ok();
}

RingLeader::~RingLeader() {
  if (header_ != nullptr &&
      header_->stream_state.load() == static_cast<uint32_t>(StreamState::kRunning))
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
  if (header_ != nullptr) munmap(header_, mapped_bytes_);
  if (memfd_ >= 0) close(memfd_);
}

void RingLeader::SetLossHandler(LossHandler handler) {
  std::lock_guard<std::mutex> lock(mu_);
  loss_handler_ = std::move(handler);
}

MemberInfo RingLeader::InfoLocked(uint32_t id) const {
  const ConsumerEntry& e = header_->consumers[id];
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
  m.name = std::string(e.name, strnlen(e.name, sizeof(e.name)));
  return m;
}

std::vector<MemberInfo> RingLeader::Members() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<MemberInfo> out;
  for (uint32_t i = 0; i < kMaxConsumers; ++i)
    if (header_->consumers[i].state.load() != static_cast<uint32_t>(MemberState::kFree))
      out.push_back(InfoLocked(i));
  return out;
}

int RingLeader::CountMembers(MemberState state) const {
  int n = 0;
  for (uint32_t i = 0; i < kMaxConsumers; ++i)
    if (header_->consumers[i].state.load() == static_cast<uint32_t>(state)) ++n;
  return n;
}

std::vector<MemberInfo> RingLeader::Receivers(uint64_t seq) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<MemberInfo> out;
  for (uint32_t i = 0; i < kMaxConsumers; ++i) {
    const ConsumerEntry& e = header_->consumers[i];
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
  if (failed()) return UnavailableError("ring: {}", header_->failure);
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
      ConsumerEntry& e = header_->consumers[i];
      if (e.state.load() != static_cast<uint32_t>(MemberState::kJoining)) continue;
      e.start_seq.store(start_seq);
      e.position.store(start_seq);
      e.state.store(static_cast<uint32_t>(MemberState::kActive));
      ++admitted;
      BC_LOG(Info, Shm, "ring: admitted {} from position {}", InfoLocked(i).Describe(), start_seq);
    }
  }
  if (admitted > 0) {
    header_->member_futex.fetch_add(1);
    FutexWake(&header_->member_futex, INT32_MAX);
  }
  return admitted;
}

bool RingLeader::failed() const {
  return header_->stream_state.load() == static_cast<uint32_t>(StreamState::kFailed);
}

Result<SlotWrite> RingLeader::AcquireSlot(int64_t timeout_ms) {
  return AcquireSlotAt(next_seq_, timeout_ms);
}

Result<SlotWrite> RingLeader::AcquireSlotAt(uint64_t seq, int64_t timeout_ms) {
  SegmentHeader* h = header_;
  if (seq < next_seq_ || seq - next_seq_ >= h->num_slots)
    return InvalidArgumentError("ring: cannot acquire position {}: the next to publish is {} and "
                                "the ring has {} slots; acquire positions in order within the "
                                "ring", seq, next_seq_, h->num_slots);
  uint32_t slot = static_cast<uint32_t>(seq % h->num_slots);
  SlotHeader& s = Slots(h)[slot];
  int64_t deadline = timeout_ms < 0 ? -1 : MonotonicNs() + timeout_ms * 1000000LL;
  for (;;) {
    if (failed()) return UnavailableError("ring: {}", h->failure);
    uint32_t v = h->release_futex.load(std::memory_order_acquire);
    if (s.pending.load(std::memory_order_acquire) == 0) break;
    h->leader_waiting.store(1);
    if (s.pending.load(std::memory_order_acquire) == 0) {
      h->leader_waiting.store(0);
      break;
    }
    int64_t wait = 200 * 1000000LL;  // wake now and then to notice failures
    if (deadline >= 0) {
      int64_t left = deadline - MonotonicNs();
      if (left <= 0) {
        h->leader_waiting.store(0);
        return DeadlineExceededError("ring: slot {} still held by consumers after {} ms", slot,
                                     timeout_ms);
      }
      wait = std::min(wait, left);
    }
    FutexWait(&h->release_futex, v, wait);
    h->leader_waiting.store(0);
  }
  SlotWrite w;
  w.seq = seq;
  w.slot = slot;
  w.data = SlotData(h, slot);
  w.capacity = h->slot_bytes;
  w.desc = &s.desc;
  std::memset(w.desc, 0, sizeof(SlotDesc));
  w.desc->seq = seq;
  return w;
}

uint64_t RingLeader::Publish(const SlotWrite& w, uint64_t only) {
  SegmentHeader* h = header_;
  SlotHeader& s = Slots(h)[w.slot];
  w.desc->publish_ns = MonotonicNs();
  uint64_t mask = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (uint32_t i = 0; i < kMaxConsumers; ++i) {
      const ConsumerEntry& e = h->consumers[i];
      if (e.state.load() == static_cast<uint32_t>(MemberState::kActive) &&
          e.start_seq.load() <= w.seq)
        mask |= 1ULL << i;
    }
    mask &= only;
    s.pending.store(mask, std::memory_order_relaxed);
    s.seq.store(w.seq, std::memory_order_relaxed);
    h->published.store(w.seq + 1, std::memory_order_release);
  }
  ++next_seq_;
  WakeConsumers();
  return mask;
}

int RingLeader::OccupiedSlots() const {
  int n = 0;
  SlotHeader* slots = Slots(header_);
  for (uint32_t i = 0; i < header_->num_slots; ++i)
    if (slots[i].pending.load(std::memory_order_relaxed) != 0) ++n;
  return n;
}

void RingLeader::WakeConsumers() {
  header_->publish_futex.fetch_add(1, std::memory_order_release);
  if (header_->consumer_waiters.load() > 0) FutexWake(&header_->publish_futex, INT32_MAX);
}

void RingLeader::End() {
  uint32_t running = static_cast<uint32_t>(StreamState::kRunning);
  header_->stream_state.compare_exchange_strong(running, static_cast<uint32_t>(StreamState::kEnded));
  WakeConsumers();
  joined_cv_.notify_all();
}

void RingLeader::Fail(const std::string& message) {
  {
    static std::mutex fail_mu;
    std::lock_guard<std::mutex> lock(fail_mu);
    if (header_->stream_state.load() != static_cast<uint32_t>(StreamState::kRunning)) return;
    std::snprintf(header_->failure, sizeof(header_->failure), "%s", message.c_str());
    header_->stream_state.store(static_cast<uint32_t>(StreamState::kFailed));
  }
  BC_LOG(Error, Shm, "ring: stream failed: {}", message);
  WakeConsumers();
  header_->release_futex.fetch_add(1);
  FutexWake(&header_->release_futex, INT32_MAX);
  joined_cv_.notify_all();
}

}  // namespace batchcast::shm
