// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// NCCL, loaded at run time (docs/gpu.md "One build for CPU and GPU nodes"). libbatchcast.so
// carries the CUDA runtime statically (it opens the driver itself, when there is one) and
// opens libnccl.so.2 only when a node's trainers use several GPUs, so neither CUDA nor NCCL
// is a load-time dependency: the same build loads on CPU-only nodes and on GPU nodes.
// nccl.h gives the types only; every call goes through the table below.
#pragma once

#include "batchcast/status.h"

#if BATCHCAST_HAVE_CUDA
#include <cuda_runtime_api.h>
#include <nccl.h>

namespace batchcast::cuda {

struct NcclApi {
  ncclResult_t (*GetUniqueId)(ncclUniqueId* id) = nullptr;
  ncclResult_t (*CommInitRank)(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) = nullptr;
  ncclResult_t (*CommDestroy)(ncclComm_t comm) = nullptr;
  ncclResult_t (*Broadcast)(const void* send, void* recv, size_t count, ncclDataType_t type,
                            int root, ncclComm_t comm, cudaStream_t stream) = nullptr;
  const char* (*GetErrorString)(ncclResult_t result) = nullptr;
  ncclResult_t (*GetVersion)(int* version) = nullptr;
  int version = 0;  // NCCL_VERSION_CODE of the library found (e.g. 22809)
};

// The NCCL functions, resolved once from libnccl.so.2 (the dynamic loader's search path:
// LD_LIBRARY_PATH, ldconfig, or a copy already loaded by PyTorch). kUnavailable naming the
// library, the loader's error and how to provide NCCL when it is missing or too old.
Result<const NcclApi*> LoadNccl();

}  // namespace batchcast::cuda
#endif  // BATCHCAST_HAVE_CUDA
