// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The one epoch loop of every producer (producer::Producer runs it for every front door):
// before each position membership is settled (the distribution's Settle: late joiners
// admitted, a replay to them alone, or the position skipped when nobody receives it), then
// the position is produced for its receivers. Resuming consumers behind the stream get their
// positions replayed (Admission::SettleResumers) when the feed can make them again, and so do
// late joiners caught up with an epoch of their own (Admission::Settle). The
// producer supplies what a position holds and who receives it (`produce`), and what it does
// when nobody is attached (`idle`).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "batchcast/status.h"
#include "producer/admission.h"
#include "producer/slot_writer.h"

namespace batchcast::producer {

struct EpochPolicy {
  std::string who;  // "leader", "batchcast serve": log prefix
  // Membership before position k of an epoch of bpe positions (-1: unknown), first the
  // epoch's first position (a resumed stream starts mid-epoch).
  std::function<Result<Settled>(int64_t k, int64_t bpe, int64_t first)> settle;
  // Produces position k for the consumers in `only`, waiting for a slot with `wait` (nullopt:
  // the wait was interrupted). next_k >= 0: the position that most likely comes next (to fill
  // ahead); -1 for replays and the epoch's last position.
  std::function<Result<std::optional<uint64_t>>(int64_t k, uint64_t only,
                                                 const AcquireWait& wait, int64_t next_k)>
      produce;
  // Publishes position k to nobody (only joiners waiting for a later epoch).
  std::function<Status(int64_t k)> skip;
  // Nobody is attached or joining: true ends the stream, false goes on (after waiting for a
  // consumer).
  std::function<bool(int64_t k)> idle;
  // Non-ok stops the epoch with that status (checked before every position).
  std::function<Status()> check_stop;
  // Optional: produces batch k of any `epoch` again for the consumers in `only` (a resuming
  // joiner's replay, Admission::SettleResumers; with catch_up, a late joiner's own epoch,
  // Admission::Settle).
  std::function<Result<std::optional<uint64_t>>(uint64_t epoch, int64_t k, uint64_t only,
                                                 bool catch_up)>
      replay;
  // Optional: told the position about to be settled (status displays).
  std::function<void(int64_t k)> at_position;
  // With bpe -1: whether the position produced last ended the epoch.
  std::function<bool()> epoch_ended;
  // At the end of the epoch: an epoch without a good sample is an error, not a wait.
  std::function<Status()> end_epoch;
  // The wait of the positions produced for everyone (InterruptOnJoin).
  AcquireWait wait;
  // The first position (a resumed stream starts mid-epoch).
  int64_t first = 0;
};

// Runs the positions of `epoch` (bpe of them, or until policy.epoch_ended() with bpe -1).
// *ended: the stream ended (idle said so, or the distribution ended it).
Status RunEpochPositions(Admission& admission, uint64_t epoch, int64_t bpe,
                         const EpochPolicy& policy, bool* ended);

// A wait for a slot that wakes every 200 ms and gives up when a consumer is joining (so that
// a joiner is admitted even while the others hold every slot) or `stop` is set.
AcquireWait InterruptOnJoin(const Admission& admission, const std::atomic<bool>* stop = nullptr);

}  // namespace batchcast::producer
