// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// One run as `batchcast report` sees it (docs/telemetry.md "Report"): every telemetry file of
// a run directory (or one file) read back, summarised and diagnosed by summary.h as if one
// collector had gathered them, and its tables per rank, per trial, per node and for the job
// as JSON for the report page (launcher/report/batchcast_report.py renders them).
#pragma once

#include <string>
#include <vector>

#include "batchcast/status.h"
#include "telemetry/rank_data.h"

namespace batchcast::telemetry {

struct RunFiles {
  std::string label;                    // the run's name in a comparison
  std::string source;                   // the directory or file given
  std::vector<std::string> files;       // telemetry files read
  std::vector<std::string> unfinished;  // claimed at start but never written (killed, or running)
  std::vector<RankData> ranks;          // every rank of every file, in file order
  std::vector<std::string> rank_file;   // the file of each rank
  std::vector<int> rank_in_file;        // its rank number inside that file
};

// A run directory (every *.h5 in it) or one telemetry file. Ranks are renumbered 0..n-1 in
// file order (rank_in_file keeps each file's own numbers). An empty directory, a file that
// is not a telemetry file, or a directory without any written file is an error naming it.
[[nodiscard]] Result<RunFiles> LoadRun(const std::string& path, const std::string& label);

// The run's report data as JSON text: label, source, files, unfinished, the summary text and
// diagnosis (as summary.h prints them), and the tables "ranks", "trials", "nodes" and "job"
// (docs/telemetry-format.md "Report data"). *summary_text, if given, receives the summary.
std::string RunReportJson(const RunFiles& run, std::string* summary_text = nullptr);

}  // namespace batchcast::telemetry
