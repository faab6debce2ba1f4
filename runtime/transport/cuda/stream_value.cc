// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "transport/cuda/stream_value.h"

#include "core/errors.h"
#include "transport/cuda/cuda_status.h"
#include "transport/cuda/device_probe.h"

#if BATCHCAST_HAVE_CUDA
#include <cuda.h>
#endif

namespace batchcast::cuda {

#if BATCHCAST_HAVE_CUDA
namespace {

using WaitFn = CUresult (*)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);
using WriteFn = CUresult (*)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);

struct Entry {
  WaitFn wait = nullptr;
  WriteFn write = nullptr;
  Status status;
};

const Entry& Resolve() {
  static const Entry entry = [] {
    Entry e;
    cudaDriverEntryPointQueryResult q{};
    void* fn = nullptr;
    cudaError_t err = cudaGetDriverEntryPointByVersion("cuStreamWaitValue64", &fn, 12000,
                                                       cudaEnableDefault, &q);
    if (err != cudaSuccess || q != cudaDriverEntryPointSuccess || fn == nullptr) {
      e.status = err != cudaSuccess ? CudaError(err, "gpu: resolve cuStreamWaitValue64")
                                    : UnavailableError("gpu: the CUDA driver has no "
                                                       "cuStreamWaitValue64; update the driver");
      return e;
    }
    e.wait = reinterpret_cast<WaitFn>(fn);
    fn = nullptr;
    err = cudaGetDriverEntryPointByVersion("cuStreamWriteValue64", &fn, 12000, cudaEnableDefault,
                                           &q);
    if (err != cudaSuccess || q != cudaDriverEntryPointSuccess || fn == nullptr) {
      e.status = err != cudaSuccess ? CudaError(err, "gpu: resolve cuStreamWriteValue64")
                                    : UnavailableError("gpu: the CUDA driver has no "
                                                       "cuStreamWriteValue64; update the driver");
      e.wait = nullptr;
      return e;
    }
    e.write = reinterpret_cast<WriteFn>(fn);
    return e;
  }();
  return entry;
}

Status DriverError(CUresult r, const char* what) {
  return UnavailableError("{}: CUDA driver error {} (stream memory operations need a device "
                          "and driver that support them)", what, static_cast<int>(r));
}

}  // namespace

Status StreamWriteValue(void* stream, void* device_address, uint64_t value) {
  const Entry& e = Resolve();
  if (e.write == nullptr) return e.status;
  CUresult r = e.write(static_cast<CUstream>(stream), reinterpret_cast<CUdeviceptr>(device_address),
                       value, CU_STREAM_WRITE_VALUE_DEFAULT);
  if (r != CUDA_SUCCESS) return DriverError(r, "gpu: write a slot's sequence word");
  return Status::Ok();
}

Status StreamWaitValue(void* stream, const void* device_address, uint64_t value) {
  const Entry& e = Resolve();
  if (e.wait == nullptr) return e.status;
  CUresult r = e.wait(static_cast<CUstream>(stream),
                      reinterpret_cast<CUdeviceptr>(const_cast<void*>(device_address)), value,
                      CU_STREAM_WAIT_VALUE_GEQ);
  if (r != CUDA_SUCCESS) return DriverError(r, "gpu: wait for a slot's sequence word");
  return Status::Ok();
}

#else  // CPU-only build

Status StreamWriteValue(void*, void*, uint64_t) { return VisibleDeviceCount().status(); }
Status StreamWaitValue(void*, const void*, uint64_t) { return VisibleDeviceCount().status(); }

#endif

}  // namespace batchcast::cuda
