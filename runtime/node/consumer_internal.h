// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// Runtime-internal hooks into a Consumer (not part of the public API).
#pragma once

#include <functional>
#include <memory>

#include "batchcast/consumer.h"

namespace batchcast::telemetry {
class Collector;
}
namespace batchcast::shm {
struct SegmentView;
}

namespace batchcast::internal {

struct ConsumerAccess {
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
};

}  // namespace batchcast::internal
