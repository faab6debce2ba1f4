// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "node/task_telemetry.h"

#include "core/log.h"
#include "node/consumer_internal.h"
#include "telemetry/spec.h"

namespace batchcast::node {

Result<std::unique_ptr<TaskTelemetry>> TaskTelemetry::Start(const Options& options,
                                                            telemetry::ProcessKind kind, int rank,
                                                            int local_rank, telemetry::Role role,
                                                            const std::string& tag) {
  std::unique_ptr<TaskTelemetry> t(new TaskTelemetry());
  telemetry::OutputIdentity who{kind, rank, false, tag};
  BC_ASSIGN_OR_RETURN(t->collector_,
                      telemetry::CreateCollector(options, who, local_rank, role, &t->sinks_));
  if (t->collector_ == nullptr) return std::unique_ptr<TaskTelemetry>();
  return t;
}

Status TaskTelemetry::Finish() {
  if (collector_ == nullptr) return Status::Ok();
  if (!finished_) {
    finished_ = true;
    status_ = collector_->Finish(sinks_);
  }
  return status_;
}

TaskTelemetry::~TaskTelemetry() {
  Status st = Finish();
  if (!st.ok()) BC_LOG(Error, Telem, "telemetry: {}", st.ToString());
}

void OwnTelemetry(Consumer& consumer, std::unique_ptr<TaskTelemetry> telemetry) {
  if (telemetry == nullptr) return;
  internal::ConsumerAccess::SetCollector(consumer, telemetry->collector());
  TaskTelemetry* t = telemetry.get();
  internal::ConsumerAccess::OwnTelemetry(
      consumer,
      std::shared_ptr<void>(telemetry.release(),
                            [](void* p) { delete static_cast<TaskTelemetry*>(p); }),
      [t] { return t->Finish(); });
}

}  // namespace batchcast::node
