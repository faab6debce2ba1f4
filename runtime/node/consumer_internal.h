// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// Runtime-internal hooks into a Consumer (not part of the public API).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "batchcast/consumer.h"

namespace batchcast::telemetry {
class Collector;
}
namespace batchcast::shm {
struct SegmentView;
}

namespace batchcast::internal {

struct ConsumerAccess {
  // Consumer::Attach; with `loop_holds_batch` the consumer may hold one batch beyond
  // options.buffer_depth while it asks for the next (the Python consumer's
  // release="on_free": a `for` loop's variables keep the previous batch until the next is
  // fetched). The leader reserves that slot too (shm::kLoopHoldsBatch) and checks
  // buffer_depth itself against its range, so the number means what the user set.
  static Result<std::unique_ptr<Consumer>> Attach(const std::string& address,
                                                  const Options& options, int rank,
                                                  const std::string& name,
                                                  bool loop_holds_batch);
  // Records this consumer's events into `collector` (not owned; must outlive the batches).
  static void SetCollector(Consumer& consumer, telemetry::Collector* collector);
  static telemetry::Collector* GetCollector(const Consumer& consumer);
  // Keeps `owned` (a producer::ProcessTelemetry) alive as long as the consumer's state: it is
  // destroyed (and its files written) once the consumer and its last batch are gone.
  // `finish` (optional) writes them at Detach(), which returns its error.
  static void OwnTelemetry(Consumer& consumer, std::shared_ptr<void> owned,
                           std::function<Status()> finish = nullptr);
  // The mapped segments (GPU staging maps host view pointers to device slots with them).
  static const shm::SegmentView* Segment(const Consumer& consumer);
  // The device path maps slot memory only: refuses (FailedPrecondition, naming the fix) a
  // consumer whose exact carving joins batches in private host memory by construction
  // (batch_size not dividing the producer batch, pad_last, mode=shard). Skipped samples can
  // still make a joined batch at run time; ToDevice then fails with the same advice.
  static Status CheckDeviceCarving(const Consumer& consumer);
  // Resume (Python load_state_dict): moves a consumer that has not asked for a batch yet to
  // `position`, as if it had been attached with start_epoch / start_batch there. Refused
  // (FailedPrecondition, naming both positions and what to do) once a Next() has begun: a
  // shared stream does not rewind or jump for one consumer.
  static Status StartAt(Consumer& consumer, StreamPosition position);
  // True once the consumer has handed out its last batch: its epochs are complete, the
  // stream's last epoch is, or it was detached (a further Next() ends or fails).
  static bool Finished(const Consumer& consumer);
};

}  // namespace batchcast::internal
