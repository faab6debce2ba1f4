// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Membership and admission, one implementation for every producer (docs/data-plane.md
// "Late join"). A consumer that joins is admitted at once (it stops being a joiner, so it
// never waits on an admission deadline) and receives its first batch
//   - at the next epoch start, or
//   - immediately, when it joins within the late-join window of an epoch (the first W
//     producer batches): the epoch's start is replayed to it alone by targeted publishes
//     while the others wait (the stream is a pure function of (seed, epoch, position), so
//     the replay is byte-identical), then everyone continues together, exactly once, or
//   - immediately, mid-epoch, with join_mid_epoch, or
//   - immediately, after the window, with an epoch of its own (catch-up, option
//     late_join_catch_ups): the stream's current epoch is replayed to it alone between the
//     stream's batches, as a resume from an earlier epoch is (SettleResumers), and it joins
//     the stream at its next epoch. At most that many catch up at once; a joiner beyond
//     them is deferred to the next epoch.
// W is at least the ring depth in batches and never 0 (LateJoinWindow). Producers whose
// batches cannot be replayed (batches made by the caller, batches exchanged across nodes)
// run with no window: their joiners start at the next epoch.
#pragma once

#include <atomic>
#include <cstdint>
#include <string_view>
#include <vector>

#include "batchcast/status.h"
#include "transport/shm/ring_leader.h"

namespace batchcast::producer {

// The late-join window in producer batches: `fraction` of an epoch of batches_per_epoch,
// rounded up, and at least the ring's depth (ring_slots) and 1: a trainer that attaches a
// moment after the first is always caught up. At most the epoch. An epoch of unknown length
// (batches_per_epoch < 0: an external iterable) has the ring's depth.
int64_t LateJoinWindow(double fraction, int64_t batches_per_epoch, uint32_t ring_slots);

struct AdmissionPolicy {
  double late_join_window = 0.02;  // fraction of an epoch; LateJoinWindow() makes it batches
  uint32_t ring_slots = 0;         // the ring's depth: the smallest window
  bool replay = true;              // late joiners within the window get a replay (else: next epoch)
  bool join_mid_epoch = false;     // joiners after the window start at once, mid-epoch
  // Joiners that resume (their join names a position, shm::MemberInfo::resumes) are settled
  // by SettleResumers: a position the stream has passed is replayed to them alone. Needs a
  // feed that can produce any position of any epoch again (Replay::kAny), and its producer
  // batch (a resume sample -> its producer batch).
  bool replay_resume = false;
  int64_t producer_batch = 0;
  // Joiners after the window caught up at once, each with an epoch of its own (option
  // late_join_catch_ups; 0: none). Needs a feed that can make any position of the current
  // epoch again and an epoch of known length.
  int catch_ups = 0;
};

// A replay to one resuming joiner: producer batches [first, end) of `epoch`, published to
// `to` alone (the member bit of the consumer of that `generation`). to == 0: nothing.
// catch_up: a late joiner's own epoch (Settle), else a resume (SettleResumers).
struct ResumeReplay {
  uint64_t to = 0;
  uint64_t generation = 0;
  uint64_t epoch = 0;
  int64_t first = 0, end = 0;
  bool catch_up = false;
};

// What to do at a position of the epoch once membership is settled.
enum class Step {
  kProduce,  // produce it for everyone admitted
  kSkip,     // nobody receives it (only members waiting for a later epoch): publish it empty
  kIdle,     // nobody is attached or joining
  kReplay,   // replay positions [0, k) of the epoch to `replay_to` alone, then settle again
  kCatchUp,  // late joiners `replay_to` catch up (their epochs are queued): settle again, so
             // that their first replayed batches go out before position k
  kEnd,      // the stream ends here (the distribution decided: no consumer on any node)
};

struct Settled {
  Step step = Step::kProduce;
  uint64_t replay_to = 0;  // kReplay: the member bits of the consumers caught up
};

class Admission {
 public:
  Admission(shm::RingLeader* ring, const AdmissionPolicy& policy) : ring_(ring), policy_(policy) {}

