// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The `telemetry` option: a small spec string naming the sinks and the sampler settings.
//
//   dir:RUN                           (a run directory: every process of the run writes its
//                                      own RUN/<kind>-<host>-<pid>.h5; docs/telemetry.md)
//   telemetry(dir=RUN,trace=on,interval=500ms)   (and its trace, json or csv beside it)
//   telemetry(hdf5=run.h5,csv=run.csv,json=run.json,trace=run.trace.json,interval=1s)
//   hdf5=run.h5                       (the telemetry(...) wrapper is optional)
//   on                                (collect and print the summary, write no files)
//   off | none | ""                   (disabled: the data plane gets a null Collector*)
// Keys: dir (run directory), hdf5, csv, json, trace (paths; with dir: on|off), interval
// (duration: 500ms, 1s, 2m), rows and spans (bounds of the tables), gpu (bool: probe NVML),
// energy (bool: read RAPL/NVML energy), summary (bool: print the summary).
#pragma once

#include <memory>
#include <string_view>

#include "batchcast/options.h"
#include "batchcast/status.h"
#include "telemetry/collector.h"
#include "telemetry/run_outputs.h"

namespace batchcast::telemetry {

struct TelemetrySpec {
  bool enabled = false;
  std::string dir;  // run directory; then sinks.csv/json/trace are "on" or empty
  Sinks sinks;
  CollectorOptions collector;
};

[[nodiscard]] Result<TelemetrySpec> ParseTelemetrySpec(std::string_view text);

// The collector that `options.telemetry` asks for, tagged with options.experiment,
// options.workload and options.run_name and the given rank identity; *sinks receives the
// sinks to pass to Finish(), resolved and checked for `who` (run_outputs.h: a run
// directory's file named by the one rule, or explicit paths with %r/%p/%h expanded and
// `who.tag` inserted; every path created or refused now, naming it and the cause). Returns
// a null collector when telemetry is off.
[[nodiscard]] Result<std::unique_ptr<Collector>> CreateCollector(const Options& options,
                                                                 const OutputIdentity& who,
                                                                 int local_rank, Role role,
                                                                 Sinks* sinks);

}  // namespace batchcast::telemetry
