// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// mpirun -n N conformance_mpi --out FILE [--per-rank R:FLAGS;R:FLAGS] [Batchcast options...]
// The MPI Runtime (one node) and the multi-node leader (ranks_per_node virtual nodes, or
// mode=shard) in the front-door conformance test: every trainer rank reads its consumer() to
// the end and writes one digest line per batch (digest.h) to FILE (%r: its world rank);
// --per-rank adds the flags of a world rank (its own batch size). A refused option fails
// Runtime::Create on every rank: rank 0 prints the message, exit code 2.
#include <mpi.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "batchcast/runtime.h"
#include "tests/conformance/digest.h"

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::vector<std::string> words(argv + 1, argv + argc), rest;
  std::string out;
  for (size_t i = 0; i + 1 < words.size();) {
    if (words[i] == "--out") {
      out = words[i + 1];
    } else if (words[i] == "--per-rank") {
      const std::string spec = words[i + 1], me = std::to_string(rank) + ":";
      for (size_t at = 0; at <= spec.size();) {
        size_t end = spec.find(';', at);
        if (end == std::string::npos) end = spec.size();
        const std::string item = spec.substr(at, end - at);
        for (size_t f = me.size(); item.rfind(me, 0) == 0 && f <= item.size();) {
          size_t e = item.find(',', f);
          if (e == std::string::npos) e = item.size();
          words.push_back(item.substr(f, e - f));
          f = e + 1;
        }
        at = end + 1;
      }
    } else {
      ++i;
      continue;
    }
    words.erase(words.begin() + long(i), words.begin() + long(i) + 2);
  }
  if (size_t at = out.find("%r"); at != std::string::npos) out.replace(at, 2, std::to_string(rank));
  auto o = batchcast::ResolveOptions(words, &rest);
  auto rt = o.ok() ? batchcast::Runtime::Create(*o)
                   : batchcast::Result<std::unique_ptr<batchcast::Runtime>>(o.status());
  if (!rt.ok()) {
    if (rank == 0) std::fprintf(stderr, "conformance_mpi: %s\n", rt.status().ToString().c_str());
    MPI_Finalize();
    return 2;
  }
  int rc = 0;
  if ((*rt)->is_trainer()) {
    std::ofstream file(out);
    batchcast::Batch b;
    batchcast::Status st;
    while ((st = (*rt)->consumer().Next(&b)).ok()) {
      file << batchcast::conformance::DigestLine(b) << "\n";
      b.Release();
    }
    if (st.code() != batchcast::StatusCode::kEndOfStream) {
      std::fprintf(stderr, "conformance_mpi: rank %d: %s\n", rank, st.ToString().c_str());
      rc = 1;
    }
  }
  batchcast::Status fin = (*rt)->Finalize();
  if (!fin.ok()) {
    std::fprintf(stderr, "conformance_mpi: rank %d: %s\n", rank, fin.ToString().c_str());
    rc = 1;
  }
  rt->reset();
  MPI_Finalize();
  return rc;
}
