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

uint64_t Admission::AdmitJoiners(uint64_t seq, int64_t k, int64_t bpe) {
  if (!HasJoiners()) return 0;
  const bool now = k == 0 || policy_.join_mid_epoch;
  return ring_->AdmitJoiningMask(now ? seq : seq + uint64_t(bpe - k));
}

Settled Admission::Settle(int64_t k, int64_t bpe) {
  const uint64_t seq = ring_->next_seq();
  if (k == 0) ring_->AdmitJoiningMask(seq);
  const uint64_t joining = MaskOf(shm::MemberState::kJoining);
  const uint64_t active = MaskOf(shm::MemberState::kActive);
  if (joining == 0 && active == 0) return {Step::kIdle, 0};
  if (ring_->ReceiverMask(seq) == 0) {
    // Only joiners, or members waiting for a later epoch: skip ahead (no decode) so that a
    // newcomer to an idle stream starts at once with a full epoch.
    return {Step::kSkip, 0};
  }
  if (joining != 0 && k > 0) {
    if (k <= LateJoinWindow(policy_.late_join_window, bpe, policy_.ring_slots)) {
      const uint64_t got = ring_->AdmitJoiningMask(seq, joining);
      if (got != 0) {
        late_joins_ += __builtin_popcountll(got);
        return {Step::kReplay, got};
      }
    } else {
      AdmitJoiners(seq, k, bpe);
    }
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
