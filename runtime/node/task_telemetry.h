// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Telemetry of one process outside an MPI job: a batchcast-run task (leader or trainer), a
// Python Leader, Producer or Consumer. The `telemetry` option gives the same collector and
// per-rank data as in the MPI Runtime; with no communicator to gather over, each process
// writes its own files, every sink path tagged with the process (run.h5 -> run.<tag>.h5),
// so that the tasks of a job never overwrite each other (`batchcast report` reads each).
#pragma once

#include <memory>
#include <string>

#include "batchcast/consumer.h"
#include "batchcast/options.h"
#include "batchcast/status.h"
#include "telemetry/collector.h"
#include "telemetry/metrics.h"

namespace batchcast::node {

class TaskTelemetry {
 public:
  // The collector options.telemetry asks for (null when telemetry is off), tagged with
  // `rank`/`local_rank` and `role`; `tag` names this process in the file names.
  static Result<std::unique_ptr<TaskTelemetry>> Start(const Options& options, int rank,
                                                      int local_rank, telemetry::Role role,
                                                      const std::string& tag);
  ~TaskTelemetry();  // finishes if Finish() was not called (logs a failure; never throws)
  telemetry::Collector* collector() { return collector_.get(); }
  const telemetry::Sinks& sinks() const { return sinks_; }
  // Writes this process's files and prints its summary. Once.
  Status Finish();

 private:
  TaskTelemetry() = default;
  std::unique_ptr<telemetry::Collector> collector_;
  telemetry::Sinks sinks_;
  bool finished_ = false;
};

// "run.h5" + "rank3" -> "run.rank3.h5"; "out/run" -> "out/run.rank3". Empty stays empty.
std::string TaggedPath(const std::string& path, const std::string& tag);

// Records `consumer`'s events into a collector it owns from now on: Finish() runs when the
// consumer detaches or is destroyed. Null `telemetry` (telemetry off) does nothing.
void OwnTelemetry(Consumer& consumer, std::unique_ptr<TaskTelemetry> telemetry);

}  // namespace batchcast::node
