// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "node/task_telemetry.h"

#include "core/log.h"
#include "node/consumer_internal.h"
#include "telemetry/spec.h"

namespace batchcast::node {

std::string TaggedPath(const std::string& path, const std::string& tag) {
  if (path.empty() || tag.empty()) return path;
  const size_t slash = path.find_last_of('/');
  const size_t dot = path.find('.', slash == std::string::npos ? 0 : slash + 1);
  if (dot == std::string::npos || dot == 0 || (slash != std::string::npos && dot == slash + 1))
    return path + "." + tag;
  return path.substr(0, dot) + "." + tag + path.substr(dot);
}

Result<std::unique_ptr<TaskTelemetry>> TaskTelemetry::Start(const Options& options, int rank,
                                                            int local_rank, telemetry::Role role,
                                                            const std::string& tag) {
  std::unique_ptr<TaskTelemetry> t(new TaskTelemetry());
  BC_ASSIGN_OR_RETURN(t->collector_, telemetry::CreateCollector(options, rank, local_rank, role,
                                                                &t->sinks_));
  if (t->collector_ == nullptr) return std::unique_ptr<TaskTelemetry>();
  for (std::string* path : {&t->sinks_.hdf5, &t->sinks_.csv, &t->sinks_.json, &t->sinks_.trace})
    *path = TaggedPath(*path, tag);
  return t;
}

Status TaskTelemetry::Finish() {
  if (finished_ || collector_ == nullptr) return Status::Ok();
  finished_ = true;
  return collector_->Finish(sinks_);
}

TaskTelemetry::~TaskTelemetry() {
  Status st = Finish();
  if (!st.ok()) BC_LOG(Error, Telem, "telemetry: {}", st.ToString());
}

void OwnTelemetry(Consumer& consumer, std::unique_ptr<TaskTelemetry> telemetry) {
  if (telemetry == nullptr) return;
  internal::ConsumerAccess::SetCollector(consumer, telemetry->collector());
  internal::ConsumerAccess::OwnTelemetry(
      consumer, std::shared_ptr<void>(telemetry.release(), [](void* p) {
        delete static_cast<TaskTelemetry*>(p);
      }));
}

}  // namespace batchcast::node
