// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// A consumer that owns its telemetry (a trainer under batchcast-run, a trial of
// `batchcast train-many`): its collector is a producer::ProcessTelemetry (the one telemetry
// lifecycle and file-naming rule, producer/process_telemetry.h) that lives as long as the
// consumer and writes its files when it detaches.
#pragma once

#include <memory>

#include "batchcast/consumer.h"
#include "producer/process_telemetry.h"

namespace batchcast::node {

// Records `consumer`'s events into `telemetry` from now on: its Finish() runs when the
// consumer detaches or is destroyed. Null `telemetry` (telemetry off) does nothing.
void OwnTelemetry(Consumer& consumer, std::unique_ptr<producer::ProcessTelemetry> telemetry);

}  // namespace batchcast::node
