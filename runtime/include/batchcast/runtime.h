// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The MPI front door. Over a communicator (MPI_COMM_WORLD by default) it forms nodes
// (MPI_Comm_split_type, or virtual nodes of Options::ranks_per_node ranks), makes local
// rank 0 of each node its leader, and hands every other rank a Consumer and a
// trainers-only communicator for its own allreduce/DDP.
//
//   int provided; MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
//   auto rt = batchcast::Runtime::Create(options).value();
//   if (!rt->is_trainer()) return rt->Serve().ok() ? 0 : 1;   // leader ranks
//   for (auto& batch : rt->consumer()) { ... }                // trainer ranks
//   rt->Finalize();
//
// Create() and Finalize() are collective over the communicator.
#pragma once

#include <mpi.h>

#include <memory>

#include "batchcast/consumer.h"
#include "batchcast/export.h"
#include "batchcast/gpu.h"
#include "batchcast/options.h"
#include "batchcast/status.h"

namespace batchcast {

namespace internal {
struct RuntimeState;
struct RuntimeAccess;  // runtime-internal front doors (train-many)
}

class BATCHCAST_API Runtime {
 public:
  static Result<std::unique_ptr<Runtime>> Create(const Options& options,
                                                 MPI_Comm comm = MPI_COMM_WORLD);
  ~Runtime();  // calls Finalize() if it was not called

  bool is_leader() const;
  bool is_trainer() const;
  int node_id() const;
  int local_rank() const;
  int node_size() const;
  // Trainers only (MPI_COMM_NULL on a rank that only leads). Owned by the Runtime.
  MPI_Comm trainer_comm() const;
  // Trainers only.
  Consumer& consumer();
  // Trainers on the GPU data plane (option gpu=auto|on and a visible device, docs/gpu.md):
  // the same stream as device tensors, already on this rank's GPU; null on the host path.
  // Take batches from one of consumer() and gpu_consumer()->Next(), not both.
  GpuConsumer* gpu_consumer();
  // Leader ranks: blocks until the stream is complete and every consumer has detached.
  Status Serve();
  // Collective: ends this rank's part (detaches, or serves to the end) and frees the
  // communicators. Returns the first error any part of this rank met.
  Status Finalize();

 private:
  friend struct internal::RuntimeAccess;
  Runtime() = default;
  std::unique_ptr<internal::RuntimeState> state_;
};

}  // namespace batchcast
