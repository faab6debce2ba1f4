// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// The MPI Runtime's stream for the front-door resume test (front_door_resume_test.cc):
//   mpirun -n 1 resume_mpi_trainer [Batchcast options, leader_trains=true]
// Rank 0 leads and trains. It prints "ready <pid>" once its leader listens (the socket is
// batchcast-<uid>-<job_id>-n0-<pid>), waits for a line on stdin before its first batch (so
// the test's consumers attach while the stream waits for it), then reads the stream to the
// end, checking that every epoch holds every sample exactly once, and prints
// "trainer <epochs> epochs ok" or "trainer error <message>".
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "batchcast/runtime.h"

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  std::vector<std::string> rest;
  auto o = batchcast::ResolveOptions(std::vector<std::string>(argv + 1, argv + argc), &rest);
  auto rt = o.ok() ? batchcast::Runtime::Create(*o)
                   : batchcast::Result<std::unique_ptr<batchcast::Runtime>>(o.status());
  if (!rt.ok()) {
    std::printf("trainer error %s\n", rt.status().ToString().c_str());
    MPI_Finalize();
    return 2;
  }
  std::printf("ready %d\n", static_cast<int>(getpid()));
  std::fflush(stdout);
  char go[16];
  if (std::fgets(go, sizeof(go), stdin) == nullptr) std::printf("trainer: stdin closed\n");
  const int64_t n = o->limit_samples;
  std::vector<int> seen(static_cast<size_t>(n), 0);
  int64_t epochs = 0;
  bool ok = true;
  batchcast::Batch b;
  for (;;) {
    batchcast::Status st = (*rt)->consumer().Next(&b);
    if (st.code() == batchcast::StatusCode::kEndOfStream) break;
    if (!st.ok()) {
      std::printf("trainer error %s\n", st.ToString().c_str());
      ok = false;
      break;
    }
    for (int64_t i = 0; i < b.images().shape[0] - b.info().repeats; ++i) {
      const int64_t id = b.sample_ids()[i];
      if (id >= 0 && id < n) seen[static_cast<size_t>(id)] += 1;
    }
    if (b.info().last_in_epoch) {
      for (int& v : seen) {
        if (v != 1) ok = false;
        v = 0;
      }
      epochs += 1;
    }
  }
  b.Release();
  batchcast::Status fin = (*rt)->Finalize();
  if (ok && fin.ok()) std::printf("trainer %lld epochs ok\n", static_cast<long long>(epochs));
  else if (ok) std::printf("trainer error %s\n", fin.ToString().c_str());
  else std::printf("trainer error an epoch did not hold every sample exactly once\n");
  std::fflush(stdout);
  MPI_Finalize();
  return ok && fin.ok() ? 0 : 1;
}
