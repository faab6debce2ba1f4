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
//   - immediately, mid-epoch, with join_mid_epoch.
// W is at least the ring depth in batches and never 0 (LateJoinWindow). Producers whose
// batches cannot be replayed (batches made by the caller, batches exchanged across nodes)
// run with no window: their joiners start at the next epoch.
#pragma once

#include <atomic>
#include <cstdint>
#include <string_view>

#include "batchcast/status.h"
#include "transport/shm/ring_leader.h"

namespace batchcast::producer {

// The late-join window in producer batches: `fraction` of an epoch of batches_per_epoch,
// rounded up, and at least the ring's depth (ring_slots) and 1: a trainer that attaches a
// moment after the first is always caught up. At most the epoch.
int64_t LateJoinWindow(double fraction, int64_t batches_per_epoch, uint32_t ring_slots);

struct AdmissionPolicy {
  double late_join_window = 0.02;  // fraction of an epoch; LateJoinWindow() makes it batches
  uint32_t ring_slots = 0;         // the ring's depth: the smallest window
  bool join_mid_epoch = false;     // joiners after the window start at once, mid-epoch
};

// What to do at a position of the epoch once membership is settled.
enum class Step {
  kProduce,  // produce it for everyone admitted
  kSkip,     // nobody receives it (only members waiting for a later epoch): publish it empty
  kIdle,     // nobody is attached or joining
  kReplay,   // replay positions [0, k) of the epoch to `replay_to` alone, then settle again
};

struct Settled {
  Step step = Step::kProduce;
  uint64_t replay_to = 0;  // kReplay: the member bits of the consumers caught up
};

class Admission {
 public:
  Admission(shm::RingLeader* ring, const AdmissionPolicy& policy) : ring_(ring), policy_(policy) {}

  // Settles membership before position k of an epoch of bpe producer batches, which will be
  // published at ring position next_seq(): admits every joiner (at once; where it starts
  // follows the policy: replay within LateJoinWindow(), else the next epoch) and says what
  // to do.
  Settled Settle(int64_t k, int64_t bpe);
  // Admits every joiner without replay: at `seq` when k is the epoch's first position (or
  // join_mid_epoch), else at the next epoch start, seq + bpe - k. For producers that publish
  // every position in order (`seq` is where position k of the epoch will be published).
  uint64_t AdmitJoiners(uint64_t seq, int64_t k, int64_t bpe);

  // Member bits of the consumers in `state`.
  uint64_t MaskOf(shm::MemberState state) const;
  bool HasJoiners() const { return ring_->CountMembers(shm::MemberState::kJoining) > 0; }
  // Consumers attached: active or joining.
  int Attached() const;
  // Blocks until a consumer is attached or joining, `stop` is set or the ring fails.
  void WaitForMembers(const std::atomic<bool>& stop);

  const AdmissionPolicy& policy() const { return policy_; }
  int64_t late_joins() const { return late_joins_; }  // consumers caught up by a replay

 private:
  shm::RingLeader* ring_;
  AdmissionPolicy policy_;
  int64_t late_joins_ = 0;
};

// Blocks until no consumer is attached, or fails after timeout_ms (naming `who`).
Status WaitUntilEmpty(shm::RingLeader& ring, int64_t timeout_ms, std::string_view who);

}  // namespace batchcast::producer
