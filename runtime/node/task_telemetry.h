// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Telemetry of one process outside an MPI job: a batchcast-run task (leader or trainer), a
// C API leader or consumer, train-many attached to a leader. The `telemetry` option gives
// the same collector and per-rank data as in the MPI Runtime; with no communicator to gather
// over, each process writes its own files: in a run directory (dir:RUN) named by the one rule
// (telemetry/run_outputs.h), else every sink path tagged with the process (run.h5 ->
// run.<tag>.h5), so that the tasks of a job never overwrite each other (`batchcast report`
// reads each). Every path is checked when Start() runs.
#pragma once

#include <memory>
#include <string>

#include "batchcast/consumer.h"
#include "batchcast/options.h"
#include "batchcast/status.h"
#include "telemetry/collector.h"
#include "telemetry/metrics.h"
#include "telemetry/run_outputs.h"

namespace batchcast::node {

class TaskTelemetry {
 public:
  // The collector options.telemetry asks for (null when telemetry is off), tagged with
  // `rank`/`local_rank` and `role`; `tag` names this process in the file names.
  static Result<std::unique_ptr<TaskTelemetry>> Start(const Options& options,
                                                      telemetry::ProcessKind kind, int rank,
                                                      int local_rank, telemetry::Role role,
                                                      const std::string& tag);
  ~TaskTelemetry();  // finishes if Finish() was not called (logs a failure; never throws)
  telemetry::Collector* collector() { return collector_.get(); }
  const telemetry::Sinks& sinks() const { return sinks_; }
  // Writes this process's files and prints its summary. Once; later calls return the
  // first call's status.
  Status Finish();

 private:
  TaskTelemetry() = default;
  std::unique_ptr<telemetry::Collector> collector_;
  telemetry::Sinks sinks_;
  bool finished_ = false;
  Status status_;
};

using telemetry::TaggedPath;  // "run.h5" + "rank3" -> "run.rank3.h5" (run_outputs.h)

// Records `consumer`'s events into a collector it owns from now on: Finish() runs when the
// consumer detaches (Detach() returns its error: files that could not be written) or is
// destroyed (the error is logged). Null `telemetry` (telemetry off) does nothing.
void OwnTelemetry(Consumer& consumer, std::unique_ptr<TaskTelemetry> telemetry);

}  // namespace batchcast::node
