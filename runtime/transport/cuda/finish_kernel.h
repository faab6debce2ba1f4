// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The finishing kernel's launch entry point. Plain C++17 with no project headers, so
// nvcc (C++17 under CMake 3.25) compiles finish_kernel.cu alone; device_ring.cc turns
// the returned cudaError_t into a Status.
#pragma once

#include <cstdint>

namespace batchcast::cuda {

struct FinishKernelArgs {
  uint64_t samples;
  int channels, height, width;
  bool channels_last;
  float mean[3], inv_std[3];
};

// uint8 images (HWC or CHW) -> normalised float32 CHW on `stream` (a cudaStream_t).
// Returns the cudaError_t of the launch as an int (0 = success).
int LaunchFinishKernel(const uint8_t* images, float* out, const FinishKernelArgs& args,
                       void* stream);

}  // namespace batchcast::cuda
