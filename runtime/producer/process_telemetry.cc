// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "producer/process_telemetry.h"

#include "core/log.h"
#include "telemetry/spec.h"

namespace batchcast::producer {

Result<std::unique_ptr<ProcessTelemetry>> ProcessTelemetry::Start(
    const Options& options, telemetry::ProcessKind kind, int rank, int local_rank,
    telemetry::Role role, std::string_view tag) {
  std::unique_ptr<ProcessTelemetry> t(new ProcessTelemetry());
  const telemetry::OutputIdentity who{kind, rank, false, std::string(tag)};
  BC_ASSIGN_OR_RETURN(t->collector_,
                      telemetry::CreateCollector(options, who, local_rank, role, &t->sinks_));
  if (t->collector_ == nullptr) return std::unique_ptr<ProcessTelemetry>();
  return t;
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

ProcessTelemetry::~ProcessTelemetry() {
  Status st = Finish();
  if (!st.ok()) BC_LOG(Error, Telem, "telemetry: {}", st.ToString());
}

}  // namespace batchcast::producer
