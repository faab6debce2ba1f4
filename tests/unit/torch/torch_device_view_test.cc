// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// CUDA tensors of a DeviceBatch (batchcast/torch.h). Debian's LibTorch is CPU-only: there
// the conversion must refuse with a clear kUnavailable, never crash. With a CUDA LibTorch
// the same call on an empty batch says so; the aliasing of a real device slot is checked
// where a GPU and a CUDA LibTorch meet (docs/gpu.md lists it as unproven here).
#include <gtest/gtest.h>

#include "batchcast/torch.h"

namespace batchcast {
namespace {

TEST(TorchDeviceViewTest, CpuOnlyLibTorchRefusesDeviceBatches) {
  if (at::hasCUDA()) GTEST_SKIP() << "this LibTorch has CUDA: the refusal does not apply";
  DeviceBatch empty;
  auto t = ToTorch(empty);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(t.status().message().find("this LibTorch has no CUDA"), std::string::npos)
      << t.status().message();
  EXPECT_NE(t.status().message().find("ToTorch(batch.host())"), std::string::npos);
  // A view with a device pointer is refused the same way before anything touches it.
  DeviceTensorView v;
  v.data = reinterpret_cast<void*>(uintptr_t{0x1000});
  v.ndim = 1;
  v.shape[0] = 4;
  v.nbytes = 4;
  v.device = 0;
  EXPECT_EQ(ToTensor(empty, v).status().code(), StatusCode::kUnavailable);
}

TEST(TorchDeviceViewTest, CudaLibTorchRefusesAnEmptyBatch) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA in this LibTorch (CPU-only build or no device)";
  DeviceBatch empty;
  auto t = ToTorch(empty);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kFailedPrecondition) << t.status().message();
}

}  // namespace
}  // namespace batchcast
