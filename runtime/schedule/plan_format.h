// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The plan printed before training: per bucket its size, batch size and LR factor;
// per epoch (runs of identical epochs folded into one row) the samples trained at each
// size, the steps at the base batch size and the pixel work relative to a full-size epoch.
#pragma once

#include <span>
#include <string>

#include "batchcast/status.h"
#include "schedule/resize_schedule.h"

namespace batchcast::schedule {

// Formats `summaries` (from schedule.Summaries()) as a multi-line table.
std::string FormatPlan(const ResizeSchedule& schedule, std::span<const EpochSummary> summaries);

// Summaries() then FormatPlan().
[[nodiscard]] Result<std::string> FormatPlan(const ResizeSchedule& schedule);

}  // namespace batchcast::schedule
