// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// The unit rules of sizes and durations, for every parser that reads one: the options registry
// and the telemetry spec. One rule, so "64m" and "2s" mean the same everywhere, and a value
// beyond int64 is an error naming it (never a wrapped number).
#pragma once

#include <cstdint>
#include <string_view>

#include "batchcast/status.h"

namespace batchcast {

// "64m", "2g", "512k", "4096" → bytes: binary multiples k/m/g/t, an optional trailing 'b',
// any case.
Status ParseSize(std::string_view text, int64_t* bytes);

// "500ms", "10s", "2m", "1500" → milliseconds (a bare number is milliseconds), any case.
Status ParseDuration(std::string_view text, int64_t* ms);

}  // namespace batchcast
