// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The `telemetry` option: a small spec string naming the sinks and the sampler settings.
//
//   telemetry(hdf5=run.h5,csv=run.csv,json=run.json,trace=run.trace.json,interval=1s)
//   hdf5=run.h5                       (the telemetry(...) wrapper is optional)
//   on                                (collect and print the summary, write no files)
//   off | none | ""                   (disabled: the data plane gets a null Collector*)
// Keys: hdf5, csv, json, trace (paths), interval (duration: 500ms, 1s, 2m), rows and spans
// (bounds of the tables), gpu (bool: probe NVML), summary (bool: print the summary).
#pragma once

#include <memory>
#include <string_view>

#include "batchcast/options.h"
#include "batchcast/status.h"
#include "telemetry/collector.h"

namespace batchcast::telemetry {

struct TelemetrySpec {
  bool enabled = false;
  Sinks sinks;
  CollectorOptions collector;
};

[[nodiscard]] Result<TelemetrySpec> ParseTelemetrySpec(std::string_view text);

// The collector that `options.telemetry` asks for, tagged with options.experiment,
// options.workload and options.run_name and the given rank identity; *sinks receives the
// sinks to pass to Finish(). Returns a null collector when telemetry is off.
[[nodiscard]] Result<std::unique_ptr<Collector>> CreateCollector(const Options& options,
                                                                 int rank, int local_rank,
                                                                 Role role, Sinks* sinks);

}  // namespace batchcast::telemetry
