// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// Device-side finishing: uint8 images -> normalised float32 CHW, one thread per output value.
#include "transport/cuda/finish_kernel.h"

#include <cuda_runtime.h>

namespace batchcast::cuda {
namespace {

__global__ void FinishKernel(const uint8_t* __restrict__ in, float* __restrict__ out,
                             uint64_t total, FinishKernelArgs a) {
  const uint64_t hw = uint64_t(a.height) * a.width;
  const uint64_t chw = hw * a.channels;
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < total;
       i += uint64_t(gridDim.x) * blockDim.x) {
    const uint64_t n = i / chw, r = i % chw;
    const int c = static_cast<int>(r / hw);
    const uint64_t p = r % hw;  // y * width + x
    const uint64_t src = a.channels_last ? n * chw + p * a.channels + c : i;
    const int k = c < 3 ? c : 2;
    out[i] = (float(in[src]) * (1.0f / 255.0f) - a.mean[k]) * a.inv_std[k];
  }
}

}  // namespace

int LaunchFinishKernel(const uint8_t* images, float* out, const FinishKernelArgs& args,
                       void* stream) {
  const uint64_t total = args.samples * args.channels * args.height * args.width;
  if (total == 0) return 0;
  const int threads = 256;
  const uint64_t want = (total + threads - 1) / threads;
  const int blocks = static_cast<int>(want < 65535 ? want : 65535);
  FinishKernel<<<blocks, threads, 0, static_cast<cudaStream_t>(stream)>>>(images, out, total, args);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace batchcast::cuda
