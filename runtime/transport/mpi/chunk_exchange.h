// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// ChunkExchange: in-place allgathers of byte ranges among the node leaders, run by one
// background thread so that the caller can decode the next chunk while the previous one
// travels. Each posted chunk is a set of in-place MPI_Allgatherv calls (one per array:
// images, labels, ids) executed in posting order with blocking collectives, which take
// Open MPI's tuned algorithms (and single-copy CMA on one host) instead of the slower
// progress-on-call path of nonblocking collectives; the overlap comes from the thread.
//
// Every leader must post the same sequence of chunks. The caller must not use the
// communicator itself while chunks are in flight: Drain() first (it establishes the
// happens-before between the two threads' MPI calls). Needs MPI_THREAD_MULTIPLE.
#pragma once

#include <mpi.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "batchcast/status.h"

namespace batchcast::mpi {

// One array of one chunk: rank j's part is count[j] elements at displ[j] of `base`.
struct GatherPart {
  uint8_t* base = nullptr;
  MPI_Datatype type = MPI_BYTE;
  std::vector<int> counts, displs;
};

class ChunkExchange {
 public:
  explicit ChunkExchange(MPI_Comm comm);
  ~ChunkExchange();  // stops the thread (after draining)
  ChunkExchange(const ChunkExchange&) = delete;
  ChunkExchange& operator=(const ChunkExchange&) = delete;

  // Queues the parts of one chunk; they run in order, after the chunks posted before.
  void Post(std::vector<GatherPart> parts);
  // Waits until every posted chunk is exchanged; returns the first MPI error since the
  // last Drain (later chunks are skipped after an error, Drain still returns).
  [[nodiscard]] Status Drain();

 private:
  void Loop();

  MPI_Comm comm_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::vector<GatherPart>> queue_;
  int running_ = 0;
  bool stop_ = false;
  Status status_;
  std::thread thread_;
};

}  // namespace batchcast::mpi
