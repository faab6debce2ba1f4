// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// The uint8 RGB sample layout the producer tests size their slots with.
#pragma once

#include "pipeline/pipeline.h"

namespace batchcast::producer::testing {

inline pipeline::SampleLayout Rgb(int size) {
  pipeline::SampleLayout l;
  l.channels = 3;
  l.height = l.width = size;
  l.dtype = pipeline::DType::kUint8;
  return l;
}

}  // namespace batchcast::producer::testing
