// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Which options a consumer reads. Most of the registry configures the leader (dataset,
// decode, transforms, the ring, GPU staging); a consumer front door whose options are the
// consumer's alone (the Python Consumer, the C API's options string) refuses those when the
// caller set them explicitly, instead of accepting and ignoring them. Values from the
// environment or a config file are not refused: a job-wide BATCHCAST_* setting is meant for
// the leader that shares the job.
#pragma once

#include <string>
#include <string_view>

#include "batchcast/options.h"
#include "batchcast/status.h"

namespace batchcast {

// Whether a consumer reads option `key` (a registry key).
bool ConsumerReadsOption(std::string_view key);

// The first option set explicitly ("code" or "flag" source) that only the leader reads, as
// an error naming it, `leader` (where it belongs, e.g. "batchcast.Leader(...)") and the
// options a consumer accepts; `consumer` names the front door. Ok when there is none.
Status CheckConsumerOptions(const Options& options, std::string_view consumer,
                            std::string_view leader);

}  // namespace batchcast
