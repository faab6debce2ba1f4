// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The output formats written by rank 0 at Finish() (docs/telemetry-format.md). Each is a
// pure function of the gathered RankData (and the summary), so tests can call them alone.
#pragma once

#include <string>
#include <vector>

#include "batchcast/status.h"
#include "telemetry/rank_data.h"
#include "telemetry/summary.h"

namespace batchcast::telemetry {

inline constexpr int kFormatVersion = 1;

// One HDF5 file: root attributes (tags, summary), a group rank_NNNNN per rank with tag
// attributes, series/<column> datasets, named/<series name> datasets ((n, 2): time_s,
// value) and spans/<field> datasets. Takes Hdf5Lock().
[[nodiscard]] Status WriteHdf5(const std::string& path, const std::vector<RankData>& ranks,
                               const JobSummary& summary, const Diagnosis& diagnosis,
                               const std::string& summary_text);
// One CSV table, a row per (rank, interval): rank,local_rank,host,role,<columns>; and
// beside it (NamedCsvPath), when some rank recorded one, the named series, a row per point:
// rank,local_rank,host,role,series,time_s,value.
[[nodiscard]] Status WriteCsv(const std::string& path, const std::vector<RankData>& ranks);
// run.csv -> run.series.csv (any other name: NAME.series.csv).
std::string NamedCsvPath(const std::string& csv_path);
// One JSON document with tags, per-rank stats, summary and every series.
[[nodiscard]] Status WriteJson(const std::string& path, const std::vector<RankData>& ranks,
                               const JobSummary& summary, const Diagnosis& diagnosis);
// Chrome trace JSON: a process per rank, a complete event per span, flow arrows from the
// leader's publish (or produce) of a batch to every consumer's step of it, and a counter
// track per named series.
[[nodiscard]] Status WriteTrace(const std::string& path, const std::vector<RankData>& ranks);

}  // namespace batchcast::telemetry
