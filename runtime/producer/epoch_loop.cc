// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "producer/epoch_loop.h"

#include "core/errors.h"
#include "core/log.h"

namespace batchcast::producer {

AcquireWait InterruptOnJoin(const Admission& admission) {
  AcquireWait wait;
  wait.poll_ms = [] { return int64_t(200); };
  wait.on_timeout = [&admission]() -> Result<bool> { return admission.HasJoiners(); };
  return wait;
}

namespace {

// Replays batches [r.first, r.end) of r.epoch to r.to alone (nothing when r.to is 0).
Status ReplayToResumer(const EpochPolicy& policy, const ResumeReplay& r, EpochCounts* counts) {
  for (int64_t j = r.first; r.to != 0 && j < r.end; ++j) {
    BC_RETURN_IF_ERROR(policy.replay(r.epoch, j, r.to).status());
    counts->resume_replayed += 1;
  }
  return Status::Ok();
}

}  // namespace

Status RunEpochPositions(SlotWriter& writer, Admission& admission, uint64_t e, int64_t bpe,
                         const EpochPolicy& policy, EpochCounts* counts, bool* ended) {
  *ended = false;
  const AcquireWait interruptible = InterruptOnJoin(admission);
  int64_t k = policy.first;
  while (k < bpe) {
    BC_RETURN_IF_ERROR(policy.check_stop());
    if (policy.at_position) policy.at_position(k);
    if (policy.replay) {  // resuming joiners behind the stream (Admission::SettleResumers)
      const ResumeReplay r = admission.SettleResumers(e, k, bpe);
      BC_RETURN_IF_ERROR(ReplayToResumer(policy, r, counts));
      if (r.to != 0) continue;  // settle again at the same k
      for (const ResumeReplay& chunk : admission.Interleave(bpe - k))  // between the stream's
        BC_RETURN_IF_ERROR(ReplayToResumer(policy, chunk, counts));
    }
    // A stream that starts mid-epoch (resume) admits its first joiners at its first position.
    const Settled settled = admission.Settle(k - policy.first, bpe - policy.first);
    switch (settled.step) {
      case Step::kIdle:
        if (policy.idle(k)) {
          *ended = true;
          return Status::Ok();
        }
        continue;
      case Step::kSkip:  // only members waiting for a later epoch
        BC_RETURN_IF_ERROR(writer.PublishEmpty(e, k));
        ++k;
        continue;
      case Step::kReplay:
        BC_LOG(Info, Node, "{}: late join at epoch {} batch {}: replaying {} batches to consumers "
               "0x{:x} while the others wait", policy.who, e, k, k - policy.first,
               settled.replay_to);
        for (int64_t j = policy.first; j < k; ++j) {
          BC_RETURN_IF_ERROR(policy.produce(j, settled.replay_to, AcquireWait{}, -1).status());
          counts->replayed_batches += 1;
        }
        continue;  // settle membership again at the same k
      case Step::kProduce:
        break;
    }
    const int64_t next_k = k + 1 < bpe ? k + 1 : -1;
    BC_ASSIGN_OR_RETURN(std::optional<uint64_t> receivers,
                        policy.produce(k, admission.SharedMask(), interruptible, next_k));
    if (!receivers) continue;  // a joiner arrived while every slot was held: settle it first
    counts->produced += 1;
    ++k;
  }
  // Interleaved replays end with the epoch: their consumers join the stream's next one.
  for (const ResumeReplay& chunk : admission.Interleave(1))
    BC_RETURN_IF_ERROR(ReplayToResumer(policy, chunk, counts));
  return writer.EndEpoch(e);  // an epoch without a good sample is an error, not a wait
}

}  // namespace batchcast::producer