  // The stream begins epoch `epoch` of bpe producer batches (< 0: unknown): what a catch-up
  // replays.
  void BeginEpoch(uint64_t epoch, int64_t bpe) {
    epoch_ = epoch;
    epoch_positions_ = bpe;
  }
  // Settles membership before position k of an epoch of bpe producer batches, which will be
  // published at ring position next_seq(): admits every joiner (at once; where it starts
  // follows the policy: replay within LateJoinWindow(), else a catch-up while fewer than
  // policy.catch_ups run, else the next epoch) and says what to do. With bpe < 0 (unknown) a
  // joiner after the window waits, joining, for the next epoch start. (k and bpe count from
  // the epoch's first position: a resumed stream starts mid-epoch.)
  Settled Settle(int64_t k, int64_t bpe);
  // With policy.replay_resume, before Settle: admits the joiners that resume at once (one
  // ahead of the stream skips to its position) and settles those behind it (the stream is
  // at position k of `epoch`, of bpe producer batches, k0 the joiner's producer batch):
  //   - in the stream's epoch: returned, to be replayed now (batches [k0, k)) while the
  //     others wait, as a late join's replay; then it goes on with everyone at k;
  //   - in an earlier epoch: the rest of its epoch, [k0, bpe), is queued and spread over the
  //     stream's remaining positions (Interleave), so the others are slowed, not stopped;
  //     SharedMask() leaves it out of the stream until the stream's next epoch start, where
  //     it joins everyone.
  // Call again at the same position until it returns nothing.
  ResumeReplay SettleResumers(uint64_t epoch, int64_t k, int64_t bpe);
  // The queued replays' share of the next position of the stream, with positions_left
  // positions of its epoch to go (counting this one): for each queued replay its next
  // ceil(left / positions_left) batches (1: everything left). Consumers that have left are
  // dropped.
  std::vector<ResumeReplay> Interleave(int64_t positions_left);
  // Whether the consumer a replay is for is still attached and addressed (the same one: its
  // generation): a replay to one that left is not made (it would wait for the others).
  bool StillAddressed(const ResumeReplay& r) const;
  // The `only` mask for a position of the shared stream: everyone admitted except resumers
  // waiting, after their replay, for the stream's next epoch.
  uint64_t SharedMask() const { return ~excluded_; }
  // Admits every joiner without replay: at `seq` when k is the epoch's first position (or
  // join_mid_epoch), else at the next epoch start, seq + bpe - k. For producers that publish
  // every position in order (`seq` is where position k of the epoch will be published).
  uint64_t AdmitJoiners(uint64_t seq, int64_t k, int64_t bpe, uint64_t ids = ~0ULL);

  // Member bits of the consumers in `state`.
  uint64_t MaskOf(shm::MemberState state) const;
  bool HasJoiners() const { return ring_->CountMembers(shm::MemberState::kJoining) > 0; }
  // Consumers attached: active or joining.
  int Attached() const;
  // Blocks until a consumer is attached or joining, `stop` is set or the ring fails.
  void WaitForMembers(const std::atomic<bool>& stop);

  // The epoch's length as its producer declares it, for the late-join window of an epoch whose
  // end it does not know (an iterable with a known number of samples); < 0: unknown.
  void SetDeclaredPositions(int64_t positions) { declared_ = positions; }
  // The late-join window (LateJoinWindow) of an epoch of bpe positions (< 0: the declared).
  int64_t Window(int64_t bpe) const {
    return LateJoinWindow(policy_.late_join_window, bpe >= 0 ? bpe : declared_, policy_.ring_slots);
  }

  const AdmissionPolicy& policy() const { return policy_; }
  int64_t late_joins() const { return late_joins_; }  // consumers caught up by a replay
  int64_t resume_replays() const { return resume_replays_; }  // resumers replayed to
  int64_t catch_ups() const { return catch_ups_; }  // late joiners given an epoch of their own
  int64_t catch_up_deferrals() const { return deferrals_; }  // joiners deferred by the limit
  // Member bits of the consumers catching up (their epoch not yet replayed in full) and of
  // the joiners deferred to the next epoch by the limit.
  uint64_t CatchingUpMask() const { return catching_up_; }
  uint64_t DeferredMask() const { return deferred_; }

 private:
  // Member bits of the joining consumers that do (true) or do not (false) resume.
  uint64_t JoinerMask(bool resuming) const;
  static bool Addressed(const std::vector<shm::MemberInfo>& members, const ResumeReplay& r);
  // Catches up the joiners in `joining` (after the window, at ring position seq) while the
  // limit allows; returns those left, the deferred among them marked.
  uint64_t CatchUp(uint64_t seq, uint64_t joining);

  shm::RingLeader* ring_;
  AdmissionPolicy policy_;
  int64_t late_joins_ = 0;
  int64_t resume_replays_ = 0;
  uint64_t excluded_ = 0;  // replayed resumers waiting for the stream's next epoch
  int64_t declared_ = -1;
  std::vector<ResumeReplay> queued_;  // interleaved replays: first = the next batch
  uint64_t epoch_ = 0;            // BeginEpoch
  int64_t epoch_positions_ = -1;  // BeginEpoch: the whole epoch's producer batches
  int64_t catch_ups_ = 0, deferrals_ = 0;
  uint64_t deferred_ = 0;  // joiners deferred to the next epoch by the catch-up limit
  uint64_t catching_up_ = 0;  // late joiners receiving their own epoch (until the next)
};

// Blocks until no consumer is attached, or fails after timeout_ms (naming `who`).
Status WaitUntilEmpty(shm::RingLeader& ring, int64_t timeout_ms, std::string_view who);

}  // namespace batchcast::producer
