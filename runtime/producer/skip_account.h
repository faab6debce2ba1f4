// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Accounting of the samples a source skipped under on_bad_sample=skip, for every producer
// (through SlotWriter): counts per epoch and per cause, the first message of each cause,
// and the published samples of each epoch, so that
//   - skips are reported once: the first of each cause at WARN, each epoch's count at INFO
//     when it ends, a summary at the end of the stream (log and telemetry annotation);
//   - an epoch none of whose samples was good ends the stream with an error (never a wait).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "batchcast/status.h"
#include "pipeline/pipeline.h"

namespace batchcast::telemetry {
class Collector;
}

namespace batchcast::producer {

class SkipAccount {
 public:
  // Counts the skipped samples of one fill; logs the first sample of each cause at WARN,
  // the others at DEBUG.
  void AddSkips(uint64_t epoch, const pipeline::BatchResult& result, std::string_view who);
  // Counts one published position of `epoch` holding `samples` good samples.
  void AddPublished(uint64_t epoch, int64_t samples);
  // At the end of `epoch`: its skip count at INFO; an error when positions were published
  // for it and none held a good sample.
  Status EndEpoch(uint64_t epoch, std::string_view who) const;
  // Once at the end of the stream: the totals per cause and per epoch at WARN and as a
  // telemetry annotation (collector may be null). Nothing when nothing was skipped.
  void Report(std::string_view who, telemetry::Collector* collector) const;

  int64_t skipped() const { return skipped_; }
  // "12 bad samples skipped: jpeg 10, empty 2 (epoch 0: 5, epoch 1: 7)".
  std::string Summary() const;

 private:
  struct Cause {
    int64_t count = 0;
    std::string first;  // the first message of this cause
  };
  struct Epoch {
    int64_t positions = 0, good = 0, skipped = 0;
  };
  std::map<std::string, Cause> causes_;
  std::map<uint64_t, Epoch> epochs_;
  int64_t skipped_ = 0;
};

}  // namespace batchcast::producer
