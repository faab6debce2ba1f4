// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The check the MPI test programs (mpi_dataplane, mpi_multinode) make of a model stage whose
// module returns each image's per-channel mean (tests/python/test_model_stage.py).
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "batchcast/batch.h"

namespace batchcast::testing {

// "" when tensor `name` of `batch` is float32 [size, C] and equals the per-channel means of
// the batch's uint8 [size, C, H, W] images; else what is wrong.
inline std::string CheckChannelMeans(const Batch& batch, const std::string& name) {
  const TensorView img = batch.images(), t = batch.tensor(name.c_str());
  const int64_t size = batch.size(), c = img.shape[1], hw = img.shape[2] * img.shape[3];
  if (t.data == nullptr || t.dtype != DType::kFloat32 || t.ndim != 2 || t.shape[0] != size ||
      t.shape[1] != c || img.dtype != DType::kUint8)
    return fmt::format("batch {} has no float32 [{}, {}] tensor '{}' beside uint8 images",
                       batch.info().index, size, c, name);
  const auto* px = static_cast<const uint8_t*>(img.data);
  const auto* mean = static_cast<const float*>(t.data);
  for (int64_t i = 0; i < size * c; ++i) {
    double sum = 0;
    for (int64_t k = 0; k < hw; ++k) sum += px[i * hw + k];
    if (std::abs(sum / double(hw) - mean[i]) > 1e-3)
      return fmt::format("sample {} channel {}: '{}' is {}, the image's mean {}",
                         batch.sample_ids()[i / c], i % c, name, mean[i], sum / double(hw));
  }
  return "";
}

}  // namespace batchcast::testing
