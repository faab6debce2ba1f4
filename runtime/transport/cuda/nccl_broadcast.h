// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// NCCL broadcast of a staged device slot from the GPU that holds it to one rank on each
// other GPU of the node (MPI jobs, where the set of GPUs is fixed at start). The
// communicator's unique id is plain bytes: the root creates it and the job's node
// communicator broadcasts it with MPI before Create() (node/gpu_runtime.cc does that).
// NCCL picks NVLink/NVSwitch or PCIe itself; Debian's Open MPI is not CUDA-aware, so
// device buffers never go through MPI.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "batchcast/status.h"

namespace batchcast::cuda {

constexpr size_t kNcclIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES

class NcclBroadcast {
 public:
  // A fresh unique id (call on the root only).
  static Result<std::string> NewUniqueId();
  // Joins the communicator of `nranks` GPUs as `rank`, on visible device `device`.
  static Result<std::unique_ptr<NcclBroadcast>> Create(const std::string& unique_id, int nranks,
                                                       int rank, int device);
  virtual ~NcclBroadcast() = default;

  // Broadcasts `bytes` at `buffer` (device memory) from `root` on `stream` (cudaStream_t).
  // Enqueues only; order with events as for any other kernel.
  virtual Status Broadcast(void* buffer, uint64_t bytes, int root, void* stream) = 0;
  virtual uint64_t bytes() const = 0;  // bytes this rank sent or received
  virtual int rank() const = 0;
  virtual int size() const = 0;
};

}  // namespace batchcast::cuda
