// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "producer/skip_account.h"

#include "core/errors.h"
#include "core/log.h"
#include "telemetry/collector.h"

namespace batchcast::producer {

void SkipAccount::AddSkips(uint64_t epoch, const pipeline::BatchResult& result,
                           std::string_view who) {
  for (size_t i = 0; i < result.skipped.size(); ++i) {
    const std::string reason = i < result.skip_reasons.size() ? result.skip_reasons[i]
                                                              : std::string("bad sample");
    Cause& cause = causes_[std::string(pipeline::BadSampleCause(reason))];
    if (cause.count++ == 0) {
      cause.first = reason;
      BC_LOG(Warn, Node, "{}: skipped sample {} (on_bad_sample=skip): {}; further samples of "
             "this cause are counted and reported at the end", who, result.skipped[i], reason);
    } else {
      BC_LOG(Debug, Node, "{}: skipped sample {}: {}", who, result.skipped[i], reason);
    }
  }
  const auto n = static_cast<int64_t>(result.skipped.size());
  epochs_[epoch].skipped += n;
  skipped_ += n;
}

void SkipAccount::AddPublished(uint64_t epoch, int64_t samples) {
  Epoch& e = epochs_[epoch];
  e.positions += 1;
  e.good += samples;
}

Status SkipAccount::EndEpoch(uint64_t epoch, std::string_view who) const {
  auto it = epochs_.find(epoch);
  if (it == epochs_.end()) return Status::Ok();
  const Epoch& e = it->second;
  if (e.skipped > 0)
    BC_LOG(Info, Node, "{}: epoch {}: {} of {} samples skipped as bad", who, epoch, e.skipped,
           e.skipped + e.good);
  if (e.positions > 0 && e.good == 0)
    return CorruptDataError(
        "{}: epoch {} has no good sample: every sample it read was skipped as bad ({}); check "
        "the dataset with `batchcast inspect --verify`, or re-create it with `batchcast "
        "convert`", who, epoch, Summary());
  return Status::Ok();
}

std::string SkipAccount::Summary() const {
  std::string out = fmt::format("{} bad samples skipped:", skipped_);
  const char* sep = " ";
  for (const auto& [name, cause] : causes_) {
    out += fmt::format("{}{} {}", sep, name, cause.count);
    sep = ", ";
  }
  sep = " (";
  for (const auto& [epoch, e] : epochs_) {
    if (e.skipped == 0) continue;
    out += fmt::format("{}epoch {}: {}", sep, epoch, e.skipped);
    sep = ", ";
  }
  if (sep[0] == ',') out += ")";
  return out;
}

void SkipAccount::Report(std::string_view who, telemetry::Collector* collector) const {
  if (skipped_ == 0) return;
  std::string line = fmt::format("{}: {}", who, Summary());
  for (const auto& [name, cause] : causes_)
    line += fmt::format("; first {}: {}", name, cause.first);
  BC_LOG(Warn, Node, "{}", line);
  if (collector != nullptr) collector->Annotate(line);
}

}  // namespace batchcast::producer
