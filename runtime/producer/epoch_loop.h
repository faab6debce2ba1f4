// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The positions of one epoch, for producers that publish a replayable stream (node::Leader,
// node::Service): before each position membership is settled (Admission::Settle), then the
// position is produced, skipped (nobody receives it: no decode), replayed to late joiners,
// or the producer idles. The producer supplies only what a position holds (`produce`) and
// what it does when nobody is attached (`idle`).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "batchcast/status.h"
#include "producer/admission.h"
#include "producer/slot_writer.h"

namespace batchcast::producer {

struct EpochPolicy {
  std::string who;  // "leader", "service": log prefix
  // Produces position k of the epoch for the consumers in `only` through the writer, waiting
  // for a slot with `wait` (Produce gives nullopt when it was interrupted). next_k >= 0: the
  // position that most likely comes next, to start filling ahead (SlotWriter::Produce's
  // `next`); -1 for replays and the epoch's last position.
  std::function<Result<std::optional<uint64_t>>(int64_t k, uint64_t only,
                                                 const AcquireWait& wait, int64_t next_k)>
      produce;
  // Nobody is attached or joining: true ends the stream, false goes on (after waiting for a
  // consumer).
  std::function<bool(int64_t k)> idle;
  // Non-ok stops the epoch with that status (checked before every position).
  std::function<Status()> check_stop;
  // Optional, with AdmissionPolicy::replay_resume: produces batch k of any `epoch` again for
  // the consumers in `only` (a resuming joiner's replay, Admission::SettleResumers).
  std::function<Result<std::optional<uint64_t>>(uint64_t epoch, int64_t k, uint64_t only)>
      replay;
  // Optional: told the position about to be settled (status displays).
  std::function<void(int64_t k)> at_position;
  // The first position (a resumed stream starts mid-epoch; late joiners' replays too).
  int64_t first = 0;
};

struct EpochCounts {
  int64_t replayed_batches = 0;  // late-join replays
  int64_t resume_replayed = 0;   // batches replayed to resuming joiners alone
  int64_t produced = 0;          // positions produced for everyone
};

// Runs the bpe positions of `epoch`. *ended: the stream ended (idle said so).
Status RunEpochPositions(SlotWriter& writer, Admission& admission, uint64_t epoch, int64_t bpe,
                         const EpochPolicy& policy, EpochCounts* counts, bool* ended);

// A wait for a slot that wakes every 200 ms and gives up when a consumer is joining, so that
// a joiner is admitted even while the others hold every slot.
AcquireWait InterruptOnJoin(const Admission& admission);

}  // namespace batchcast::producer
