// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Reads a telemetry HDF5 file (docs/telemetry-format.md) back into RankData, so that
// `batchcast report` summarises and diagnoses the processes of a run directory with the same
// code that printed each one's summary (summary.h). Series columns missing from a file (an
// older format, a GPU column without a GPU) read as NaN; spans and named series are not read.
#pragma once

#include <string>
#include <vector>

#include "batchcast/status.h"
#include "telemetry/rank_data.h"

namespace batchcast::telemetry {

// Every rank group of `path`. An error names the file and what is wrong with it.
[[nodiscard]] Result<std::vector<RankData>> ReadTelemetryFile(const std::string& path);

}  // namespace batchcast::telemetry
