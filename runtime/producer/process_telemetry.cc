// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "producer/process_telemetry.h"

#include "core/log.h"
#include "core/path_pattern.h"
#include "telemetry/spec.h"

namespace batchcast::producer {

std::string TelemetryPath(const std::string& path, int rank, std::string_view tag) {
  if (path.empty()) return path;
  if (path.find('%') != std::string::npos) return log::ExpandPathPattern(path, rank);
  if (tag.empty()) return path;
  const size_t slash = path.find_last_of('/');
  const size_t dot = path.find('.', slash == std::string::npos ? 0 : slash + 1);
  if (dot == std::string::npos || dot == 0 || (slash != std::string::npos && dot == slash + 1))
    return path + "." + std::string(tag);
  return path.substr(0, dot) + "." + std::string(tag) + path.substr(dot);
}

Result<std::unique_ptr<ProcessTelemetry>> ProcessTelemetry::Start(const Options& options,
                                                                  int rank, int local_rank,
                                                                  telemetry::Role role,
                                                                  std::string_view tag) {
  std::unique_ptr<ProcessTelemetry> t(new ProcessTelemetry());
  BC_ASSIGN_OR_RETURN(t->collector_, telemetry::CreateCollector(options, rank, local_rank, role,
                                                                &t->sinks_));
  if (t->collector_ == nullptr) return std::unique_ptr<ProcessTelemetry>();
  for (std::string* path : {&t->sinks_.hdf5, &t->sinks_.csv, &t->sinks_.json, &t->sinks_.trace})
    *path = TelemetryPath(*path, rank, tag);
  return t;
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

ProcessTelemetry::~ProcessTelemetry() {
  Status st = Finish();
  if (!st.ok()) BC_LOG(Error, Telem, "telemetry: {}", st.ToString());
}

}  // namespace batchcast::producer
