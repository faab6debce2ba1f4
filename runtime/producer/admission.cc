// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "producer/admission.h"

#include <algorithm>
#include <cmath>

#include "core/errors.h"
#include "core/log.h"
#include "producer/ring_access.h"
#include "transport/shm/futex.h"

namespace batchcast::producer {

int64_t LateJoinWindow(double fraction, int64_t batches_per_epoch, uint32_t ring_slots) {
  if (batches_per_epoch < 0) return std::max<int64_t>(1, ring_slots);
  const double f = std::clamp(fraction, 0.0, 1.0);
  const auto by_fraction = static_cast<int64_t>(std::ceil(f * double(batches_per_epoch)));
  const int64_t w = std::max<int64_t>({by_fraction, int64_t(ring_slots), 1});
  return std::max<int64_t>(1, std::min(w, batches_per_epoch));
}

uint64_t Admission::MaskOf(shm::MemberState state) const { return ring_->MemberMask(state); }

int Admission::Attached() const {
  return ring_->CountMembers(shm::MemberState::kActive) +
         ring_->CountMembers(shm::MemberState::kJoining);
}

uint64_t Admission::AdmitJoiners(uint64_t seq, int64_t k, int64_t bpe, uint64_t ids) {
  if (!HasJoiners()) return 0;
  const bool now = k == 0 || policy_.join_mid_epoch;
  return ring_->AdmitJoiningMask(now ? seq : seq + uint64_t(bpe - k), ids);
}

uint64_t Admission::JoinerMask(bool resuming) const {
  uint64_t mask = 0;
  for (const shm::MemberInfo& m : ring_->Members())
    if (m.state == shm::MemberState::kJoining && m.resumes == resuming)
      mask |= shm::RingLeader::MemberBit(m.id);
  return mask;
}

ResumeReplay Admission::SettleResumers(uint64_t epoch, int64_t k, int64_t bpe) {
  if (!policy_.replay_resume) return {};
  if (k == 0 && queued_.empty()) excluded_ = 0;  // the stream's next epoch: theirs too
  excluded_ &= MaskOf(shm::MemberState::kActive);
  if (!HasJoiners()) return {};  // one joining after this is settled at the next position
  const uint64_t seq = ring_->next_seq();
  for (const shm::MemberInfo& m : ring_->Members()) {
    if (m.state != shm::MemberState::kJoining || !m.resumes) continue;
    const auto p = static_cast<uint64_t>(std::max<int64_t>(1, policy_.producer_batch));
    // resume_sample is the consumer's word: at most the epoch's end (a huge value would turn
    // negative as int64_t and count as behind).
    const int64_t first =
        static_cast<int64_t>(std::min<uint64_t>(static_cast<uint64_t>(bpe), m.resume_sample / p));
    const bool behind = m.resume_epoch < epoch || (m.resume_epoch == epoch && first < k);
    // At once: ahead of the stream it skips to its position; behind, the replay comes first.
    const uint64_t got = ring_->AdmitJoiningMask(seq, shm::RingLeader::MemberBit(m.id));
    if (got == 0 || !behind) continue;
    resume_replays_ += 1;
    ResumeReplay r{got, m.generation, m.resume_epoch, first, bpe};
    const bool now = m.resume_epoch == epoch;
    if (now) r.end = k;
    BC_LOG(Info, Node, "{} resumes at epoch {} batch {} but the stream is at epoch {} batch {}: "
           "replaying producer batches {}..{} of epoch {} to it alone, {}", m.Describe(),
           m.resume_epoch, first, epoch, k, r.first, r.end - 1, r.epoch,
           now ? "now (the others wait)"
               : "between the stream's batches; it joins the stream at its next epoch");
    if (now) return r;
    excluded_ |= got;
    queued_.push_back(r);
  }
  return {};
}

bool Admission::Addressed(const std::vector<shm::MemberInfo>& members, const ResumeReplay& r) {
  for (const shm::MemberInfo& m : members)
    if (shm::RingLeader::MemberBit(m.id) == r.to && m.generation == r.generation &&
        m.state == shm::MemberState::kActive)
      return true;
  return false;
}

bool Admission::StillAddressed(const ResumeReplay& r) const {
  return Addressed(ring_->Members(), r);
}

std::vector<ResumeReplay> Admission::Interleave(int64_t positions_left) {
  std::vector<ResumeReplay> out;
  if (queued_.empty()) return out;
  const std::vector<shm::MemberInfo> members = ring_->Members();
  for (auto it = queued_.begin(); it != queued_.end();) {
    const bool here = Addressed(members, *it);
    const int64_t left = it->end - it->first;
    if (!here || left <= 0) {
      it = queued_.erase(it);
      continue;
    }
    const int64_t n = (left + std::max<int64_t>(1, positions_left) - 1) /
                      std::max<int64_t>(1, positions_left);
    ResumeReplay chunk = *it;
    chunk.end = chunk.first + n;
    out.push_back(chunk);
    it->first += n;
    it = it->first >= it->end ? queued_.erase(it) : it + 1;
  }
  return out;
}

uint64_t Admission::CatchUp(uint64_t seq, uint64_t joining) {
  if (policy_.catch_ups <= 0 || policy_.join_mid_epoch || epoch_positions_ <= 0) return joining;
  for (const shm::MemberInfo& m : ring_->Members()) {
    const uint64_t bit = shm::RingLeader::MemberBit(m.id);
    if (m.state != shm::MemberState::kJoining || (joining & bit) == 0) continue;
    if ((deferred_ & bit) != 0) continue;  // deferred once: it starts at the next epoch
    const auto running = std::count_if(queued_.begin(), queued_.end(),
                                       [](const ResumeReplay& r) { return r.catch_up; });
    if (running >= policy_.catch_ups) {  // deferred: it starts at the next epoch
      deferred_ |= bit;
      deferrals_ += 1;
      BC_LOG(Info, Node, "{} joined after the late-join window at epoch {}; {} late joiner(s) "
             "are catching up already (late_join_catch_ups={}): it starts at the next epoch",
             m.Describe(), epoch_, running, policy_.catch_ups);
      continue;
    }
    const uint64_t got = ring_->AdmitJoiningMask(seq, bit);
    if (got == 0) continue;
    joining &= ~got;
    catch_ups_ += 1;
    excluded_ |= got;
    catching_up_ |= got;
    queued_.push_back({got, m.generation, epoch_, 0, epoch_positions_, true});
    BC_LOG(Info, Node, "{} joined after the late-join window: catching it up with an epoch of "
           "its own, producer batches 0..{} of epoch {} replayed to it alone between the "
           "stream's batches; it joins the stream at its next epoch", m.Describe(),
           epoch_positions_ - 1, epoch_);
  }
  return joining;
}

Settled Admission::Settle(int64_t k, int64_t bpe) {
  const uint64_t seq = ring_->next_seq();
  if (k == 0) {  // the stream's next epoch: the deferred start, the caught up join it
    deferred_ = catching_up_ = 0;
    if (queued_.empty()) excluded_ = 0;
  }
  excluded_ &= MaskOf(shm::MemberState::kActive);
  catching_up_ &= MaskOf(shm::MemberState::kActive);
  deferred_ &= MaskOf(shm::MemberState::kJoining);  // deferred joiners join at k == 0
  // Resuming joiners are SettleResumers' (an id not seen joining yet is left for later).
  const uint64_t plain = policy_.replay_resume ? JoinerMask(false) : ~0ULL;
  if (k == 0) ring_->AdmitJoiningMask(seq, plain);
  const uint64_t joining = MaskOf(shm::MemberState::kJoining) & plain;
  const uint64_t active = MaskOf(shm::MemberState::kActive);
  if (joining == 0 && active == 0 && !HasJoiners()) return {Step::kIdle, 0};
  if ((ring_->ReceiverMask(seq) & ~excluded_) == 0) {
    // Only joiners, or members waiting for a later epoch: skip ahead (no decode) so that a
    // newcomer to an idle stream starts at once with a full epoch.
    return {Step::kSkip, 0};
  }
  if (joining != 0 && k > 0) {
    if (policy_.replay && k <= Window(bpe)) {
      const uint64_t got = ring_->AdmitJoiningMask(seq, joining);
      if (got != 0) {
        late_joins_ += __builtin_popcountll(got);
        return {Step::kReplay, got};
      }
    } else if (bpe >= 0 || policy_.join_mid_epoch) {
      // A catch-up while the limit allows; the rest start at the next epoch (or mid-epoch).
      // With replays between the stream's batches the next epoch's first ring position is
      // not known yet: those stay joining until it (k == 0 admits them).
      const uint64_t left = bpe >= 0 ? CatchUp(seq, joining) : joining;
      if (left != 0 && (policy_.join_mid_epoch || queued_.empty()))
        AdmitJoiners(seq, k, bpe, left);
      if ((joining & ~left) != 0) return {Step::kCatchUp, joining & ~left};
    }  // else: the epoch's end is not known yet; admitted at the next epoch's start
  }
  return {Step::kProduce, 0};
}

void Admission::WaitForMembers(const std::atomic<bool>& stop) {
  // Woken by a join (or the stream failing); no polling while idle.
  while (!stop.load() && Attached() == 0) {
    Status st = ring_->WaitForJoined(1, 3600 * 1000);
    if (st.code() == StatusCode::kUnavailable) break;
  }
}

Status WaitUntilEmpty(shm::RingLeader& ring, int64_t timeout_ms, std::string_view who) {
  const int64_t deadline = shm::MonotonicNs() + timeout_ms * 1000000LL;
  auto attached = [&ring] {
    return ring.CountMembers(shm::MemberState::kActive) +
           ring.CountMembers(shm::MemberState::kJoining);
  };
  std::atomic<uint32_t>* word = RingMemberWord(ring);
  while (attached() > 0) {
    if (shm::MonotonicNs() > deadline)
      return DeadlineExceededError("{}: consumers still attached after {} ms", who, timeout_ms);
    // Membership changes bump the member word; wait on it instead of polling hard.
    const uint32_t v = word->load();
    if (attached() == 0) break;
    shm::FutexWait(word, v, 100000000LL);
  }
  return Status::Ok();
}

}  // namespace batchcast::producer
