// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The telemetry of one process outside the MPI Runtime (whose ranks gather theirs to rank 0):
// a producer's front door (batchcast serve, the launcher's leader task, the Python Leader and
// Producer, the C API's leader) through producer::Producer, and a consumer that owns its own
// (a trainer under batchcast-run, a Python Consumer). The `telemetry` option gives the same
// collector and per-rank data as in the MPI Runtime; each process writes its own files.
//
// One file-naming rule (telemetry/run_outputs.h): in a run directory (telemetry=dir:RUN) every
// process writes RUN/<kind>-<host>-<pid>.h5; an explicit sink path expands %h, %p and %r to
// the host, the pid and the rank, and gets the process's tag when its front door has several
// processes per job writing the same spec (batchcast-run: run.h5 -> run.node0-leader.h5,
// run.rank3.h5). Every path is created or refused when Start() runs.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "batchcast/options.h"
#include "batchcast/status.h"
#include "telemetry/collector.h"
#include "telemetry/metrics.h"
#include "telemetry/run_outputs.h"

namespace batchcast::producer {

class ProcessTelemetry {
 public:
  // The collector options.telemetry asks for, tagged with rank / local_rank and `role`, its
  // files named for a process of `kind` (and `tag`) by the rule above. Null when telemetry
  // is off.
  static Result<std::unique_ptr<ProcessTelemetry>> Start(const Options& options,
                                                         telemetry::ProcessKind kind, int rank,
                                                         int local_rank, telemetry::Role role,
                                                         std::string_view tag);
  ~ProcessTelemetry();  // finishes if Finish() was not called (logs a failure; never throws)
  ProcessTelemetry(const ProcessTelemetry&) = delete;
  ProcessTelemetry& operator=(const ProcessTelemetry&) = delete;

  telemetry::Collector* collector() const { return collector_.get(); }
  const telemetry::Sinks& sinks() const { return sinks_; }
  // Writes this process's files and prints its summary. Once (thread-safe); later calls
  // return the first call's status.
  Status Finish();
  // The summary table and diagnosis Finish() printed ("" before).
  std::string summary() const;

 private:
  ProcessTelemetry() = default;
  std::unique_ptr<telemetry::Collector> collector_;
  telemetry::Sinks sinks_;
  mutable std::mutex mu_;
  bool finished_ = false;
  Status status_;
  std::string summary_;
};

}  // namespace batchcast::producer
