// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The one place where CUDA and NCCL return codes become Status. Only meaningful in a
// build with BATCHCAST_HAVE_CUDA; a CPU-only build sees the device-count probe alone
// (device_probe.h), whose stub explains that CUDA was not built in.
#pragma once

#include <string_view>

#include "batchcast/status.h"

#if BATCHCAST_HAVE_CUDA
#include <cuda_runtime_api.h>

namespace batchcast::cuda {

// "<what>: <cudaGetErrorString> (cudaError N)"; logs at the CUDA subsystem.
Status CudaError(cudaError_t err, std::string_view what);
// Same for NCCL (ncclResult_t passed as int so this header needs no nccl.h).
Status NcclError(int result, const char* text, std::string_view what);

}  // namespace batchcast::cuda

// Evaluates a CUDA runtime call; returns a Status naming `what` when it fails.
#define BC_CUDA_RETURN_IF_ERROR(call, what)                         \
  do {                                                              \
    cudaError_t bc_cuda_err_ = (call);                              \
    if (bc_cuda_err_ != cudaSuccess)                                \
      return ::batchcast::cuda::CudaError(bc_cuda_err_, (what));    \
  } while (0)

#endif  // BATCHCAST_HAVE_CUDA
