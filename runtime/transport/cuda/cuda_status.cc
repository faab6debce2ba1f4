// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "transport/cuda/cuda_status.h"

#if BATCHCAST_HAVE_CUDA
#include "core/errors.h"
#include "core/log.h"

namespace batchcast::cuda {
namespace {

StatusCode CodeFromCuda(cudaError_t err) {
  switch (err) {
    case cudaErrorMemoryAllocation: return StatusCode::kResourceExhausted;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorDevicesUnavailable: return StatusCode::kUnavailable;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevice: return StatusCode::kInvalidArgument;
    default: return StatusCode::kInternal;
  }
}

}  // namespace

Status CudaError(cudaError_t err, std::string_view what) {
  Status st = MakeError(CodeFromCuda(err), "{}: {} (cudaError {})", what, cudaGetErrorString(err),
                        static_cast<int>(err));
  (void)cudaGetLastError();  // clear the sticky-free error so the next call is judged alone
  BC_LOG(Warn, Cuda, "{}", st.message());
  return st;
}

Status NcclError(int result, const char* text, std::string_view what) {
  Status st = MakeError(StatusCode::kUnavailable, "{}: {} (ncclResult {})", what,
                        text ? text : "unknown nccl error", result);
  BC_LOG(Warn, Cuda, "{}", st.message());
  return st;
}

}  // namespace batchcast::cuda
#endif  // BATCHCAST_HAVE_CUDA
