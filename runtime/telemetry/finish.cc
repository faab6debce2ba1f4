// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Collector::Finish: the end-of-job gather over MPI and the sinks on rank 0. MPI return
// codes become Status here and only here (MpiCheck).
#include <algorithm>
#include <cstdio>

#include "core/errors.h"
#include "core/log.h"
#include "telemetry/collector.h"
#include "telemetry/sinks.h"
#include "telemetry/summary.h"

namespace batchcast::telemetry {
namespace {

Status MpiCheck(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return Status::Ok();
  char text[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  MPI_Error_string(rc, text, &len);
  return UnavailableError("telemetry: {} failed: {}", what, std::string(text, len));
}

// Rank 0's status, shared with every rank so that all return the same.
Status ShareStatus(MPI_Comm comm, int rank, const Status& local) {
  int code = static_cast<int>(local.code());
  BC_RETURN_IF_ERROR(MpiCheck(MPI_Bcast(&code, 1, MPI_INT, 0, comm), "MPI_Bcast of status"));
  if (code == 0) return Status::Ok();
  std::string msg = rank == 0 ? local.message() : std::string();
  int len = static_cast<int>(msg.size());
  BC_RETURN_IF_ERROR(MpiCheck(MPI_Bcast(&len, 1, MPI_INT, 0, comm), "MPI_Bcast of status"));
  msg.resize(len);
  BC_RETURN_IF_ERROR(
      MpiCheck(MPI_Bcast(msg.data(), len, MPI_CHAR, 0, comm), "MPI_Bcast of status"));
  return Status(static_cast<StatusCode>(code), msg);
}

}  // namespace

Status Collector::WriteOutputs(const std::vector<RankData>& ranks, const Sinks& sinks,
                               FinishReport* report) {
  JobSummary summary = Summarize(ranks);
  Diagnosis diagnosis = Diagnose(summary);
  std::string text = FormatSummary(summary, diagnosis) + FormatTrials(ranks, summary.cost) +
                     FormatAnnotations(ranks) + FormatNamedSeries(ranks);
  if (sinks.print_summary) {
    FILE* to = sinks.summary_to != nullptr ? sinks.summary_to : stdout;
    std::fputs(text.c_str(), to);
    std::fflush(to);
  }
  // Every enabled sink is attempted; the first failure is returned.
  Status first;
  auto keep = [&first](Status s) {
    if (!s.ok() && first.ok()) first = s;
  };
  if (!sinks.hdf5.empty()) keep(WriteHdf5(sinks.hdf5, ranks, summary, diagnosis, text));
  if (!sinks.csv.empty()) keep(WriteCsv(sinks.csv, ranks));
  if (!sinks.json.empty()) keep(WriteJson(sinks.json, ranks, summary, diagnosis));
  if (!sinks.trace.empty()) keep(WriteTrace(sinks.trace, ranks));
  if (first.ok())
    BC_LOG(Info, Telem, "telemetry: wrote {} ranks to{}{}{}{}", ranks.size(),
           sinks.hdf5.empty() ? "" : " " + sinks.hdf5, sinks.csv.empty() ? "" : " " + sinks.csv,
           sinks.json.empty() ? "" : " " + sinks.json,
           sinks.trace.empty() ? "" : " " + sinks.trace);
  if (report != nullptr) {
    report->ranks = ranks;
    report->summary_text = std::move(text);
  }
  return first;
}

Status Collector::Finish(const Sinks& sinks, FinishReport* report) {
  if (finished_) return FailedPreconditionError("telemetry: Finish() called twice");
  finished_ = true;
  StopSampler();
  std::vector<RankData> ranks;
  {
    std::lock_guard lock(sample_mu_);
    TakeRow();
    ranks.push_back(BuildRankData());
  }
  return WriteOutputs(ranks, sinks, report);
}

Status Collector::Finish(MPI_Comm comm, const Sinks& sinks, FinishReport* report) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (comm == MPI_COMM_NULL || !initialized || finalized) return Finish(sinks, report);
  if (finished_) return FailedPreconditionError("telemetry: Finish() called twice");
  finished_ = true;
  StopSampler();
  std::string mine;
  {
    std::lock_guard lock(sample_mu_);
    TakeRow();
    mine = SerializeRankData(BuildRankData());
  }
  int rank = 0, size = 1;
  BC_RETURN_IF_ERROR(MpiCheck(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank"));
  BC_RETURN_IF_ERROR(MpiCheck(MPI_Comm_size(comm, &size), "MPI_Comm_size"));
  int len = static_cast<int>(mine.size());
  std::vector<int> lens(rank == 0 ? size : 0), offsets(rank == 0 ? size : 0);
  BC_RETURN_IF_ERROR(MpiCheck(MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, comm),
                              "MPI_Gather of telemetry sizes"));
  std::string all;
  if (rank == 0) {
    int64_t total = 0;
    for (int i = 0; i < size; ++i) {
      offsets[i] = static_cast<int>(total);
      total += lens[i];
    }
    if (total > INT32_MAX)
      return ResourceExhaustedError("telemetry: {} bytes from {} ranks exceed one MPI_Gatherv",
                                    total, size);
    all.resize(static_cast<size_t>(total));
  }
  BC_RETURN_IF_ERROR(MpiCheck(MPI_Gatherv(mine.data(), len, MPI_BYTE, all.data(), lens.data(),
                                          offsets.data(), MPI_BYTE, 0, comm),
                              "MPI_Gatherv of telemetry"));
  Status result;
  if (rank == 0) {
    std::vector<RankData> ranks;
    for (int i = 0; i < size && result.ok(); ++i) {
      Result<RankData> d =
          DeserializeRankData(std::string_view(all).substr(offsets[i], lens[i]));
      if (!d.ok()) result = d.status();
      else ranks.push_back(std::move(d).value());
    }
    std::sort(ranks.begin(), ranks.end(),
              [](const RankData& a, const RankData& b) { return a.tags.rank < b.tags.rank; });
    if (result.ok()) result = WriteOutputs(ranks, sinks, report);
  }
  return ShareStatus(comm, rank, result);
}

}  // namespace batchcast::telemetry
