// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// File name patterns in NCCL's manner: BATCHCAST_DEBUG_FILE=log.%h.%p, and the per-process
// telemetry files of the Python front doors (telemetry=json=run.%r.json).
#pragma once

#include <string>
#include <string_view>

namespace batchcast::log {

// Expands %h (host), %p (pid) and %r (`rank`) in `pattern`; %% is a %.
std::string ExpandPathPattern(std::string_view pattern, int rank);

}  // namespace batchcast::log
