// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "producer/epoch_loop.h"

#include "core/errors.h"
#include "core/log.h"

namespace batchcast::producer {

AcquireWait InterruptOnJoin(const Admission& admission, const std::atomic<bool>* stop) {
  AcquireWait wait;
  wait.poll_ms = [] { return int64_t(200); };
  wait.on_timeout = [&admission, stop]() -> Result<bool> {
    return admission.HasJoiners() || (stop != nullptr && stop->load());
  };
  return wait;
}

namespace {

// Replays batches [r.first, r.end) of r.epoch to r.to alone (nothing when r.to is 0), while
// that consumer is still there: a replay to one that left would only wait for the others.
Status ReplayToResumer(const Admission& admission, const EpochPolicy& policy,
                       const ResumeReplay& r) {
  for (int64_t j = r.first; r.to != 0 && j < r.end && admission.StillAddressed(r); ++j)
    BC_RETURN_IF_ERROR(policy.replay(r.epoch, j, r.to, r.catch_up).status());
  return Status::Ok();
}

bool More(const EpochPolicy& policy, int64_t k, int64_t bpe) {
  return bpe >= 0 ? k < bpe : !(k > policy.first && policy.epoch_ended());
}

}  // namespace

Status RunEpochPositions(Admission& admission, uint64_t e, int64_t bpe, const EpochPolicy& policy,
                         bool* ended) {
  *ended = false;
  int64_t k = policy.first;
  while (More(policy, k, bpe)) {
    BC_RETURN_IF_ERROR(policy.check_stop());
    if (policy.at_position) policy.at_position(k);
    if (policy.replay) {  // resumers behind the stream (SettleResumers), late joiners' catch-ups
      const ResumeReplay r = admission.SettleResumers(e, k, bpe);
      BC_RETURN_IF_ERROR(ReplayToResumer(admission, policy, r));
      if (r.to != 0) continue;  // settle again at the same k
      for (const ResumeReplay& chunk : admission.Interleave(bpe - k))  // between the stream's
        BC_RETURN_IF_ERROR(ReplayToResumer(admission, policy, chunk));
    }
    BC_ASSIGN_OR_RETURN(const Settled settled, policy.settle(k, bpe, policy.first));
    switch (settled.step) {
      case Step::kIdle:
        if (policy.idle(k)) {
          *ended = true;
          return Status::Ok();
        }
        continue;
      case Step::kEnd:
        *ended = true;
        return Status::Ok();
      case Step::kSkip:  // only members waiting for a later epoch
        BC_RETURN_IF_ERROR(policy.skip(k));
        ++k;
        continue;
      case Step::kReplay:
        BC_LOG(Info, Node, "{}: late join at epoch {} batch {}: replaying {} batches to consumers "
               "0x{:x} while the others wait", policy.who, e, k, k - policy.first,
               settled.replay_to);
        for (int64_t j = policy.first;
             j < k && (admission.MaskOf(shm::MemberState::kActive) & settled.replay_to) != 0; ++j)
          BC_RETURN_IF_ERROR(policy.produce(j, settled.replay_to, AcquireWait{}, -1).status());
        continue;  // settle membership again at the same k
      case Step::kCatchUp:  // their first replayed batches (Interleave) come before k
        continue;
      case Step::kProduce:
        break;
    }
    const int64_t next_k = bpe < 0 || k + 1 < bpe ? k + 1 : -1;
    BC_ASSIGN_OR_RETURN(std::optional<uint64_t> receivers,
                        policy.produce(k, admission.SharedMask(), policy.wait, next_k));
    if (!receivers) continue;  // a joiner arrived while every slot was held: settle it first
    ++k;
  }
  if (policy.replay) {
    // Resumers that joined while the epoch's last position went out are settled now, at its
    // end (a stream that ends here would otherwise end without them).
    if (bpe >= 0)
      for (ResumeReplay r = admission.SettleResumers(e, bpe, bpe); r.to != 0;
           r = admission.SettleResumers(e, bpe, bpe))
        BC_RETURN_IF_ERROR(ReplayToResumer(admission, policy, r));
    // Interleaved replays end with the epoch: their consumers join the stream's next one.
    for (const ResumeReplay& chunk : admission.Interleave(1))
      BC_RETURN_IF_ERROR(ReplayToResumer(admission, policy, chunk));
  }
  return policy.end_epoch();
}

}  // namespace batchcast::producer
