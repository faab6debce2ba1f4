// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Collector::Finish: the end-of-job gather over MPI and the sinks on rank 0. MPI return
// codes become Status in core/mpi_status.h (BC_MPI), as everywhere else.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <unistd.h>

#include "core/errors.h"
#include "core/log.h"
#include "core/mpi_status.h"
#include "telemetry/collector.h"
#include "telemetry/sinks.h"
#include "telemetry/summary.h"

namespace batchcast::telemetry {
namespace {

// Gathers every rank's serialized telemetry (`mine`) to rank 0 of `comm`: this rank in
// *rank; on rank 0, *all holds the bytes of rank i at (*offsets)[i], (*lens)[i].
Status GatherSerialized(MPI_Comm comm, const std::string& mine, int* rank, std::string* all,
                        std::vector<int>* lens, std::vector<int>* offsets) {
  int size = 1;
  BC_MPI(MPI_Comm_rank(comm, rank), "MPI_Comm_rank");
  BC_MPI(MPI_Comm_size(comm, &size), "MPI_Comm_size");
  const bool root = *rank == 0;
  int len = static_cast<int>(mine.size());
  lens->assign(root ? size : 0, 0);
  offsets->assign(root ? size : 0, 0);
  BC_MPI(MPI_Gather(&len, 1, MPI_INT, lens->data(), 1, MPI_INT, 0, comm),
         "MPI_Gather of telemetry sizes");
  int64_t total = 0;
  for (int i = 0; i < static_cast<int>(lens->size()); ++i) {
    (*offsets)[i] = static_cast<int>(std::min<int64_t>(total, INT32_MAX));
    total += (*lens)[i];
  }
  // Rank 0 alone knows the total: every rank learns whether the gather fits, so that none
  // waits in an MPI_Gatherv the others left.
  int fits = total <= INT32_MAX ? 1 : 0;
  BC_MPI(MPI_Bcast(&fits, 1, MPI_INT, 0, comm), "MPI_Bcast of the telemetry size verdict");
  if (!fits)
    return ResourceExhaustedError("the series of {} ranks exceed one MPI_Gatherv (2 GiB){}; "
                                  "raise the telemetry interval", size,
                                  root ? fmt::format(": {} bytes", total) : std::string());
  if (root) all->resize(static_cast<size_t>(total));
  BC_MPI(MPI_Gatherv(mine.data(), len, MPI_BYTE, all->data(), lens->data(), offsets->data(),
                     MPI_BYTE, 0, comm),
         "MPI_Gatherv of telemetry");
  return Status::Ok();
}

}  // namespace

Status Collector::WriteOutputs(const std::vector<RankData>& ranks, const Sinks& sinks,
                               FinishReport* report) {
  JobSummary summary = Summarize(ranks);
  Diagnosis diagnosis = Diagnose(summary);
  std::string text = FormatSummary(summary, diagnosis) + FormatTrials(ranks, summary.cost) +
                     FormatAnnotations(ranks) + FormatNamedSeries(ranks);
  if (sinks.print_summary) {
    // What is buffered first, then the summary in one write(2): several processes of a job
    // share one stdout pipe, and a summary split at a buffer boundary took another
    // process's line into its middle (a write of at most PIPE_BUF bytes is not split).
    FILE* to = sinks.summary_to != nullptr ? sinks.summary_to : stdout;
    std::fflush(to);
    const int fd = fileno(to);
    for (size_t done = 0; done < text.size();) {
      const ssize_t n =
          RetryEintr([&] { return ::write(fd, text.data() + done, text.size() - done); });
      if (n <= 0) break;  // stdout closed: the files below still carry the summary
      done += static_cast<size_t>(n);
    }
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
  int rank = 0;
  std::string all;
  std::vector<int> lens, offsets;
  BC_RETURN_IF_ERROR(
      GatherSerialized(comm, mine, &rank, &all, &lens, &offsets).WithContext("telemetry"));
  Status result;
  if (rank == 0) {
    std::vector<RankData> ranks;
    for (size_t i = 0; i < lens.size() && result.ok(); ++i) {
      Result<RankData> d =
          DeserializeRankData(std::string_view(all).substr(offsets[i], lens[i]));
      if (!d.ok()) result = d.status();
      else ranks.push_back(std::move(d).value());
    }
    std::sort(ranks.begin(), ranks.end(),
              [](const RankData& a, const RankData& b) { return a.tags.rank < b.tags.rank; });
    if (result.ok()) result = WriteOutputs(ranks, sinks, report);
  }
  // Only rank 0 wrote: every rank returns its verdict.
  return mpi::AgreeOnStatus(comm, result);
}

}  // namespace batchcast::telemetry
