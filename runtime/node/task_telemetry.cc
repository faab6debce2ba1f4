// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "node/task_telemetry.h"

#include "node/consumer_internal.h"

namespace batchcast::node {

void OwnTelemetry(Consumer& consumer, std::unique_ptr<producer::ProcessTelemetry> telemetry) {
  if (telemetry == nullptr) return;
  internal::ConsumerAccess::SetCollector(consumer, telemetry->collector());
  producer::ProcessTelemetry* t = telemetry.get();
  internal::ConsumerAccess::OwnTelemetry(
      consumer,
      std::shared_ptr<void>(telemetry.release(),
                            [](void* p) { delete static_cast<producer::ProcessTelemetry*>(p); }),
      [t] { return t->Finish(); });
}

}  // namespace batchcast::node
