// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// ProcessTelemetry: the `telemetry` option of the Python front doors, through the same
// collector, sinks and summary as the MPI runtime (runtime/telemetry), finished for this
// process alone.
#include "bindings/python/src/bindings.h"
#include "core/log.h"
#include "telemetry/spec.h"

namespace batchcast::python {

ProcessTelemetry::ProcessTelemetry(const Options& options, int rank, telemetry::Role role,
                                   telemetry::ProcessKind kind) {
  // Explicit paths take %r/%p/%h; a run directory (dir:RUN) names the file by its rule.
  // Every path is created or refused here, before the front door starts.
  const telemetry::OutputIdentity who{kind, rank, false, ""};
  auto c = telemetry::CreateCollector(options, who, -1, role, &sinks_);
  if (!c.ok()) throw StatusError(c.status());
  collector_ = std::move(c).value();
}

ProcessTelemetry::~ProcessTelemetry() {
  Status st = Finish();
  if (!st.ok()) BC_LOG(Error, Telem, "telemetry: {}", st.ToString());
}

Status ProcessTelemetry::Finish() {
  std::lock_guard<std::mutex> lock(mu_);
  if (collector_ == nullptr) return Status::Ok();
  if (finished_) return status_;  // every caller sees whether the files were written
  finished_ = true;
  telemetry::FinishReport report;
  status_ = collector_->Finish(sinks_, &report);
  summary_ = std::move(report.summary_text);
  return status_;
}

std::string ProcessTelemetry::summary() const {
  std::lock_guard<std::mutex> lock(mu_);
  return summary_;
}

}  // namespace batchcast::python
