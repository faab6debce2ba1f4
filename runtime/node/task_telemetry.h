// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// A consumer that owns its telemetry (a trainer under batchcast-run, a C API consumer, a
// trial of `batchcast train-many`): its collector is a producer::ProcessTelemetry (the one
// telemetry lifecycle; files named by the one rule of telemetry/run_outputs.h, every path
// checked when it starts) that lives as long as the consumer and writes its files when it
// detaches.
#pragma once

#include <memory>

#include "batchcast/consumer.h"
#include "producer/process_telemetry.h"

namespace batchcast::node {

// Records `consumer`'s events into `telemetry` from now on: its Finish() runs when the
// consumer detaches (Detach() returns its error: files that could not be written) or is
// destroyed (the error is logged). Null `telemetry` (telemetry off) does nothing.
void OwnTelemetry(Consumer& consumer, std::unique_ptr<producer::ProcessTelemetry> telemetry);

}  // namespace batchcast::node
