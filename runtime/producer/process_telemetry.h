// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The telemetry of one process outside the MPI Runtime (whose ranks gather theirs to rank 0):
// a producer's front door (batchcast serve, the launcher's leader task, the Python Leader and
// Producer, the C API's leader) through producer::Producer, and a consumer that owns its own
// (a trainer under batchcast-run, a Python Consumer). The `telemetry` option gives the same
// collector and per-rank data as in the MPI Runtime; each process writes its own files.
//
// One file-naming rule (TelemetryPath): %h, %p and %r in a sink path expand to the host, the
// pid and the rank; a path without a pattern gets the process's tag, when its front door has
// several processes per job writing the same spec (batchcast-run: run.h5 ->
// run.node0-leader.h5, run.rank3.h5), before the first dot of the file name.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "batchcast/options.h"
#include "batchcast/status.h"
#include "telemetry/collector.h"
#include "telemetry/metrics.h"

namespace batchcast::producer {

// The rule above: "run.h5" + "rank3" -> "run.rank3.h5"; "out/run" -> "out/run.rank3";
// "run.%r.h5" (rank 3) -> "run.3.h5" whatever the tag. Empty stays empty.
std::string TelemetryPath(const std::string& path, int rank, std::string_view tag);

class ProcessTelemetry {
 public:
  // The collector options.telemetry asks for, tagged with rank / local_rank and `role`, its
  // sink paths named by TelemetryPath(path, rank, tag). Null when telemetry is off.
  static Result<std::unique_ptr<ProcessTelemetry>> Start(const Options& options, int rank,
                                                         int local_rank, telemetry::Role role,
                                                         std::string_view tag);
  ~ProcessTelemetry();  // finishes if Finish() was not called (logs a failure; never throws)
  ProcessTelemetry(const ProcessTelemetry&) = delete;
  ProcessTelemetry& operator=(const ProcessTelemetry&) = delete;

  telemetry::Collector* collector() const { return collector_.get(); }
  const telemetry::Sinks& sinks() const { return sinks_; }
  // Writes this process's files and prints its summary. Once (thread-safe); later calls
  // return Ok.
  Status Finish();
  // The summary table and diagnosis Finish() printed ("" before).
  std::string summary() const;

 private:
  ProcessTelemetry() = default;
  std::unique_ptr<telemetry::Collector> collector_;
  telemetry::Sinks sinks_;
  mutable std::mutex mu_;
  bool finished_ = false;
  std::string summary_;
};

}  // namespace batchcast::producer
