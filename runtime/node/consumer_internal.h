// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// Runtime-internal hooks into a Consumer (not part of the public API).
#pragma once

#include "batchcast/consumer.h"

namespace batchcast::telemetry {
class Collector;
}

namespace batchcast::internal {

struct ConsumerAccess {
  // Records this consumer's events into `collector` (not owned; must outlive the batches).
  static void SetCollector(Consumer& consumer, telemetry::Collector* collector);
};

}  // namespace batchcast::internal
