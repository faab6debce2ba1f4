// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// MPI test: every rank records known counts, Finish() gathers them to rank 0 into one
// HDF5 file (+ CSV, JSON, trace). Rank 0 is the leader, the others consumers; rank r
// receives 10·(r+1) batches. run_telemetry_gather.sh then checks the file with h5py.
//   mpirun -n 3 telemetry_gather OUT_DIR
#include <cstdio>
#include <string>

#include "telemetry/collector.h"

using namespace batchcast::telemetry;

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::string out = argc > 1 ? argv[1] : ".";
  Tags tags{"mpi-exp", "mpi-wl", "mpi-run", "", rank, rank, rank == 0 ? Role::kLeader : Role::kConsumer};
  CollectorOptions options;
  options.interval_ms = 50;
  auto created = Collector::Create(tags, options);
  if (!created.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, created.status().ToString().c_str());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  auto c = std::move(created).value();
  int batches = rank == 0 ? 10 * size : 10 * (rank + 1);
  for (int b = 0; b < batches; ++b) {
    int64_t t = NowNs();
    if (rank == 0) {
      c->Add(Counter::kBatchesProduced, 1);
      c->Add(Counter::kSamplesProduced, 8);
      c->AddTime(Timer::kDecode, 1000000);
      c->Span(SpanKind::kPublish, b, t, t + 1000);
    } else {
      c->Add(Counter::kBatchesReceived, 1);
      c->Add(Counter::kSamplesReceived, 8);
      c->AddTime(Timer::kDataWait, 50000);
      c->AddTime(Timer::kStep, 950000);
      c->Span(SpanKind::kStep, b, t, t + 900);
    }
  }
  Sinks sinks;
  sinks.hdf5 = out + "/run.h5";
  sinks.csv = out + "/run.csv";
  sinks.json = out + "/run.json";
  sinks.trace = out + "/run.trace.json";
  FinishReport report;
  batchcast::Status s = c->Finish(MPI_COMM_WORLD, sinks, &report);
  int rc = 0;
  if (!s.ok()) {
    std::fprintf(stderr, "rank %d: finish: %s\n", rank, s.ToString().c_str());
    rc = 1;
  } else if (rank == 0 && static_cast<int>(report.ranks.size()) != size) {
    std::fprintf(stderr, "rank 0: gathered %zu ranks, expected %d\n", report.ranks.size(), size);
    rc = 1;
  } else if (rank != 0 && !report.ranks.empty()) {
    std::fprintf(stderr, "rank %d: non-root got a report\n", rank);
    rc = 1;
  }
  MPI_Finalize();
  return rc;
}
