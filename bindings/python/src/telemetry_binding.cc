// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// ProcessTelemetry: the `telemetry` option of the Python front doors, through the same
// collector, sinks and summary as the MPI runtime (runtime/telemetry), finished for this
// process alone.
#include "bindings/python/src/bindings.h"
#include "core/log.h"
#include "core/path_pattern.h"
#include "telemetry/spec.h"

namespace batchcast::python {

ProcessTelemetry::ProcessTelemetry(const Options& options, int rank, telemetry::Role role) {
  auto c = telemetry::CreateCollector(options, rank, -1, role, &sinks_);
  if (!c.ok()) throw StatusError(c.status());
  collector_ = std::move(c).value();
  for (std::string* path : {&sinks_.hdf5, &sinks_.csv, &sinks_.json, &sinks_.trace})
    if (!path->empty()) *path = log::ExpandPathPattern(*path, rank);
}

ProcessTelemetry::~ProcessTelemetry() {
  Status st = Finish();
  if (!st.ok()) BC_LOG(Error, Telem, "telemetry: {}", st.ToString());
}

Status ProcessTelemetry::Finish() {
  std::lock_guard<std::mutex> lock(mu_);
  if (finished_ || collector_ == nullptr) return Status::Ok();
  finished_ = true;
  telemetry::FinishReport report;
  Status st = collector_->Finish(sinks_, &report);
  summary_ = std::move(report.summary_text);
  return st;
}

std::string ProcessTelemetry::summary() const {
  std::lock_guard<std::mutex> lock(mu_);
  return summary_;
}

}  // namespace batchcast::python
