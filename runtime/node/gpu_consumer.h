// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Builds a GpuConsumer (batchcast/gpu.h) over any device map: CUDA IPC to a stager or relay
// (gpu/), or local to the ring's own process. The front doors (node/runtime.cc,
// GpuConsumer::Attach) hand it the map gpu/ opened.
#pragma once

#include <memory>

#include "batchcast/consumer.h"
#include "batchcast/gpu.h"
#include "batchcast/status.h"
#include "transport/cuda/device_map.h"

namespace batchcast::internal {

struct GpuConsumerFactory {
  static Result<std::unique_ptr<GpuConsumer>> Make(Consumer& consumer,
                                                   std::unique_ptr<cuda::DeviceMap> map);
};

}  // namespace batchcast::internal
